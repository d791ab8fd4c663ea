/// @file
/// Private: the parent ⇄ facetrace-gpud wire protocol (docs/design/runtime.md §6), after ggml-rpc's model: an enum of
/// commands and one request and one response struct per command, each with its encode and decode in
/// protocol.cpp (one field list per struct serves both directions). The isolated executor (parent) and the
/// executor server (child) exchange these structs only. One message per SOCK_SEQPACKET datagram: a 16-byte
/// header (magic "FTGP", version, command, sequence, payload length) and a little-endian payload. Bulk data
/// never travels here; it lives in the shared arena.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/arena.h"
#include "facetrace/runtime/device_info.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/op.h"
#include "facetrace/runtime/readback_ring.h"

namespace facetrace::runtime::proto {

inline constexpr std::uint32_t kMagic = 0x50475446;  // "FTGP" little-endian
inline constexpr std::uint16_t kVersion = 2;         // 2: DeviceInfo carries ordinal, uuid, visible devices
inline constexpr std::size_t kHeaderBytes = 16;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;

/// The commands. Every request gets one kReply; kHello is sent once, unasked, by the child at start.
enum class Cmd : std::uint16_t {
  kHello = 1,
  kPing = 2,
  kInfo = 3,
  kInvoke = 4,
  kPutResident = 5,
  kDropResident = 6,
  kRingWait = 7,
  kRingRelease = 8,
  kRingStats = 9,
  kInjectFault = 10,
  kShutdown = 11,
  kReply = 0x100,  ///< child → parent: ReplyMsg, whose payload is the command's `_rsp` struct
};

/// One datagram: the header's command and sequence, and the encoded payload struct.
struct Message {
  Cmd cmd = Cmd::kPing;
  std::uint32_t seq = 0;
  std::vector<std::byte> payload;
};

/// Header + payload. The payload must fit kMaxMessageBytes.
std::vector<std::byte> encode(const Message& m);
/// Validates magic, version, command and the declared length against the datagram; kInvalidArgument
/// otherwise.
Expected<Message> decode(std::span<const std::byte> datagram);

/// "ping", "invoke", "ring_wait", … (error messages and logs).
constexpr std::string_view cmd_name(Cmd c) noexcept {
  switch (c) {
    case Cmd::kHello: return "hello";
    case Cmd::kPing: return "ping";
    case Cmd::kInfo: return "info";
    case Cmd::kInvoke: return "invoke";
    case Cmd::kPutResident: return "put_resident";
    case Cmd::kDropResident: return "drop_resident";
    case Cmd::kRingWait: return "ring_wait";
    case Cmd::kRingRelease: return "ring_release";
    case Cmd::kRingStats: return "ring_stats";
    case Cmd::kInjectFault: return "inject_fault";
    case Cmd::kShutdown: return "shutdown";
    case Cmd::kReply: return "reply";
  }
  return "unknown";
}

// --- payload structs -------------------------------------------------------------------------------------
// A request names its command (kCmd) and its response struct (Rsp); the field layouts are in protocol.cpp.

/// Child → parent once at start: the inner executor's state after start(), and the device.
struct HelloMsg {
  static constexpr Cmd kCmd = Cmd::kHello;
  ExecutorState state = ExecutorState::kReady;
  std::string reason;
  DeviceInfo info;
  std::uint32_t pid = 0;
};

/// Child → parent, the answer to every request: the Status and, when ok, the encoded response struct.
struct ReplyMsg {
  static constexpr Cmd kCmd = Cmd::kReply;
  Code code = Code::kOk;
  std::string what;
  std::vector<std::byte> payload;
};

// Responses.
struct EmptyRsp {};  ///< commands that return only a Status
struct InfoRsp {
  DeviceInfo info;
};
struct InvokeRsp {
  OpReply reply;
};
struct RingWaitRsp {
  ArenaRange range;  ///< where the ticket's bytes are in the arena once READY
};
struct RingStatsRsp {
  RingStats stats;
};

/// A request without arguments.
template <Cmd C, class R>
struct NoArgsReq {
  static constexpr Cmd kCmd = C;
  using Rsp = R;
};
using PingReq = NoArgsReq<Cmd::kPing, EmptyRsp>;
using InfoReq = NoArgsReq<Cmd::kInfo, InfoRsp>;
using RingStatsReq = NoArgsReq<Cmd::kRingStats, RingStatsRsp>;
using ShutdownReq = NoArgsReq<Cmd::kShutdown, EmptyRsp>;

// Requests with arguments.
struct InvokeReq {
  static constexpr Cmd kCmd = Cmd::kInvoke;
  using Rsp = InvokeRsp;
  OpId op = 0;
  ArenaRange in, out;
  std::uint32_t deadline_ms = 0;
  std::vector<std::byte> args;  ///< ≤ OpReply::kMaxInlineBytes
};
/// The resident's bytes are staged in the arena at `range`.
struct PutResidentReq {
  static constexpr Cmd kCmd = Cmd::kPutResident;
  using Rsp = EmptyRsp;
  std::string name;
  ArenaRange range;
};
struct DropResidentReq {
  static constexpr Cmd kCmd = Cmd::kDropResident;
  using Rsp = EmptyRsp;
  std::string name;
};
struct RingWaitReq {
  static constexpr Cmd kCmd = Cmd::kRingWait;
  using Rsp = RingWaitRsp;
  RingTicket ticket;
  std::uint32_t deadline_ms = 0;  ///< the child enforces it
};
struct RingReleaseReq {
  static constexpr Cmd kCmd = Cmd::kRingRelease;
  using Rsp = EmptyRsp;
  RingTicket ticket;
};
struct InjectFaultReq {
  static constexpr Cmd kCmd = Cmd::kInjectFault;
  using Rsp = EmptyRsp;
  FaultKind kind = FaultKind::kSimulatedLoss;
};

/// Encodes a payload struct (any of the above).
template <class T>
std::vector<std::byte> encode_payload(const T& m);
/// Decodes a payload struct. kInvalidArgument "protocol: malformed <command> payload: <what>" (a request or
/// message) or "protocol: malformed reply payload: <what>" (a response) for a short or long payload, a length
/// that runs past the end, or an enum value out of range; never reads out of bounds.
template <class T>
Expected<T> decode_payload(std::span<const std::byte> payload);

/// Sends one message (MSG_NOSIGNAL). kDeviceLost when the peer is gone.
Status send_message(int fd, const Message& m);
/// Receives one message, waiting at most `timeout` (negative: forever). kTimeout when it passes, kDeviceLost
/// on EOF / a broken socket, kInvalidArgument for a malformed message. For the first `spin` it polls the
/// socket without sleeping (saves the wake-up latency of short round trips), then blocks in poll().
Expected<Message> recv_message(int fd, std::chrono::milliseconds timeout,
                               std::chrono::microseconds spin = std::chrono::microseconds(0));

}  // namespace facetrace::runtime::proto
