/// @file
/// Private: the parent ⇄ facetrace-gpud wire protocol. One message per SOCK_SEQPACKET datagram: a 16-byte
/// header (magic "FTGP", version, type, sequence, payload length) and a little-endian payload. Bulk data never
/// travels here; it lives in the shared arena.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/runtime/arena.h"
#include "facetrace/runtime/device_info.h"
#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/op.h"
#include "facetrace/runtime/readback_ring.h"

namespace facetrace::runtime::proto {

inline constexpr std::uint32_t kMagic = 0x50475446;  // "FTGP" little-endian
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 16;
inline constexpr std::size_t kMaxMessageBytes = 64 * 1024;

enum class MsgType : std::uint16_t {
  kHello = 1,        ///< child → parent once at start: state, reason, DeviceInfo
  kPing = 2,
  kInfo = 3,
  kInvoke = 4,       ///< InvokeRequest → OpReply
  kPutResident = 5,  ///< name + arena range
  kDropResident = 6, ///< name
  kRingWait = 7,     ///< ticket + deadline → arena range of the bytes
  kRingRelease = 8,  ///< ticket
  kRingStats = 9,
  kInjectFault = 10, ///< u8 FaultKind
  kShutdown = 11,
  kReply = 0x100,    ///< child → parent: code, message, type-specific payload
};

struct Message {
  MsgType type = MsgType::kPing;
  std::uint32_t seq = 0;
  std::vector<std::byte> payload;
};

/// Little-endian writer.
class Writer {
 public:
  void u8(std::uint8_t v) { raw(&v, 1); }
  void u16(std::uint16_t v);
  void u32(std::uint32_t v);
  void u64(std::uint64_t v);
  void i32(std::int32_t v) { u32(static_cast<std::uint32_t>(v)); }
  void f64(double v);
  /// u32 length + bytes.
  void bytes(std::span<const std::byte> b);
  void str(const std::string& s) { bytes(std::as_bytes(std::span(s.data(), s.size()))); }
  std::vector<std::byte> take() { return std::move(buf_); }

 private:
  void raw(const void* p, std::size_t n);
  std::vector<std::byte> buf_;
};

/// Little-endian reader; any short read sets !ok() and returns zeros.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  std::uint8_t u8();
  std::uint16_t u16();
  std::uint32_t u32();
  std::uint64_t u64();
  std::int32_t i32() { return static_cast<std::int32_t>(u32()); }
  double f64();
  std::vector<std::byte> bytes();
  std::string str();
  bool ok() const { return ok_; }
  bool at_end() const { return pos_ == b_.size(); }
  /// ok() and everything consumed.
  bool done() const { return ok_ && at_end(); }

 private:
  bool take(void* p, std::size_t n);
  std::span<const std::byte> b_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

/// Header + payload. The payload must fit kMaxMessageBytes.
std::vector<std::byte> encode(const Message& m);
/// Validates magic, version, type, declared length against the datagram; kInvalidArgument otherwise.
Expected<Message> decode(std::span<const std::byte> datagram);

// Typed payloads. Each decode_* rejects trailing or missing bytes with kInvalidArgument.
struct InvokeRequest {
  OpId op = 0;
  ArenaRange in, out;
  std::uint32_t deadline_ms = 0;
  std::vector<std::byte> args;
};
std::vector<std::byte> encode_invoke(const InvokeRequest& r);
Expected<InvokeRequest> decode_invoke(std::span<const std::byte> p);

struct Reply {
  Code code = Code::kOk;
  std::string what;
  std::vector<std::byte> payload;
};
std::vector<std::byte> encode_reply(const Reply& r);
Expected<Reply> decode_reply(std::span<const std::byte> p);

std::vector<std::byte> encode_op_reply(const OpReply& r);
Expected<OpReply> decode_op_reply(std::span<const std::byte> p);

void write_info(Writer& w, const DeviceInfo& i);
DeviceInfo read_info(Reader& r);

struct Hello {
  ExecutorState state = ExecutorState::kReady;
  std::string reason;
  DeviceInfo info;
  std::uint32_t pid = 0;
};
std::vector<std::byte> encode_hello(const Hello& h);
Expected<Hello> decode_hello(std::span<const std::byte> p);

void write_ticket(Writer& w, const RingTicket& t);
RingTicket read_ticket(Reader& r);
void write_stats(Writer& w, const RingStats& s);
RingStats read_stats(Reader& r);
void write_range(Writer& w, const ArenaRange& a);
ArenaRange read_range(Reader& r);

/// Sends one message (MSG_NOSIGNAL). kDeviceLost when the peer is gone.
Status send_message(int fd, const Message& m);
/// Receives one message, waiting at most `timeout` (negative: forever). kTimeout when it passes, kDeviceLost
/// on EOF / a broken socket, kInvalidArgument for a malformed message. For the first `spin` it polls the
/// socket without sleeping (saves the wake-up latency of short round trips), then blocks in poll().
Expected<Message> recv_message(int fd, std::chrono::milliseconds timeout,
                               std::chrono::microseconds spin = std::chrono::microseconds(0));

}  // namespace facetrace::runtime::proto
