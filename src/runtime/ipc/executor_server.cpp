/// @file
/// facetrace-gpud's request loop.
#include "ipc/executor_server.h"

#include <unistd.h>

#include "log.h"
#include "ipc/protocol.h"

namespace facetrace::runtime {
namespace {

proto::Reply reply_of(const Status& st) { return proto::Reply{st.code(), st.what(), {}}; }

}  // namespace

int ExecutorServer::serve(int fd, Executor& inner, const Status& start_status) {
  using proto::MsgType;
  proto::Hello hello;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  hello.state = inner.state();
  hello.reason = start_status.ok() ? std::string() : start_status.what();
  if (hello.state == ExecutorState::kReady) {
    if (auto info = inner.info()) hello.info = *info;
  }
  if (!proto::send_message(fd, {MsgType::kHello, 0, proto::encode_hello(hello)}).ok()) return 0;
  if (hello.state != ExecutorState::kReady) return hello.state == ExecutorState::kLost ? 3 : 2;

  for (;;) {
    // Spin briefly for the next command (commands come in bursts), then block.
    auto msg = proto::recv_message(fd, std::chrono::milliseconds(-1), std::chrono::microseconds(50));
    if (!msg) {
      if (msg.status().code() == Code::kDeviceLost) return 0;  // parent closed the socket
      FT_LOG_ERROR("facetrace-gpud: {}", msg.status().to_string());
      return 4;
    }
    proto::Reply reply;
    bool shutdown = false;
    proto::Reader r(msg->payload);
    switch (msg->type) {
      case MsgType::kPing:
        reply = reply_of(inner.ping());
        break;
      case MsgType::kInfo: {
        auto info = inner.info();
        reply = reply_of(info.status());
        if (info) {
          proto::Writer w;
          proto::write_info(w, *info);
          reply.payload = w.take();
        }
        break;
      }
      case MsgType::kInvoke: {
        auto q = proto::decode_invoke(msg->payload);
        if (!q) {
          reply = reply_of(q.status());
          break;
        }
        OpCall call;
        call.op = q->op;
        call.args = q->args;
        call.in = q->in;
        call.out = q->out;
        call.deadline = std::chrono::milliseconds(q->deadline_ms);
        auto out = inner.invoke(call);
        reply = reply_of(out.status());
        if (out) reply.payload = proto::encode_op_reply(*out);
        break;
      }
      case MsgType::kPutResident: {
        const std::string name = r.str();
        const ArenaRange range = proto::read_range(r);
        const auto bytes = inner.arena().view(range);
        if (!r.done() || (range.size != 0 && bytes.empty())) {
          reply = reply_of(invalid_argument("protocol: malformed put_resident"));
          break;
        }
        reply = reply_of(inner.upload_resident(name, bytes));
        break;
      }
      case MsgType::kDropResident: {
        const std::string name = r.str();
        reply = reply_of(r.done() ? inner.free_resident(name) : invalid_argument("protocol: malformed drop_resident"));
        break;
      }
      case MsgType::kRingWait: {
        const RingTicket t = proto::read_ticket(r);
        const std::uint32_t ms = r.u32();
        if (!r.done()) {
          reply = reply_of(invalid_argument("protocol: malformed ring_wait"));
          break;
        }
        auto range = inner.ring_wait(t, std::chrono::milliseconds(ms));
        reply = reply_of(range.status());
        if (range) {
          proto::Writer w;
          proto::write_range(w, *range);
          reply.payload = w.take();
        }
        break;
      }
      case MsgType::kRingRelease: {
        const RingTicket t = proto::read_ticket(r);
        reply = reply_of(r.done() ? inner.ring_release(t) : invalid_argument("protocol: malformed ring_release"));
        break;
      }
      case MsgType::kRingStats: {
        auto s = inner.ring_stats();
        reply = reply_of(s.status());
        if (s) {
          proto::Writer w;
          proto::write_stats(w, *s);
          reply.payload = w.take();
        }
        break;
      }
      case MsgType::kInjectFault: {
        const std::uint8_t kind = r.u8();
        reply = reply_of(r.done() ? inner.inject_fault(static_cast<FaultKind>(kind))
                                  : invalid_argument("protocol: malformed inject_fault"));
        break;
      }
      case MsgType::kShutdown:
        shutdown = true;
        break;
      default:
        reply = reply_of(invalid_argument("protocol: unexpected message type " +
                                          std::to_string(static_cast<int>(msg->type))));
        break;
    }
    const bool lost = inner.state() == ExecutorState::kLost;
    if (lost && reply.code != Code::kDeviceLost) {
      reply.code = Code::kDeviceLost;
      reply.what = inner.state_reason();
    }
    if (!proto::send_message(fd, {MsgType::kReply, msg->seq, proto::encode_reply(reply)}).ok()) return 0;
    if (lost) return 3;  // never keep a poisoned process serving (runtime.md §6)
    if (shutdown) return 0;
  }
}

}  // namespace facetrace::runtime
