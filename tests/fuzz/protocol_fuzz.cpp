/// @file
/// libFuzzer target: the executor wire protocol, server side (docs/design/runtime.md §6). A hostile parent drives
/// facetrace-gpud's request loop (ExecutorServer::serve over a SOCK_SEQPACKET pair, the simulated executor
/// inside, as `facetrace-gpud --simulate`) with a sequence of datagrams. The child must never crash, must answer
/// every well-formed request with a well-formed reply carrying its sequence number, may end only with one of its
/// exit codes, and must never write to the transfer region of the arena (no simulated op writes there; the
/// readback slots live in the ring region).
///
/// Input: records of [u8 kind][u16 length, little-endian][length bytes]. An odd kind sends the bytes as the
/// whole datagram; an even kind sends them as the payload of a well-formed header of command (kind / 2) mod 12.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "facetrace/runtime/arena.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/op.h"
#include "facetrace/runtime/testing/simulated_executor.h"
#include "fuzz_common.h"
#include "ipc/executor_server.h"
#include "ipc/protocol.h"

namespace {

using namespace facetrace;
using namespace facetrace::runtime;

constexpr std::uint8_t kPattern = 0xA5;
constexpr auto kReplyDeadline = std::chrono::milliseconds(5000);
constexpr proto::Cmd kCmds[] = {proto::Cmd::kHello,       proto::Cmd::kPing,        proto::Cmd::kInfo,
                                proto::Cmd::kInvoke,      proto::Cmd::kPutResident, proto::Cmd::kDropResident,
                                proto::Cmd::kRingWait,    proto::Cmd::kRingRelease, proto::Cmd::kRingStats,
                                proto::Cmd::kInjectFault, proto::Cmd::kShutdown,    proto::Cmd::kReply};

/// Requests the harness does not send: ops that sleep (kSpin: a parent may keep its child busy, that is no
/// fault) or end the process on purpose (kSimCrash).
bool skipped(std::span<const std::byte> datagram) {
  auto m = proto::decode(datagram);
  if (!m || m->cmd != proto::Cmd::kInvoke) return false;
  auto q = proto::decode_payload<proto::InvokeReq>(m->payload);
  if (!q) return false;
  return q->op == ops::kSpin || q->op == ops::kSimCrash;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One arena for the whole run (as one outlives the child's respawns); its transfer region holds kPattern.
  static const std::shared_ptr<SharedArena> arena = [] {
    auto a = SharedArena::create(1 << 20, 1 << 20);
    fuzz::check(a.ok(), "the arena can be made");
    std::memset((*a)->base() + (*a)->ring_bytes(), kPattern, (*a)->transfer_bytes());
    return *a;
  }();
  static const std::vector<std::byte> pattern(arena->transfer_bytes(), std::byte{kPattern});
  auto inner = make_simulated_executor(arena, ExecutorOptions{});
  const Status started = inner->start();

  int sv[2];
  fuzz::check(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0, "socketpair");
  int exit_code = -1;
  std::thread server([&] {
    exit_code = ExecutorServer::serve(sv[1], *inner, started);
    ::shutdown(sv[1], SHUT_RDWR);  // as the child's exit would: the parent sees EOF
  });

  auto hello = proto::recv_message(sv[0], kReplyDeadline);
  fuzz::check(hello.ok() && hello->cmd == proto::Cmd::kHello, "the child starts with a hello");
  fuzz::check(proto::decode_payload<proto::HelloMsg>(hello->payload).ok(), "the hello decodes");

  std::size_t pos = 0;
  std::uint32_t seq = 1;
  while (pos + 3 <= size) {
    const std::uint8_t kind = data[pos];
    const std::size_t len =
        std::min<std::size_t>(data[pos + 1] | (std::size_t{data[pos + 2]} << 8), size - pos - 3);
    const auto* body = reinterpret_cast<const std::byte*>(data + pos + 3);
    pos += 3 + len;
    std::vector<std::byte> datagram;
    if (kind & 1) {
      datagram.assign(body, body + len);
    } else {
      proto::Message m{kCmds[(kind / 2) % std::size(kCmds)], seq++, {body, body + len}};
      datagram = proto::encode(m);
    }
    if (skipped(datagram)) continue;
    if (::send(sv[0], datagram.data(), datagram.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(datagram.size()))
      break;  // the child has gone (it may end on a malformed message)
    auto reply = proto::recv_message(sv[0], kReplyDeadline);
    if (!reply && reply.status().code() == Code::kDeviceLost) break;  // it ended: EOF
    fuzz::check(reply.ok(), "the child answers within the deadline with a well-formed message");
    fuzz::check(reply->cmd == proto::Cmd::kReply, "the answer is a reply");
    auto sent = proto::decode(datagram);
    fuzz::check(sent.ok() && reply->seq == sent->seq,
                "the child answers only well-formed requests, in order");
    fuzz::check(proto::decode_payload<proto::ReplyMsg>(reply->payload).ok(), "the reply payload decodes");
  }
  ::shutdown(sv[0], SHUT_RDWR);
  server.join();
  ::close(sv[0]);
  ::close(sv[1]);
  fuzz::check(exit_code == kGpudExitOk || exit_code == kGpudExitDeviceLost || exit_code == kGpudExitProtocol,
              "the child ends with one of its exit codes");
  fuzz::check(std::memcmp(arena->base() + arena->ring_bytes(), pattern.data(), pattern.size()) == 0,
              "the child never writes the transfer region");
  return 0;
}
