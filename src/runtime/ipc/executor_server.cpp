/// @file
/// facetrace-gpud's request loop: decodes each command's request struct, runs it on the inner executor and
/// encodes its response struct (ipc/protocol.h).
#include "ipc/executor_server.h"

#include <unistd.h>

#include "exec/exec_internal.h"
#include "ipc/protocol.h"
#include "log.h"

namespace facetrace::runtime {
namespace {

/// The response struct `Rsp` holding the inner executor's result, or its error.
template <class Rsp, class T>
Expected<Rsp> respond(Expected<T> result) {
  if (!result) return result.status();
  return Rsp{std::move(*result)};
}
template <class Rsp>
Expected<Rsp> respond(const Status& st) {
  if (!st.ok()) return st;
  return Rsp{};
}

/// Decodes a `Req`, runs `run(req)` → Expected<Req::Rsp> and builds the reply (a malformed request fails
/// this command only).
template <class Req, class Run>
proto::ReplyMsg serve_one(std::span<const std::byte> payload, Run&& run) {
  auto req = proto::decode_payload<Req>(payload);
  Expected<typename Req::Rsp> rsp = req ? run(*req) : Expected<typename Req::Rsp>(req.status());
  if (!rsp) return proto::ReplyMsg{rsp.status().code(), rsp.status().what(), {}};
  return proto::ReplyMsg{Code::kOk, {}, proto::encode_payload(*rsp)};
}

}  // namespace

proto::ReplyMsg ExecutorServer::dispatch(Executor& inner, const proto::Message& msg) {
  using namespace proto;
  const std::span<const std::byte> p = msg.payload;
  switch (msg.cmd) {
    case Cmd::kPing:
      return serve_one<PingReq>(p, [&](const PingReq&) { return respond<EmptyRsp>(inner.ping()); });
    case Cmd::kInfo:
      return serve_one<InfoReq>(p, [&](const InfoReq&) { return respond<InfoRsp>(inner.info()); });
    case Cmd::kInvoke:
      return serve_one<InvokeReq>(p, [&](const InvokeReq& q) {
        OpCall call;
        call.op = q.op;
        call.args = q.args;
        call.in = q.in;
        call.out = q.out;
        call.deadline = std::chrono::milliseconds(q.deadline_ms);
        return respond<InvokeRsp>(inner.invoke(call));
      });
    case Cmd::kPutResident:
      return serve_one<PutResidentReq>(p, [&](const PutResidentReq& q) {
        const auto bytes = inner.arena().view(q.range);
        if (q.range.size != 0 && bytes.empty())
          return respond<EmptyRsp>(invalid_argument("protocol: put_resident range outside the arena"));
        return respond<EmptyRsp>(inner.upload_resident(q.name, bytes));
      });
    case Cmd::kDropResident:
      return serve_one<DropResidentReq>(
          p, [&](const DropResidentReq& q) { return respond<EmptyRsp>(inner.free_resident(q.name)); });
    case Cmd::kRingWait:
      return serve_one<RingWaitReq>(p, [&](const RingWaitReq& q) {
        return respond<RingWaitRsp>(inner.ring_wait(q.ticket, std::chrono::milliseconds(q.deadline_ms)));
      });
    case Cmd::kRingRelease:
      return serve_one<RingReleaseReq>(
          p, [&](const RingReleaseReq& q) { return respond<EmptyRsp>(inner.ring_release(q.ticket)); });
    case Cmd::kRingStats:
      return serve_one<RingStatsReq>(
          p, [&](const RingStatsReq&) { return respond<RingStatsRsp>(inner.ring_stats()); });
    case Cmd::kInjectFault:
      return serve_one<InjectFaultReq>(
          p, [&](const InjectFaultReq& q) { return respond<EmptyRsp>(inner.inject_fault(q.kind)); });
    case Cmd::kShutdown:
      return serve_one<ShutdownReq>(p, [](const ShutdownReq&) { return respond<EmptyRsp>(Status{}); });
    case Cmd::kHello:
    case Cmd::kReply: break;
  }
  return ReplyMsg{Code::kInvalidArgument,
                  "protocol: unexpected message type " + std::to_string(static_cast<int>(msg.cmd)),
                  {}};
}

int ExecutorServer::print_device_listing(std::FILE* out) {
  const std::string text = encode_device_listing(enumerate_cuda_devices());
  const bool ok = std::fputs(text.c_str(), out) >= 0 && std::fflush(out) == 0;
  return ok ? kGpudExitOk : kGpudExitProtocol;
}

int ExecutorServer::serve(int fd, Executor& inner, const Status& start_status) {
  proto::HelloMsg hello;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  hello.state = inner.state();
  hello.reason = start_status.ok() ? std::string() : start_status.what();
  if (hello.state == ExecutorState::kReady) {
    if (auto info = inner.info()) hello.info = *info;
  }
  if (Status st = proto::send_message(fd, {proto::Cmd::kHello, 0, proto::encode_payload(hello)}); !st.ok()) {
    FT_LOG_DEBUG("facetrace-gpud: the parent left before the hello: {}", st.to_string());
    return kGpudExitOk;
  }
  if (hello.state != ExecutorState::kReady)
    return hello.state == ExecutorState::kLost ? kGpudExitDeviceLost : kGpudExitNoGpu;  // none / unsupported

  for (;;) {
    // Spin briefly for the next command (commands come in bursts), then block.
    auto msg = proto::recv_message(fd, std::chrono::milliseconds(-1), std::chrono::microseconds(50));
    if (!msg) {
      if (msg.status().code() == Code::kDeviceLost) return kGpudExitOk;  // parent closed the socket
      FT_LOG_ERROR("facetrace-gpud: {}", msg.status().to_string());
      return kGpudExitProtocol;
    }
    proto::ReplyMsg reply = dispatch(inner, *msg);
    const bool lost = inner.state() == ExecutorState::kLost;
    if (lost && reply.code != Code::kDeviceLost) {
      reply.code = Code::kDeviceLost;
      reply.what = inner.state_reason();
      reply.payload.clear();
    }
    const proto::Message out{proto::Cmd::kReply, msg->seq, proto::encode_payload(reply)};
    if (Status st = proto::send_message(fd, out); !st.ok()) {
      FT_LOG_DEBUG("facetrace-gpud: the parent left before the reply: {}", st.to_string());
      return kGpudExitOk;
    }
    if (lost)
      return kGpudExitDeviceLost;  // never keep a poisoned process serving (docs/design/runtime.md §6)
    if (msg->cmd == proto::Cmd::kShutdown) return kGpudExitOk;
  }
}

}  // namespace facetrace::runtime
