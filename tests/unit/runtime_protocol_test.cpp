/// @file
/// The parent ⇄ facetrace-gpud protocol: round trips and rejection of malformed messages.
#include <gtest/gtest.h>

#include "ipc/protocol.h"

namespace facetrace::runtime::proto {
namespace {

TEST(Protocol, round_trips_an_invoke_request) {
  InvokeRequest q;
  q.op = 0x10002;
  q.in = {4096, 100};
  q.out = {8192, 200};
  q.deadline_ms = 1234;
  q.args = {std::byte{1}, std::byte{2}, std::byte{3}};
  const auto datagram = encode({MsgType::kInvoke, 77, encode_invoke(q)});
  auto m = decode(datagram);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->type, MsgType::kInvoke);
  EXPECT_EQ(m->seq, 77u);
  auto back = decode_invoke(m->payload);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->op, q.op);
  EXPECT_EQ(back->in.offset, 4096u);
  EXPECT_EQ(back->out.size, 200u);
  EXPECT_EQ(back->deadline_ms, 1234u);
  EXPECT_EQ(back->args, q.args);
}

TEST(Protocol, round_trips_replies_hello_and_op_replies) {
  Reply r{Code::kDeviceLost, "cudaErrorIllegalAddress", {std::byte{9}}};
  auto rb = decode_reply(encode_reply(r));
  ASSERT_TRUE(rb.ok());
  EXPECT_EQ(rb->code, Code::kDeviceLost);
  EXPECT_EQ(rb->what, r.what);
  EXPECT_EQ(rb->payload, r.payload);

  Hello h;
  h.state = ExecutorState::kReady;
  h.info.name = "NVIDIA H200";
  h.info.cc_major = 9;
  h.info.total_memory = 150ull << 30;
  h.info.async_engines = 3;
  h.pid = 4242;
  auto hb = decode_hello(encode_hello(h));
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->info.name, "NVIDIA H200");
  EXPECT_EQ(hb->info.total_memory, 150ull << 30);
  EXPECT_EQ(hb->pid, 4242u);

  OpReply o;
  o.put(3.5);
  o.tickets.push_back(RingTicket{8192, 3, 7, 5000});
  auto ob = decode_op_reply(encode_op_reply(o));
  ASSERT_TRUE(ob.ok());
  double d = 0;
  ASSERT_TRUE(ob->get(d));
  EXPECT_EQ(d, 3.5);
  ASSERT_EQ(ob->tickets.size(), 1u);
  EXPECT_EQ(ob->tickets[0].slot, 3u);
  EXPECT_EQ(ob->tickets[0].generation, 7u);
  EXPECT_EQ(ob->tickets[0].byte_len, 5000u);
}

TEST(Protocol, rejects_malformed_messages) {
  auto good = encode({MsgType::kPing, 1, {}});
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

  auto truncated = std::vector<std::byte>(good.begin(), good.begin() + 10);
  EXPECT_FALSE(decode(truncated).ok());

  auto longer = encode({MsgType::kPing, 1, {std::byte{1}, std::byte{2}}});
  longer.pop_back();  // header says 2 payload bytes, datagram has 1
  EXPECT_NE(decode(longer).status().what().find("declares"), std::string::npos);

  std::vector<std::byte> huge(kMaxMessageBytes + 1);
  EXPECT_FALSE(decode(huge).ok());

  auto inv = encode_invoke(InvokeRequest{});
  inv.push_back(std::byte{0});  // trailing byte
  EXPECT_FALSE(decode_invoke(inv).ok());
  inv.resize(5);  // truncated
  EXPECT_FALSE(decode_invoke(inv).ok());

  auto rep = encode_reply(Reply{Code::kOk, "", {}});
  rep[0] = std::byte{200};  // code out of range
  EXPECT_FALSE(decode_reply(rep).ok());

  Writer w;
  w.bytes({});
  w.u32(5000);  // claims 5000 tickets
  EXPECT_FALSE(decode_op_reply(w.take()).ok());
}

}  // namespace
}  // namespace facetrace::runtime::proto
