/// @file
/// The parent ⇄ facetrace-gpud wire protocol: one field list per payload struct (`visit`), walked by the
/// writer to encode and by the reader to decode, so the two directions cannot disagree.
#include "ipc/protocol.h"

#include <poll.h>
#include <sys/socket.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <type_traits>

namespace facetrace::runtime::proto {
namespace {

static_assert(std::endian::native == std::endian::little, "the protocol assumes a little-endian host");

// --- enum ranges (a decoded enum is always one of its enumerators) ---------------------------------------
bool in_range(Code c) { return c <= Code::kInternal; }
bool in_range(ExecutorState s) { return s <= ExecutorState::kUnsupported; }
bool in_range(FaultKind k) { return k == FaultKind::kIllegalAddress || k == FaultKind::kSimulatedLoss; }
bool in_range(Cmd c) { return cmd_name(c) != "unknown"; }

/// The 16-byte header.
struct Header {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint16_t cmd = 0;  // raw, so that decode can name an unknown value
  std::uint32_t seq = 0;
  std::uint32_t length = 0;
};
static_assert(sizeof(Header) == kHeaderBytes);

// One line per struct (a table): not reformatted.
// clang-format off
// --- field lists: the one description of each struct's wire layout ---------------------------------------
template <class Ar> void visit(Ar& ar, Header& m) { ar(m.magic, m.version, m.cmd, m.seq, m.length); }
template <class Ar> void visit(Ar& ar, ArenaRange& m) { ar(m.offset, m.size); }
template <class Ar> void visit(Ar& ar, RingTicket& m) { ar(m.size_class, m.slot, m.generation, m.byte_len); }
template <class Ar>
void visit(Ar& ar, RingStats& m) {
  ar(m.dispatches, m.stalls, m.peak_in_flight, m.in_flight, m.slots, m.pinned_bytes, m.budget_bytes,
     m.max_slots_per_class, m.reclaimed);
}
template <class Ar>
void visit(Ar& ar, DeviceInfo& m) {
  ar(m.name, m.cc_major, m.cc_minor, m.total_memory, m.free_memory, m.multiprocessors, m.async_engines,
     m.driver_version, m.runtime_version, m.cudnn_version, m.cublas_version, m.simulated, m.ordinal, m.uuid,
     m.visible_devices);
}
template <class Ar> void visit(Ar& ar, OpReply& m) { ar(m.bytes, m.tickets); }
template <class Ar> void visit(Ar& ar, HelloMsg& m) { ar(m.state, m.reason, m.info, m.pid); }
template <class Ar> void visit(Ar& ar, ReplyMsg& m) { ar(m.code, m.what, m.payload); }
template <class Ar> void visit(Ar& ar, InfoRsp& m) { ar(m.info); }
template <class Ar> void visit(Ar& ar, InvokeRsp& m) { ar(m.reply); }
template <class Ar> void visit(Ar& ar, InvokeReq& m) { ar(m.op, m.in, m.out, m.deadline_ms, m.args); }
template <class Ar> void visit(Ar& ar, PutResidentReq& m) { ar(m.name, m.range); }
template <class Ar> void visit(Ar& ar, DropResidentReq& m) { ar(m.name); }
template <class Ar> void visit(Ar& ar, RingWaitRsp& m) { ar(m.range); }
template <class Ar> void visit(Ar& ar, RingWaitReq& m) { ar(m.ticket, m.deadline_ms); }
template <class Ar> void visit(Ar& ar, RingReleaseReq& m) { ar(m.ticket); }
template <class Ar> void visit(Ar& ar, RingStatsRsp& m) { ar(m.stats); }
template <class Ar> void visit(Ar& ar, InjectFaultReq& m) { ar(m.kind); }

// clang-format on
template <class T>
inline constexpr bool kIsByteVector =
    std::is_same_v<T, std::vector<std::byte>> || std::is_same_v<T, std::string>;
template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

/// Little-endian writer: integers as themselves, bool and enums as their underlying integer, strings and
/// byte vectors as u32 length + bytes, other vectors as u32 count + elements, structs by their field list.
class Writer {
 public:
  template <class... T>
  void operator()(const T&... v) {
    (field(v), ...);
  }
  std::vector<std::byte> take() { return std::move(buf_); }

 private:
  template <class T>
  void field(const T& v) {
    if constexpr (std::is_same_v<T, bool>) {
      field(static_cast<std::uint8_t>(v ? 1 : 0));
    } else if constexpr (std::is_integral_v<T>) {
      raw(&v, sizeof v);
    } else if constexpr (std::is_enum_v<T>) {
      field(static_cast<std::underlying_type_t<T>>(v));
    } else if constexpr (kIsByteVector<T>) {
      field(static_cast<std::uint32_t>(v.size()));
      raw(v.data(), v.size());
    } else if constexpr (IsVector<T>::value) {
      field(static_cast<std::uint32_t>(v.size()));
      for (const auto& e : v) field(e);
    } else if constexpr (!std::is_empty_v<T>) {
      visit(*this, const_cast<T&>(v));  // the field lists take T& for the reader; the writer only reads
    }
  }
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::byte*>(p);
    buf_.insert(buf_.end(), b, b + n);
  }
  std::vector<std::byte> buf_;
};

/// The matching reader. Never reads past the end: the first problem (short data, a length or count larger
/// than what is left, an enum out of range, bytes left over) is kept as error() and every later field reads
/// as zero.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  template <class... T>
  void operator()(T&... v) {
    (field(v), ...);
  }
  /// Requires every byte consumed.
  void finish() {
    if (pos_ != b_.size()) fail(std::to_string(b_.size() - pos_) + " unexpected trailing bytes");
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  template <class T>
  void field(T& v) {
    if constexpr (std::is_same_v<T, bool>) {
      std::uint8_t u = 0;
      field(u);
      if (u > 1) fail("bool of value " + std::to_string(u));
      v = u == 1;
    } else if constexpr (std::is_integral_v<T>) {
      take(&v, sizeof v);
    } else if constexpr (std::is_enum_v<T>) {
      std::underlying_type_t<T> u{};
      field(u);
      v = static_cast<T>(u);
      if (!in_range(v)) fail("enum value " + std::to_string(u) + " out of range");
    } else if constexpr (kIsByteVector<T>) {
      const std::uint32_t n = length();
      v.resize(n);
      take(v.data(), n);
    } else if constexpr (IsVector<T>::value) {
      const std::uint32_t n = length();  // each element takes at least one byte
      v.resize(n);
      for (auto& e : v) field(e);
    } else if constexpr (!std::is_empty_v<T>) {
      visit(*this, v);
    }
  }
  /// A u32 length or count; at most the bytes left, so that a hostile value never allocates.
  std::uint32_t length() {
    std::uint32_t n = 0;
    field(n);
    if (n > b_.size() - pos_) {
      fail("truncated: a length of " + std::to_string(n) + " with " + std::to_string(b_.size() - pos_) +
           " bytes left");
      return 0;
    }
    return n;
  }
  void take(void* p, std::size_t n) {
    if (n == 0) return;  // an empty string or vector: p may be null, which memcpy/memset must not see
    if (ok() && b_.size() - pos_ < n)
      fail("truncated: " + std::to_string(n) + " bytes needed at offset " + std::to_string(pos_) + " of " +
           std::to_string(b_.size()));
    if (!ok()) {
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, b_.data() + pos_, n);
    pos_ += n;
  }
  void fail(std::string why) {
    if (error_.empty()) error_ = std::move(why);
  }
  std::span<const std::byte> b_;
  std::size_t pos_ = 0;
  std::string error_;
};

}  // namespace

/// What decode errors call a payload: its command for requests and messages, "reply" for responses.
template <class T>
std::string payload_name() {
  if constexpr (requires { T::kCmd; }) {
    return std::string(cmd_name(T::kCmd)) + " payload";
  } else {
    return "reply payload";
  }
}

template <class T>
std::vector<std::byte> encode_payload(const T& m) {
  Writer w;
  w(m);
  return w.take();
}

template <class T>
Expected<T> decode_payload(std::span<const std::byte> payload) {
  Reader r(payload);
  T m;
  r(m);
  r.finish();
  if (!r.ok()) return invalid_argument("protocol: malformed " + payload_name<T>() + ": " + r.error());
  return m;
}

// The payload structs of protocol.h, each with its one encode and decode.
#define FT_PROTO_PAYLOAD(T)                                    \
  template std::vector<std::byte> encode_payload<T>(const T&); \
  template Expected<T> decode_payload<T>(std::span<const std::byte>)
FT_PROTO_PAYLOAD(HelloMsg);
FT_PROTO_PAYLOAD(ReplyMsg);
FT_PROTO_PAYLOAD(EmptyRsp);
FT_PROTO_PAYLOAD(PingReq);
FT_PROTO_PAYLOAD(InfoReq);
FT_PROTO_PAYLOAD(InfoRsp);
FT_PROTO_PAYLOAD(InvokeReq);
FT_PROTO_PAYLOAD(InvokeRsp);
FT_PROTO_PAYLOAD(PutResidentReq);
FT_PROTO_PAYLOAD(DropResidentReq);
FT_PROTO_PAYLOAD(RingWaitReq);
FT_PROTO_PAYLOAD(RingWaitRsp);
FT_PROTO_PAYLOAD(RingReleaseReq);
FT_PROTO_PAYLOAD(RingStatsReq);
FT_PROTO_PAYLOAD(RingStatsRsp);
FT_PROTO_PAYLOAD(InjectFaultReq);
FT_PROTO_PAYLOAD(ShutdownReq);
#undef FT_PROTO_PAYLOAD

std::vector<std::byte> encode(const Message& m) {
  Header h;
  h.cmd = static_cast<std::uint16_t>(m.cmd);
  h.seq = m.seq;
  h.length = static_cast<std::uint32_t>(m.payload.size());
  Writer w;
  w(h);
  auto out = w.take();
  out.insert(out.end(), m.payload.begin(), m.payload.end());
  return out;
}

Expected<Message> decode(std::span<const std::byte> d) {
  if (d.size() < kHeaderBytes)
    return invalid_argument("protocol: message of " + std::to_string(d.size()) +
                            " bytes is shorter than the header");
  if (d.size() > kMaxMessageBytes)
    return invalid_argument("protocol: message of " + std::to_string(d.size()) +
                            " bytes exceeds the maximum");
  Reader r(d.first(kHeaderBytes));
  Header h;
  r(h);
  if (h.magic != kMagic) return invalid_argument("protocol: bad magic " + std::to_string(h.magic));
  if (h.version != kVersion)
    return invalid_argument("protocol: version " + std::to_string(h.version) + " (this build speaks " +
                            std::to_string(kVersion) +
                            "); parent and facetrace-gpud come from different builds");
  if (!in_range(static_cast<Cmd>(h.cmd)))
    return invalid_argument("protocol: unknown message type " + std::to_string(h.cmd));
  if (h.length != d.size() - kHeaderBytes)
    return invalid_argument("protocol: header declares " + std::to_string(h.length) +
                            " payload bytes, datagram has " + std::to_string(d.size() - kHeaderBytes));
  Message m;
  m.cmd = static_cast<Cmd>(h.cmd);
  m.seq = h.seq;
  m.payload.assign(d.begin() + kHeaderBytes, d.end());
  return m;
}

Status send_message(int fd, const Message& m) {
  if (m.payload.size() + kHeaderBytes > kMaxMessageBytes)
    return invalid_argument("protocol: payload of " + std::to_string(m.payload.size()) +
                            " bytes is too large");
  const auto bytes = encode(m);
  for (;;) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes.size())) return {};
    if (n < 0 && errno == EINTR) continue;
    return {Code::kDeviceLost, std::string("the GPU child's socket is closed (send: ") +
                                   (n < 0 ? std::strerror(errno) : "short write") + ")"};
  }
}

Expected<Message> recv_message(int fd, std::chrono::milliseconds timeout, std::chrono::microseconds spin) {
  // One uninitialised buffer per call (no 64 KiB fill per message). Not thread_local: the executor's destructor
  // receives the shutdown acknowledgement, and a process-lifetime backend (renderer.cpp's shared backend) is
  // destroyed at exit after the main thread's thread_local objects, which made this a use after free.
  const auto buf_owner = std::make_unique_for_overwrite<std::byte[]>(kMaxMessageBytes + 1);
  const std::span<std::byte> buf(buf_owner.get(), kMaxMessageBytes + 1);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  const auto spin_until = start + spin;
  bool spinning = spin.count() > 0;
  for (;;) {
    if (!spinning) {
      int wait_ms = -1;
      if (timeout.count() >= 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        wait_ms = static_cast<int>(std::max<long long>(0, left.count()));
      }
      pollfd pfd{fd, POLLIN, 0};
      const int pr = ::poll(&pfd, 1, wait_ms);
      if (pr < 0) {
        if (errno == EINTR) continue;
        return Status(Code::kDeviceLost,
                      std::string("poll on the GPU child's socket failed: ") + std::strerror(errno));
      }
      if (pr == 0)
        return Status(Code::kTimeout, "no reply within " + std::to_string(timeout.count()) + " ms");
    }
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), spinning ? MSG_DONTWAIT : 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
        if (spinning && std::chrono::steady_clock::now() >= spin_until) spinning = false;
        continue;
      }
      return Status(Code::kDeviceLost,
                    std::string("recv from the GPU child failed: ") + std::strerror(errno));
    }
    if (n == 0) return Status(Code::kDeviceLost, "EOF on the GPU child's socket");
    return decode(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)));
  }
}

}  // namespace facetrace::runtime::proto
