/// @file
/// The parent ⇄ facetrace-gpud protocol: round trips of the request/response structs, rejection of malformed
/// headers, truncated and hostile payloads, and a server that answers a corrupt request with an error and
/// keeps serving.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "facetrace/runtime/testing/simulated_executor.h"
#include "ipc/executor_server.h"
#include "ipc/protocol.h"

namespace facetrace::runtime::proto {
namespace {

using namespace std::chrono_literals;

template <class T>
T round_trip(const T& m) {
  auto back = decode_payload<T>(encode_payload(m));
  EXPECT_TRUE(back.ok()) << back.status().to_string();
  return back.ok() ? *back : T{};
}

/// Every strict prefix of `bytes` (a valid encoding of T) is rejected as malformed `name`.
template <class T>
void expect_every_prefix_rejected(const std::vector<std::byte>& bytes, const std::string& name) {
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = decode_payload<T>(std::span(bytes.data(), n));
    ASSERT_FALSE(r.ok()) << name << " accepted a prefix of " << n << " of " << bytes.size() << " bytes";
    EXPECT_NE(r.status().what().find("protocol: malformed " + name + ": truncated"), std::string::npos)
        << r.status().what();
  }
}

InvokeReq sample_invoke() {
  InvokeReq q;
  q.op = 0x10002;
  q.in = {4096, 100};
  q.out = {8192, 200};
  q.deadline_ms = 1234;
  q.args = {std::byte{1}, std::byte{2}, std::byte{3}};
  return q;
}

HelloMsg sample_hello() {
  HelloMsg h;
  h.state = ExecutorState::kReady;
  h.reason = "ok";
  h.info.name = "NVIDIA H200";
  h.info.cc_major = 9;
  h.info.total_memory = 150ull << 30;
  h.info.async_engines = 3;
  h.info.simulated = true;
  h.pid = 4242;
  return h;
}

TEST(Protocol, round_trips_an_invoke_request_in_a_message) {
  const InvokeReq q = sample_invoke();
  const auto datagram = encode({InvokeReq::kCmd, 77, encode_payload(q)});
  auto m = decode(datagram);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->cmd, Cmd::kInvoke);
  EXPECT_EQ(m->seq, 77u);
  auto back = decode_payload<InvokeReq>(m->payload);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->op, q.op);
  EXPECT_EQ(back->in.offset, 4096u);
  EXPECT_EQ(back->in.size, 100u);
  EXPECT_EQ(back->out.offset, 8192u);
  EXPECT_EQ(back->out.size, 200u);
  EXPECT_EQ(back->deadline_ms, 1234u);
  EXPECT_EQ(back->args, q.args);
}

TEST(Protocol, round_trips_every_response_and_the_hello) {
  const ReplyMsg r = round_trip(ReplyMsg{Code::kDeviceLost, "cudaErrorIllegalAddress", {std::byte{9}}});
  EXPECT_EQ(r.code, Code::kDeviceLost);
  EXPECT_EQ(r.what, "cudaErrorIllegalAddress");
  EXPECT_EQ(r.payload, std::vector<std::byte>{std::byte{9}});

  const HelloMsg h = round_trip(sample_hello());
  EXPECT_EQ(h.state, ExecutorState::kReady);
  EXPECT_EQ(h.reason, "ok");
  EXPECT_EQ(h.info.name, "NVIDIA H200");
  EXPECT_EQ(h.info.cc_major, 9);
  EXPECT_EQ(h.info.total_memory, 150ull << 30);
  EXPECT_EQ(h.info.async_engines, 3);
  EXPECT_TRUE(h.info.simulated);
  EXPECT_EQ(h.pid, 4242u);

  InvokeRsp o;
  o.reply.put(3.5);
  o.reply.tickets.push_back(RingTicket{8192, 3, 7, 5000});
  o.reply.tickets.push_back(RingTicket{4096, 1, 2, 12});
  const InvokeRsp ob = round_trip(o);
  double d = 0;
  ASSERT_TRUE(ob.reply.get(d));
  EXPECT_EQ(d, 3.5);
  ASSERT_EQ(ob.reply.tickets.size(), 2u);
  EXPECT_EQ(ob.reply.tickets[0].size_class, 8192u);
  EXPECT_EQ(ob.reply.tickets[0].slot, 3u);
  EXPECT_EQ(ob.reply.tickets[0].generation, 7u);
  EXPECT_EQ(ob.reply.tickets[0].byte_len, 5000u);
  EXPECT_EQ(ob.reply.tickets[1].byte_len, 12u);

  RingStatsRsp s;
  s.stats.dispatches = 11;
  s.stats.stalls = 2;
  s.stats.budget_bytes = 1ull << 33;
  s.stats.max_slots_per_class = 256;
  const RingStatsRsp sb = round_trip(s);
  EXPECT_EQ(sb.stats.dispatches, 11u);
  EXPECT_EQ(sb.stats.stalls, 2u);
  EXPECT_EQ(sb.stats.budget_bytes, 1ull << 33);
  EXPECT_EQ(sb.stats.max_slots_per_class, 256u);

  const RingWaitReq w = round_trip(RingWaitReq{RingTicket{4096, 5, 9, 100}, 750});
  EXPECT_EQ(w.ticket.slot, 5u);
  EXPECT_EQ(w.ticket.generation, 9u);
  EXPECT_EQ(w.deadline_ms, 750u);
  EXPECT_EQ(round_trip(RingWaitRsp{ArenaRange{12288, 100}}).range.offset, 12288u);
  const PutResidentReq p = round_trip(PutResidentReq{"weights", ArenaRange{1 << 20, 3000}});
  EXPECT_EQ(p.name, "weights");
  EXPECT_EQ(p.range.size, 3000u);
  EXPECT_EQ(round_trip(InjectFaultReq{FaultKind::kIllegalAddress}).kind, FaultKind::kIllegalAddress);
  EXPECT_TRUE(encode_payload(PingReq{}).empty());
  EXPECT_TRUE(decode_payload<EmptyRsp>({}).ok());
}

TEST(Protocol, rejects_malformed_headers) {
  auto good = encode({Cmd::kPing, 1, {}});
  ASSERT_EQ(good.size(), kHeaderBytes);
  ASSERT_TRUE(decode(good).ok());

  auto bad_magic = good;
  bad_magic[0] = std::byte{0};
  EXPECT_NE(decode(bad_magic).status().what().find("magic"), std::string::npos);

  auto bad_version = good;
  bad_version[4] = std::byte{99};
  EXPECT_NE(decode(bad_version).status().what().find("version"), std::string::npos);

  auto bad_type = good;
  bad_type[6] = std::byte{0x77};
  EXPECT_NE(decode(bad_type).status().what().find("unknown message type"), std::string::npos);

  for (std::size_t n = 0; n < kHeaderBytes; ++n)
    EXPECT_NE(decode(std::span(good.data(), n)).status().what().find("shorter than the header"),
              std::string::npos);

  auto longer = encode({Cmd::kPing, 1, {std::byte{1}, std::byte{2}}});
  longer.pop_back();  // header says 2 payload bytes, datagram has 1
  EXPECT_NE(decode(longer).status().what().find("declares"), std::string::npos);

  std::vector<std::byte> huge(kMaxMessageBytes + 1);
  EXPECT_NE(decode(huge).status().what().find("exceeds the maximum"), std::string::npos);
}

TEST(Protocol, rejects_truncated_and_padded_payloads) {
  expect_every_prefix_rejected<InvokeReq>(encode_payload(sample_invoke()), "invoke payload");
  expect_every_prefix_rejected<HelloMsg>(encode_payload(sample_hello()), "hello payload");
  InvokeRsp o;
  o.reply.put(1.0);
  o.reply.tickets.push_back(RingTicket{4096, 1, 1, 8});
  expect_every_prefix_rejected<InvokeRsp>(encode_payload(o), "reply payload");
  expect_every_prefix_rejected<ReplyMsg>(encode_payload(ReplyMsg{Code::kOk, "x", {std::byte{1}}}),
                                         "reply payload");
  expect_every_prefix_rejected<RingWaitReq>(encode_payload(RingWaitReq{}), "ring_wait payload");

  auto padded = encode_payload(sample_invoke());
  padded.push_back(std::byte{0});
  const auto r = decode_payload<InvokeReq>(padded);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().what().find("trailing"), std::string::npos) << r.status().what();
  EXPECT_FALSE(decode_payload<PingReq>(std::vector<std::byte>{std::byte{1}}).ok());
}

TEST(Protocol, rejects_hostile_lengths_counts_and_enum_values) {
  // A name claiming 4 GiB: rejected before any allocation.
  auto name = encode_payload(DropResidentReq{"abc"});
  name[0] = name[1] = name[2] = name[3] = std::byte{0xff};
  auto dr = decode_payload<DropResidentReq>(name);
  ASSERT_FALSE(dr.ok());
  EXPECT_NE(dr.status().what().find("length of 4294967295"), std::string::npos) << dr.status().what();

  // An op reply claiming 5000 tickets with no bytes for them.
  InvokeRsp o;
  auto claims = encode_payload(o);
  ASSERT_EQ(claims.size(), 8u);  // u32 inline length 0, u32 ticket count 0
  claims[4] = std::byte{0x88};
  claims[5] = std::byte{0x13};  // 5000
  EXPECT_FALSE(decode_payload<InvokeRsp>(claims).ok());

  auto code = encode_payload(ReplyMsg{Code::kOk, "", {}});
  code[0] = std::byte{200};  // no such Code
  EXPECT_NE(decode_payload<ReplyMsg>(code).status().what().find("out of range"), std::string::npos);

  auto state = encode_payload(sample_hello());
  state[0] = std::byte{9};  // no such ExecutorState
  EXPECT_FALSE(decode_payload<HelloMsg>(state).ok());

  auto kind = encode_payload(InjectFaultReq{FaultKind::kSimulatedLoss});
  kind[0] = std::byte{7};  // no such FaultKind
  EXPECT_FALSE(decode_payload<InjectFaultReq>(kind).ok());

  auto flag = encode_payload(sample_hello());
  flag[flag.size() - 5] = std::byte{2};  // DeviceInfo::simulated is a bool (the byte before the pid)
  EXPECT_FALSE(decode_payload<HelloMsg>(flag).ok());
}

/// One request over a socketpair to a server thread; returns the reply.
ReplyMsg exchange(int fd, Cmd cmd, std::uint32_t seq, std::vector<std::byte> payload) {
  EXPECT_TRUE(send_message(fd, {cmd, seq, std::move(payload)}).ok());
  auto msg = recv_message(fd, 5000ms);
  EXPECT_TRUE(msg.ok()) << msg.status().to_string();
  if (!msg) return {};
  EXPECT_EQ(msg->cmd, Cmd::kReply);
  EXPECT_EQ(msg->seq, seq);
  auto reply = decode_payload<ReplyMsg>(msg->payload);
  EXPECT_TRUE(reply.ok()) << reply.status().to_string();
  return reply.ok() ? *reply : ReplyMsg{};
}

TEST(ExecutorServer, answers_a_corrupt_request_with_an_error_and_keeps_serving) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  auto sim = make_simulated_executor();
  ASSERT_NE(sim, nullptr);
  const Status started = sim->start();
  ASSERT_TRUE(started.ok());
  int exit_code = -1;
  std::thread server([&] { exit_code = ExecutorServer::serve(sv[1], *sim, started); });

  auto hello_msg = recv_message(sv[0], 5000ms);
  ASSERT_TRUE(hello_msg.ok());
  ASSERT_EQ(hello_msg->cmd, Cmd::kHello);
  auto hello = decode_payload<HelloMsg>(hello_msg->payload);
  ASSERT_TRUE(hello.ok());
  EXPECT_TRUE(hello->info.simulated);

  auto truncated = encode_payload(sample_invoke());
  truncated.resize(truncated.size() - 2);
  const ReplyMsg bad = exchange(sv[0], Cmd::kInvoke, 1, truncated);
  EXPECT_EQ(bad.code, Code::kInvalidArgument);
  EXPECT_NE(bad.what.find("malformed invoke"), std::string::npos) << bad.what;

  const ReplyMsg outside =
      exchange(sv[0], Cmd::kPutResident, 2, encode_payload(PutResidentReq{"w", ArenaRange{1ull << 40, 16}}));
  EXPECT_EQ(outside.code, Code::kInvalidArgument);
  EXPECT_NE(outside.what.find("outside the arena"), std::string::npos) << outside.what;

  const ReplyMsg hello_back = exchange(sv[0], Cmd::kHello, 3, {});
  EXPECT_EQ(hello_back.code, Code::kInvalidArgument);

  const ReplyMsg ping = exchange(sv[0], Cmd::kPing, 4, encode_payload(PingReq{}));
  EXPECT_EQ(ping.code, Code::kOk) << ping.what;
  EXPECT_EQ(sim->state(), ExecutorState::kReady);

  const ReplyMsg bye = exchange(sv[0], Cmd::kShutdown, 5, encode_payload(ShutdownReq{}));
  EXPECT_EQ(bye.code, Code::kOk);
  server.join();
  EXPECT_EQ(exit_code, kGpudExitOk);
  ::close(sv[0]);
  ::close(sv[1]);
}

}  // namespace
}  // namespace facetrace::runtime::proto
