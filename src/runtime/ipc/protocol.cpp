/// @file
/// The parent ⇄ facetrace-gpud wire protocol.
#include "ipc/protocol.h"

#include <poll.h>
#include <sys/socket.h>

#include <bit>
#include <cerrno>
#include <cstring>

namespace facetrace::runtime::proto {
namespace {

static_assert(std::endian::native == std::endian::little, "the protocol assumes a little-endian host");

bool known_type(std::uint16_t t) {
  return (t >= static_cast<std::uint16_t>(MsgType::kHello) && t <= static_cast<std::uint16_t>(MsgType::kShutdown)) ||
         t == static_cast<std::uint16_t>(MsgType::kReply);
}

}  // namespace

void Writer::raw(const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  buf_.insert(buf_.end(), b, b + n);
}
void Writer::u16(std::uint16_t v) { raw(&v, sizeof v); }
void Writer::u32(std::uint32_t v) { raw(&v, sizeof v); }
void Writer::u64(std::uint64_t v) { raw(&v, sizeof v); }
void Writer::f64(double v) { raw(&v, sizeof v); }
void Writer::bytes(std::span<const std::byte> b) {
  u32(static_cast<std::uint32_t>(b.size()));
  raw(b.data(), b.size());
}

bool Reader::take(void* p, std::size_t n) {
  if (!ok_ || b_.size() - pos_ < n) {
    ok_ = false;
    std::memset(p, 0, n);
    return false;
  }
  std::memcpy(p, b_.data() + pos_, n);
  pos_ += n;
  return true;
}
std::uint8_t Reader::u8() { std::uint8_t v; take(&v, 1); return v; }
std::uint16_t Reader::u16() { std::uint16_t v; take(&v, 2); return v; }
std::uint32_t Reader::u32() { std::uint32_t v; take(&v, 4); return v; }
std::uint64_t Reader::u64() { std::uint64_t v; take(&v, 8); return v; }
double Reader::f64() { double v; take(&v, 8); return v; }
std::vector<std::byte> Reader::bytes() {
  const std::uint32_t n = u32();
  if (!ok_ || b_.size() - pos_ < n) {
    ok_ = false;
    return {};
  }
  std::vector<std::byte> out(b_.begin() + static_cast<std::ptrdiff_t>(pos_),
                             b_.begin() + static_cast<std::ptrdiff_t>(pos_ + n));
  pos_ += n;
  return out;
}
std::string Reader::str() {
  auto b = bytes();
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

std::vector<std::byte> encode(const Message& m) {
  Writer w;
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(static_cast<std::uint16_t>(m.type));
  w.u32(m.seq);
  w.u32(static_cast<std::uint32_t>(m.payload.size()));
  auto out = w.take();
  out.insert(out.end(), m.payload.begin(), m.payload.end());
  return out;
}

Expected<Message> decode(std::span<const std::byte> d) {
  if (d.size() < kHeaderBytes)
    return invalid_argument("protocol: message of " + std::to_string(d.size()) + " bytes is shorter than the header");
  if (d.size() > kMaxMessageBytes)
    return invalid_argument("protocol: message of " + std::to_string(d.size()) + " bytes exceeds the maximum");
  Reader r(d);
  const std::uint32_t magic = r.u32();
  const std::uint16_t version = r.u16();
  const std::uint16_t type = r.u16();
  const std::uint32_t seq = r.u32();
  const std::uint32_t len = r.u32();
  if (magic != kMagic) return invalid_argument("protocol: bad magic " + std::to_string(magic));
  if (version != kVersion)
    return invalid_argument("protocol: version " + std::to_string(version) + " (this build speaks " +
                            std::to_string(kVersion) + "); parent and facetrace-gpud come from different builds");
  if (!known_type(type)) return invalid_argument("protocol: unknown message type " + std::to_string(type));
  if (len != d.size() - kHeaderBytes)
    return invalid_argument("protocol: header declares " + std::to_string(len) + " payload bytes, datagram has " +
                            std::to_string(d.size() - kHeaderBytes));
  Message m;
  m.type = static_cast<MsgType>(type);
  m.seq = seq;
  m.payload.assign(d.begin() + kHeaderBytes, d.end());
  return m;
}

void write_range(Writer& w, const ArenaRange& a) {
  w.u64(a.offset);
  w.u64(a.size);
}
ArenaRange read_range(Reader& r) {
  ArenaRange a;
  a.offset = r.u64();
  a.size = r.u64();
  return a;
}

std::vector<std::byte> encode_invoke(const InvokeRequest& q) {
  Writer w;
  w.u32(q.op);
  write_range(w, q.in);
  write_range(w, q.out);
  w.u32(q.deadline_ms);
  w.bytes(q.args);
  return w.take();
}
Expected<InvokeRequest> decode_invoke(std::span<const std::byte> p) {
  Reader r(p);
  InvokeRequest q;
  q.op = r.u32();
  q.in = read_range(r);
  q.out = read_range(r);
  q.deadline_ms = r.u32();
  q.args = r.bytes();
  if (!r.done()) return invalid_argument("protocol: malformed invoke request");
  return q;
}

std::vector<std::byte> encode_reply(const Reply& q) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(q.code));
  w.str(q.what);
  w.bytes(q.payload);
  return w.take();
}
Expected<Reply> decode_reply(std::span<const std::byte> p) {
  Reader r(p);
  Reply q;
  const std::uint8_t code = r.u8();
  q.what = r.str();
  q.payload = r.bytes();
  if (!r.done() || code > static_cast<std::uint8_t>(Code::kInternal))
    return invalid_argument("protocol: malformed reply");
  q.code = static_cast<Code>(code);
  return q;
}

void write_ticket(Writer& w, const RingTicket& t) {
  w.u64(t.size_class);
  w.u32(t.slot);
  w.u32(t.generation);
  w.u64(t.byte_len);
}
RingTicket read_ticket(Reader& r) {
  RingTicket t;
  t.size_class = r.u64();
  t.slot = r.u32();
  t.generation = r.u32();
  t.byte_len = r.u64();
  return t;
}

std::vector<std::byte> encode_op_reply(const OpReply& q) {
  Writer w;
  w.bytes(q.bytes);
  w.u32(static_cast<std::uint32_t>(q.tickets.size()));
  for (const auto& t : q.tickets) write_ticket(w, t);
  return w.take();
}
Expected<OpReply> decode_op_reply(std::span<const std::byte> p) {
  Reader r(p);
  OpReply q;
  q.bytes = r.bytes();
  const std::uint32_t n = r.u32();
  if (n > 1024) return invalid_argument("protocol: op reply claims " + std::to_string(n) + " tickets");
  for (std::uint32_t i = 0; i < n && r.ok(); ++i) q.tickets.push_back(read_ticket(r));
  if (!r.done()) return invalid_argument("protocol: malformed op reply");
  return q;
}

void write_info(Writer& w, const DeviceInfo& i) {
  w.str(i.name);
  w.i32(i.cc_major);
  w.i32(i.cc_minor);
  w.u64(i.total_memory);
  w.u64(i.free_memory);
  w.i32(i.multiprocessors);
  w.i32(i.async_engines);
  w.i32(i.driver_version);
  w.i32(i.runtime_version);
  w.i32(i.cudnn_version);
  w.i32(i.cublas_version);
  w.u8(i.simulated ? 1 : 0);
}
DeviceInfo read_info(Reader& r) {
  DeviceInfo i;
  i.name = r.str();
  i.cc_major = r.i32();
  i.cc_minor = r.i32();
  i.total_memory = r.u64();
  i.free_memory = r.u64();
  i.multiprocessors = r.i32();
  i.async_engines = r.i32();
  i.driver_version = r.i32();
  i.runtime_version = r.i32();
  i.cudnn_version = r.i32();
  i.cublas_version = r.i32();
  i.simulated = r.u8() != 0;
  return i;
}

std::vector<std::byte> encode_hello(const Hello& h) {
  Writer w;
  w.u8(static_cast<std::uint8_t>(h.state));
  w.str(h.reason);
  write_info(w, h.info);
  w.u32(h.pid);
  return w.take();
}
Expected<Hello> decode_hello(std::span<const std::byte> p) {
  Reader r(p);
  Hello h;
  const std::uint8_t state = r.u8();
  h.reason = r.str();
  h.info = read_info(r);
  h.pid = r.u32();
  if (!r.done() || state > static_cast<std::uint8_t>(ExecutorState::kNone))
    return invalid_argument("protocol: malformed hello");
  h.state = static_cast<ExecutorState>(state);
  return h;
}

void write_stats(Writer& w, const RingStats& s) {
  w.u64(s.dispatches);
  w.u64(s.stalls);
  w.u64(s.peak_in_flight);
  w.u64(s.in_flight);
  w.u64(s.slots);
  w.u64(s.pinned_bytes);
  w.u64(s.budget_bytes);
  w.u32(s.max_slots_per_class);
}
RingStats read_stats(Reader& r) {
  RingStats s;
  s.dispatches = r.u64();
  s.stalls = r.u64();
  s.peak_in_flight = r.u64();
  s.in_flight = r.u64();
  s.slots = r.u64();
  s.pinned_bytes = r.u64();
  s.budget_bytes = r.u64();
  s.max_slots_per_class = r.u32();
  return s;
}

Status send_message(int fd, const Message& m) {
  if (m.payload.size() + kHeaderBytes > kMaxMessageBytes)
    return invalid_argument("protocol: payload of " + std::to_string(m.payload.size()) + " bytes is too large");
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
  thread_local std::vector<std::byte> buf(kMaxMessageBytes + 1);  // reused: no 64 KiB fill per message
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  const auto spin_until = start + spin;
  bool spinning = spin.count() > 0;
  for (;;) {
    if (!spinning) {
      int wait_ms = -1;
      if (timeout.count() >= 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
        wait_ms = static_cast<int>(std::max<long long>(0, left.count()));
      }
      pollfd pfd{fd, POLLIN, 0};
      const int pr = ::poll(&pfd, 1, wait_ms);
      if (pr < 0) {
        if (errno == EINTR) continue;
        return Status(Code::kDeviceLost, std::string("poll on the GPU child's socket failed: ") + std::strerror(errno));
      }
      if (pr == 0) return Status(Code::kTimeout, "no reply within " + std::to_string(timeout.count()) + " ms");
    }
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), spinning ? MSG_DONTWAIT : 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
        if (spinning && std::chrono::steady_clock::now() >= spin_until) spinning = false;
        continue;
      }
      return Status(Code::kDeviceLost, std::string("recv from the GPU child failed: ") + std::strerror(errno));
    }
    if (n == 0) return Status(Code::kDeviceLost, "EOF on the GPU child's socket");
    return decode(std::span<const std::byte>(buf.data(), static_cast<std::size_t>(n)));
  }
}

}  // namespace facetrace::runtime::proto
