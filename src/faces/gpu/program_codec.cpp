/// @file
/// The Program codec (program_codec.h). Every field list is written once (the walk_* templates) and walked by
/// the writer and by the reader, so the two cannot disagree; decode then validates the structure.
#include "gpu/program_codec.h"

#include <array>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

namespace facetrace::faces::gpu {
namespace {

constexpr std::uint32_t kMagic = 0x47505446;  // "FTPG" little-endian
constexpr std::uint32_t kVersion = 1;
constexpr std::uint64_t kMaxRank = 8;                    // docs/design/faces.md §1 (rank ≤ 8)
constexpr std::uint64_t kMaxName = 4096;                 // node and output names
constexpr std::int64_t kMaxLen = std::int64_t{1} << 40;  // elements of one value (far above the load limits)
constexpr std::uint64_t kMaxBlobFloats = std::uint64_t{64}
                                         << 20;  // docs/design/faces.md §1: one tensor ≤ 64 Mi

/// Little-endian writer (the project's hosts are little-endian; memcpy keeps it alignment-free).
class Writer {
 public:
  template <class T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const std::size_t n = out_.size();
    out_.resize(n + sizeof(T));
    std::memcpy(out_.data() + n, &v, sizeof(T));
  }
  void i64(const std::int64_t& v, const char*) { pod(v); }
  void i32(const std::int32_t& v, const char*) { pod(v); }
  void i8(const std::int8_t& v, const char*) { pod(v); }
  void f32(const float& v, const char*) { pod(v); }
  void flag(const bool& v, const char*) { pod(static_cast<std::uint8_t>(v ? 1 : 0)); }
  template <class E>
  void enumeration(const E& v, E /*max*/, const char*) {
    pod(static_cast<std::uint8_t>(v));
  }
  void count(std::uint64_t n, const char*) { pod(n); }
  void vec_i64(const std::vector<std::int64_t>& v, std::uint64_t /*max*/, const char* what) {
    count(v.size(), what);
    for (auto x : v) pod(x);
  }
  void vec_i32(const std::vector<std::int32_t>& v, const char* what) {
    count(v.size(), what);
    for (auto x : v) pod(x);
  }
  template <std::size_t N>
  void arr_i64(const std::array<std::int64_t, N>& a, const char*) {
    for (auto x : a) pod(x);
  }
  void str(const std::string& s, const char* what) {
    count(s.size(), what);
    const std::size_t n = out_.size();
    out_.resize(n + s.size());
    std::memcpy(out_.data() + n, s.data(), s.size());
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

/// Bounded reader: the first failure is kept (naming the field and the offset); every later read fails.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> b) : b_(b) {}
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool at_end() const { return pos_ == b_.size(); }
  std::size_t pos() const { return pos_; }
  void fail(const std::string& what) {
    if (error_.empty()) error_ = what + " (at byte " + std::to_string(pos_) + ")";
  }
  template <class T>
  bool pod(T& v, const char* what) {
    if (!ok()) return false;
    if (b_.size() - pos_ < sizeof(T)) {
      fail(std::string("truncated at ") + what);
      return false;
    }
    std::memcpy(&v, b_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  void i64(std::int64_t& v, const char* what) { pod(v, what); }
  void i32(std::int32_t& v, const char* what) { pod(v, what); }
  void i8(std::int8_t& v, const char* what) { pod(v, what); }
  void f32(float& v, const char* what) { pod(v, what); }
  void flag(bool& v, const char* what) {
    std::uint8_t u = 0;
    if (!pod(u, what)) return;
    if (u > 1) fail(std::string(what) + ": " + std::to_string(u) + " is not a boolean");
    v = u == 1;
  }
  template <class E>
  void enumeration(E& v, E max, const char* what) {
    std::uint8_t u = 0;
    if (!pod(u, what)) return;
    if (u > static_cast<std::uint8_t>(max))
      fail(std::string(what) + ": enumerator " + std::to_string(u) + " out of range");
    v = static_cast<E>(u);
  }
  /// A count of elements of at least `min_bytes` each: never more than the bytes left could hold.
  std::uint64_t count(std::uint64_t min_bytes, const char* what) {
    std::uint64_t n = 0;
    if (!pod(n, what)) return 0;
    if (min_bytes > 0 && n > (b_.size() - pos_) / min_bytes) {
      fail(std::string(what) + ": count " + std::to_string(n) + " exceeds the bytes left");
      return 0;
    }
    return n;
  }
  void vec_i64(std::vector<std::int64_t>& v, std::uint64_t max, const char* what) {
    const std::uint64_t n = count(8, what);
    if (n > max)
      fail(std::string(what) + ": " + std::to_string(n) + " entries, at most " + std::to_string(max));
    if (!ok()) return;
    v.resize(n);
    for (auto& x : v) pod(x, what);
  }
  void vec_i32(std::vector<std::int32_t>& v, const char* what) {
    const std::uint64_t n = count(4, what);
    if (!ok()) return;
    v.resize(n);
    for (auto& x : v) pod(x, what);
  }
  template <std::size_t N>
  void arr_i64(std::array<std::int64_t, N>& a, const char* what) {
    for (auto& x : a) pod(x, what);
  }
  void str(std::string& s, const char* what) {
    const std::uint64_t n = count(1, what);
    if (n > kMaxName)
      fail(std::string(what) + ": " + std::to_string(n) + " bytes, at most " + std::to_string(kMaxName));
    if (!ok()) return;
    s.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
    pos_ += n;
  }

 private:
  std::span<const std::byte> b_;
  std::size_t pos_ = 0;
  std::string error_;
};

// ---- field lists (written once, walked by Writer and Reader) ----

template <class IO, class J>
void walk(IO& io, J& j, std::type_identity<ConvJob>) {
  io.i32(j.layer, "conv.layer");
  io.i64(j.cin, "conv.cin"), io.i64(j.h, "conv.h"), io.i64(j.w, "conv.w"), io.i64(j.cout, "conv.cout");
  io.i64(j.groups, "conv.groups"), io.i64(j.kh, "conv.kh"), io.i64(j.kw, "conv.kw");
  io.i64(j.sh, "conv.sh"), io.i64(j.sw, "conv.sw"), io.i64(j.pt, "conv.pt"), io.i64(j.pl, "conv.pl");
  io.i64(j.oh, "conv.oh"), io.i64(j.ow, "conv.ow"), io.i64(j.dh, "conv.dh"), io.i64(j.dw, "conv.dw");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<UnaryOp>) {
  io.enumeration(o.kind, UnaryKind::kSqrt, "unary.kind");
  io.f32(o.lo, "unary.lo"), io.f32(o.hi, "unary.hi"), io.f32(o.alpha, "unary.alpha"),
      io.f32(o.beta, "unary.beta");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<ChannelAffineOp>) {
  io.i64(o.channels, "affine.channels"), io.i64(o.plane, "affine.plane");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<ChannelPreluOp>) {
  io.i64(o.channels, "prelu.channels"), io.i64(o.plane, "prelu.plane");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<BinaryOp>) {
  io.enumeration(o.kind, BinaryKind::kDiv, "binary.kind");
  io.arr_i64(o.dims, "binary.dims"), io.arr_i64(o.a_strides, "binary.a_strides");
  io.arr_i64(o.b_strides, "binary.b_strides");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<TransposeOp>) {
  io.vec_i64(o.dims, kMaxRank, "transpose.dims"), io.vec_i64(o.strides, kMaxRank, "transpose.strides");
  io.i64(o.offset, "transpose.offset");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<MaxPoolOp>) {
  io.i64(o.channels, "maxpool.channels"), io.i64(o.h, "maxpool.h"), io.i64(o.w, "maxpool.w");
  io.i64(o.kh, "maxpool.kh"), io.i64(o.kw, "maxpool.kw"), io.i64(o.sh, "maxpool.sh"),
      io.i64(o.sw, "maxpool.sw");
  io.i64(o.oh, "maxpool.oh"), io.i64(o.ow, "maxpool.ow"), io.i64(o.pt, "maxpool.pt"),
      io.i64(o.pl, "maxpool.pl");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<ResizeOp>) {
  io.i64(o.channels, "resize.channels"), io.i64(o.h, "resize.h"), io.i64(o.w, "resize.w");
  io.i64(o.sy, "resize.sy"), io.i64(o.sx, "resize.sx"), io.i64(o.oh, "resize.oh"), io.i64(o.ow, "resize.ow");
  io.enumeration(o.mode, ResizeMode::kLinear, "resize.mode");
  io.enumeration(o.coord, ResizeCoord::kAlignCorners, "resize.coord");
  io.enumeration(o.nearest, ResizeNearest::kCeil, "resize.nearest");
  io.f32(o.scale_y, "resize.scale_y"), io.f32(o.scale_x, "resize.scale_x");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<GlobalAverageOp>) {
  io.i64(o.channels, "gap.channels"), io.i64(o.plane, "gap.plane");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<GemvOp>) {
  io.i64(o.k, "gemv.k"), io.i64(o.n, "gemv.n"), io.flag(o.trans_b, "gemv.trans_b");
  io.f32(o.alpha, "gemv.alpha"), io.f32(o.beta, "gemv.beta"), io.flag(o.has_bias, "gemv.has_bias");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<AvgPoolOp>) {
  io.i64(o.channels, "avgpool.channels"), io.i64(o.h, "avgpool.h"), io.i64(o.w, "avgpool.w");
  io.i64(o.kh, "avgpool.kh"), io.i64(o.kw, "avgpool.kw"), io.i64(o.sh, "avgpool.sh"),
      io.i64(o.sw, "avgpool.sw");
  io.i64(o.oh, "avgpool.oh"), io.i64(o.ow, "avgpool.ow"), io.i64(o.pt, "avgpool.pt"),
      io.i64(o.pl, "avgpool.pl");
  io.i64(o.pb, "avgpool.pb"), io.i64(o.pr, "avgpool.pr"),
      io.flag(o.count_include_pad, "avgpool.count_include_pad");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<SoftmaxOp>) {
  io.i64(o.outer, "softmax.outer"), io.i64(o.axis, "softmax.axis"), io.i64(o.inner, "softmax.inner");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<ConcatOp>) {
  io.i64(o.outer, "concat.outer"), io.i64(o.inner, "concat.inner");
  io.vec_i64(o.parts, std::numeric_limits<std::uint64_t>::max(), "concat.parts");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<MatMulOp>) {
  io.i64(o.batch, "matmul.batch"), io.i64(o.m, "matmul.m"), io.i64(o.k, "matmul.k"), io.i64(o.n, "matmul.n");
  io.i64(o.a_stride, "matmul.a_stride"), io.i64(o.b_stride, "matmul.b_stride"),
      io.flag(o.trans_b, "matmul.trans_b");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<ReduceMeanOp>) {
  io.i64(o.outer, "reducemean.outer"), io.i64(o.len, "reducemean.len"), io.i64(o.inner, "reducemean.inner");
}
template <class IO, class O>
void walk(IO& io, O& o, std::type_identity<PadOp>) {
  io.arr_i64(o.in_dims, "pad.in_dims"), io.arr_i64(o.begin, "pad.begin"), io.arr_i64(o.end, "pad.end");
  io.f32(o.value, "pad.value");
}
template <class IO, class F>
void walk_fusion(IO& io, F& f) {
  io.enumeration(f.kind, FusionKind::kResizeBinary, "fusion.kind");
  io.i32(f.steps, "fusion.steps");
  io.i8(f.pre, "fusion.pre"), io.i8(f.pre_act, "fusion.pre_act"), io.i8(f.pw, "fusion.pw");
  io.i8(f.pw_act, "fusion.pw_act"), io.i8(f.dw, "fusion.dw"), io.i8(f.dw_act, "fusion.dw_act");
  io.i8(f.pool, "fusion.pool"), io.i8(f.side, "fusion.side");
}

/// Reads the op of variant index `index` into `op`.
template <std::size_t I = 0>
void read_op(Reader& r, std::size_t index, Op& op) {
  if constexpr (I < std::variant_size_v<Op>) {
    if (index == I) {
      using T = std::variant_alternative_t<I, Op>;
      T v{};
      walk(r, v, std::type_identity<T>{});
      op = std::move(v);
      return;
    }
    read_op<I + 1>(r, index, op);
  } else {
    r.fail("step op: kind " + std::to_string(index) + " out of range");
  }
}

// ---- validation ----

/// a·b, false on overflow past kMaxLen or a negative factor.
bool mul(std::int64_t a, std::int64_t b, std::int64_t& out) {
  if (a < 0 || b < 0) return false;
  if (a != 0 && b > kMaxLen / a) return false;
  out = a * b;
  return true;
}
bool product(std::initializer_list<std::int64_t> xs, std::int64_t& out) {
  std::int64_t p = 1;
  for (auto x : xs)
    if (!mul(p, x, p)) return false;
  out = p;
  return true;
}

class Validator {
 public:
  Validator(const Program& p, const std::vector<std::uint64_t>& blob_floats) : p_(p), blobs_(blob_floats) {}

  Status run() {
    const auto nv = static_cast<std::int64_t>(p_.lens.size());
    if (nv < 1) return bad("a program has at least the input value");
    if (p_.shapes.size() != p_.lens.size()) return bad("shapes and lens differ in count");
    for (std::int64_t v = 0; v < nv; ++v) {
      std::int64_t c = 1;
      if (!shape_count(p_.shapes[v], c)) return bad("value " + std::to_string(v) + ": bad shape");
      if (p_.lens[v] < 1 || p_.lens[v] != c)
        return bad("value " + std::to_string(v) + ": len " + std::to_string(p_.lens[v]) +
                   " is not its shape's");
    }
    std::int64_t in_count = 1;
    if (!shape_count(p_.input_shape, in_count) || in_count != p_.lens[0])
      return bad("the input shape does not hold lens[0] elements");
    if (p_.free.size() != p_.steps.size()) return bad("one free list per step expected");
    std::vector<bool> written(static_cast<std::size_t>(nv), false);
    written[0] = true;
    conv_blob_ = p_.consts.size();
    for (std::size_t i = 0; i < p_.steps.size(); ++i) {
      const Step& s = p_.steps[i];
      step_ = i;
      if (s.out < 1 || s.out >= nv) return bad("output value " + std::to_string(s.out) + " out of range");
      if (written[static_cast<std::size_t>(s.out)])
        return bad("value " + std::to_string(s.out) + " written twice");
      for (const Arg& a : s.args) {
        if (a.kind == Arg::Kind::kValue) {
          if (a.id < 0 || a.id >= nv) return bad("value operand " + std::to_string(a.id) + " out of range");
          if (!written[static_cast<std::size_t>(a.id)])
            return bad("value " + std::to_string(a.id) + " is read before it is written");
        } else if (a.id < 0 || static_cast<std::size_t>(a.id) >= p_.consts.size()) {
          return bad("constant operand " + std::to_string(a.id) + " out of range");
        }
      }
      FT_TRY(std::visit([&](const auto& op) { return check(op, s); }, s.op));
      written[static_cast<std::size_t>(s.out)] = true;
      FT_TRY(check_fusion(s.fusion, i));
      for (auto v : p_.free[i])
        if (v < 0 || v >= nv) return bad("free list entry " + std::to_string(v) + " out of range");
    }
    if (conv_blob_ != blobs_.size())
      return bad("constant table holds " + std::to_string(blobs_.size()) + " entries, the program uses " +
                 std::to_string(conv_blob_));
    if (p_.outputs.empty()) return bad("no outputs");
    for (const auto& o : p_.outputs) {
      std::int64_t c = 1;
      if (o.value < 0 || o.value >= nv || !written[static_cast<std::size_t>(o.value)])
        return bad("output '" + o.name + "': value " + std::to_string(o.value) + " is not computed");
      if (!shape_count(o.shape, c) || c != p_.lens[static_cast<std::size_t>(o.value)])
        return bad("output '" + o.name + "': shape does not hold its value");
    }
    return {};
  }

 private:
  Status bad(const std::string& what) const {
    return invalid_argument("program bytes: step " + std::to_string(step_) + ": " + what);
  }
  static bool shape_count(const Shape& s, std::int64_t& out) {
    if (s.size() > kMaxRank) return false;
    std::int64_t c = 1;
    for (auto d : s)
      if (d < 1 || !mul(c, d, c)) return false;
    out = c;
    return true;
  }
  std::int64_t len(const Arg& a) const {
    return a.kind == Arg::Kind::kValue ? p_.lens[static_cast<std::size_t>(a.id)]
                                       : static_cast<std::int64_t>(blobs_[static_cast<std::size_t>(a.id)]);
  }
  Status args(const Step& s, std::size_t lo, std::size_t hi, bool first_value = true) const {
    if (s.args.size() < lo || s.args.size() > hi)
      return bad(std::string(op_name(s.op)) + " with " + std::to_string(s.args.size()) + " operands");
    if (first_value && s.args[0].kind != Arg::Kind::kValue) return bad("first operand is not a value");
    return {};
  }
  Status expect(bool cond, const std::string& what) const { return cond ? Status{} : bad(what); }
  std::int64_t out_len(const Step& s) const { return p_.lens[static_cast<std::size_t>(s.out)]; }
  bool const_arg(const Step& s, std::size_t i, std::int64_t floats) const {
    return s.args[i].kind == Arg::Kind::kConst && len(s.args[i]) == floats;
  }

  Status check(const ConvJob& j, const Step& s) {
    FT_TRY(args(s, 1, 1));
    std::int64_t in = 0, out = 0, wts = 0;
    const bool geom = j.cin > 0 && j.h > 0 && j.w > 0 && j.cout > 0 && j.groups > 0 && j.kh > 0 && j.kw > 0 &&
                      j.sh > 0 && j.sw > 0 && j.dh > 0 && j.dw > 0 && j.pt >= 0 && j.pl >= 0 && j.oh > 0 &&
                      j.ow > 0 && j.cin % j.groups == 0 && j.cout % j.groups == 0;
    FT_TRY(expect(geom, "Conv: bad geometry"));
    FT_TRY(expect(product({j.cin, j.h, j.w}, in) && in == len(s.args[0]),
                  "Conv: input size differs from its value"));
    FT_TRY(expect(product({j.cout, j.oh, j.ow}, out) && out == out_len(s),
                  "Conv: output size differs from its value"));
    FT_TRY(expect(product({j.cout, j.cin / j.groups, j.kh, j.kw}, wts), "Conv: weights too large"));
    FT_TRY(take_blob(static_cast<std::uint64_t>(wts), "Conv weights"));
    if (j.bias) FT_TRY(take_blob(static_cast<std::uint64_t>(j.cout), "Conv bias"));
    return {};
  }
  Status check(const UnaryOp&, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    return expect(len(s.args[0]) == out_len(s), "Unary: sizes differ");
  }
  template <class Channel>
  Status channel(const Channel& o, const Step& s, std::size_t consts, const char* name) const {
    FT_TRY(args(s, 1 + consts, 1 + consts));
    std::int64_t n = 0;
    FT_TRY(expect(o.channels > 0 && o.plane > 0 && product({o.channels, o.plane}, n) && n == len(s.args[0]) &&
                      n == out_len(s),
                  std::string(name) + ": sizes differ"));
    for (std::size_t i = 1; i <= consts; ++i)
      FT_TRY(
          expect(const_arg(s, i, o.channels), std::string(name) + ": per-channel constant of a wrong size"));
    return {};
  }
  Status check(const ChannelAffineOp& o, const Step& s) const { return channel(o, s, 2, "ChannelAffine"); }
  Status check(const ChannelPreluOp& o, const Step& s) const { return channel(o, s, 1, "ChannelPrelu"); }
  /// Largest index + 1 that `dims` with `strides` reach from `offset`; false when negative or overflowing.
  static bool extent(std::span<const std::int64_t> dims, std::span<const std::int64_t> strides,
                     std::int64_t offset, std::int64_t& hi) {
    std::int64_t lo_i = offset, hi_i = offset;
    for (std::size_t k = 0; k < dims.size(); ++k) {
      std::int64_t span = 0;
      if (dims[k] < 1 || strides[k] < -kMaxLen || strides[k] > kMaxLen) return false;
      const std::int64_t mag = strides[k] < 0 ? -strides[k] : strides[k];
      if (!mul(dims[k] - 1, mag, span)) return false;
      (strides[k] < 0 ? lo_i : hi_i) += strides[k] < 0 ? -span : span;
      if (hi_i > kMaxLen || lo_i < -kMaxLen) return false;
    }
    if (lo_i < 0) return false;
    hi = hi_i + 1;
    return true;
  }
  Status check(const BinaryOp& o, const Step& s) const {
    FT_TRY(args(s, 2, 2, false));
    FT_TRY(expect(s.args[0].kind == Arg::Kind::kValue || s.args[1].kind == Arg::Kind::kValue,
                  "Binary: both operands constant"));
    std::int64_t n = 1, ea = 0, eb = 0;
    for (auto d : o.dims) FT_TRY(expect(d >= 1 && mul(n, d, n), "Binary: bad dims"));
    FT_TRY(expect(n == out_len(s), "Binary: output size differs"));
    for (int k = 0; k < 4; ++k)
      FT_TRY(expect(o.a_strides[k] >= 0 && o.b_strides[k] >= 0, "Binary: negative stride"));
    FT_TRY(expect(extent(o.dims, o.a_strides, 0, ea) && ea <= len(s.args[0]), "Binary: operand a too small"));
    FT_TRY(expect(extent(o.dims, o.b_strides, 0, eb) && eb <= len(s.args[1]), "Binary: operand b too small"));
    return {};
  }
  Status check(const TransposeOp& o, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    FT_TRY(
        expect(!o.dims.empty() && o.dims.size() == o.strides.size(), "Transpose: dims and strides differ"));
    std::int64_t n = 1, e = 0;
    for (auto d : o.dims) FT_TRY(expect(d >= 1 && mul(n, d, n), "Transpose: bad dims"));
    FT_TRY(expect(n == out_len(s), "Transpose: output size differs"));
    return expect(extent(o.dims, o.strides, o.offset, e) && e <= len(s.args[0]),
                  "Transpose: reads past its input");
  }
  template <class Pool>
  Status pool(const Pool& o, const Step& s, const char* name) const {
    FT_TRY(args(s, 1, 1));
    std::int64_t in = 0, out = 0;
    FT_TRY(expect(o.channels > 0 && o.h > 0 && o.w > 0 && o.kh > 0 && o.kw > 0 && o.sh > 0 && o.sw > 0 &&
                      o.oh > 0 && o.ow > 0 && o.pt >= 0 && o.pl >= 0 && o.pt < o.kh && o.pl < o.kw,
                  std::string(name) + ": bad geometry"));
    FT_TRY(expect(product({o.channels, o.h, o.w}, in) && in == len(s.args[0]),
                  std::string(name) + ": input size"));
    return expect(product({o.channels, o.oh, o.ow}, out) && out == out_len(s),
                  std::string(name) + ": output size");
  }
  Status check(const MaxPoolOp& o, const Step& s) const { return pool(o, s, "MaxPool"); }
  Status check(const AvgPoolOp& o, const Step& s) const {
    FT_TRY(expect(o.pb >= 0 && o.pr >= 0, "AvgPool: negative pad"));
    return pool(o, s, "AvgPool");
  }
  Status check(const ResizeOp& o, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    std::int64_t in = 0, out = 0;
    FT_TRY(expect(o.channels > 0 && o.h > 0 && o.w > 0 && o.oh > 0 && o.ow > 0 && o.sy >= 0 && o.sx >= 0,
                  "Resize: bad geometry"));
    FT_TRY(expect((o.sy == 0) == (o.sx == 0), "Resize: one integer scale without the other"));
    FT_TRY(expect(o.sy == 0 || (o.oh == o.h * o.sy && o.ow == o.w * o.sx), "Resize: integer scale mismatch"));
    FT_TRY(expect(product({o.channels, o.h, o.w}, in) && in == len(s.args[0]), "Resize: input size"));
    return expect(product({o.channels, o.oh, o.ow}, out) && out == out_len(s), "Resize: output size");
  }
  Status check(const GlobalAverageOp& o, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    std::int64_t in = 0;
    FT_TRY(expect(o.channels > 0 && o.plane > 0 && product({o.channels, o.plane}, in) && in == len(s.args[0]),
                  "GlobalAverage: input size"));
    return expect(o.channels == out_len(s), "GlobalAverage: output size");
  }
  Status check(const GemvOp& o, const Step& s) const {
    FT_TRY(args(s, o.has_bias ? 3 : 2, o.has_bias ? 3 : 2));
    std::int64_t w = 0;
    FT_TRY(expect(o.k > 0 && o.n > 0 && o.k == len(s.args[0]) && o.n == out_len(s), "Gemv: sizes"));
    FT_TRY(expect(product({o.k, o.n}, w) && const_arg(s, 1, w), "Gemv: weights of a wrong size"));
    if (o.has_bias) FT_TRY(expect(const_arg(s, 2, o.n), "Gemv: bias of a wrong size"));
    return {};
  }
  Status check(const SoftmaxOp& o, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    std::int64_t n = 0;
    return expect(o.outer > 0 && o.axis > 0 && o.inner > 0 && product({o.outer, o.axis, o.inner}, n) &&
                      n == len(s.args[0]) && n == out_len(s),
                  "Softmax: sizes");
  }
  Status check(const ConcatOp& o, const Step& s) const {
    FT_TRY(args(s, 1, std::numeric_limits<std::size_t>::max(), false));
    FT_TRY(expect(o.parts.size() == s.args.size() && o.outer > 0 && o.inner > 0,
                  "Concat: one part per operand"));
    std::int64_t total = 0;
    for (std::size_t i = 0; i < o.parts.size(); ++i) {
      std::int64_t n = 0;
      FT_TRY(expect(o.parts[i] > 0 && product({o.outer, o.parts[i], o.inner}, n) && n == len(s.args[i]),
                    "Concat: operand " + std::to_string(i) + " size"));
      FT_TRY(expect(mul(1, total + o.parts[i], total), "Concat: too large"));
    }
    std::int64_t n = 0;
    return expect(product({o.outer, total, o.inner}, n) && n == out_len(s), "Concat: output size");
  }
  Status check(const MatMulOp& o, const Step& s) const {
    FT_TRY(args(s, 2, 2));
    std::int64_t a = 0, b = 0, c = 0, ea = 0, eb = 0;
    FT_TRY(expect(o.batch > 0 && o.m > 0 && o.k > 0 && o.n > 0 && o.a_stride >= 0 && o.b_stride >= 0,
                  "MatMul: bad geometry"));
    FT_TRY(expect(product({o.m, o.k}, a) && product({o.k, o.n}, b) && product({o.batch, o.m, o.n}, c) &&
                      c == out_len(s),
                  "MatMul: output size"));
    FT_TRY(expect(product({o.batch - 1, o.a_stride}, ea) && ea + a <= len(s.args[0]), "MatMul: a too small"));
    return expect(product({o.batch - 1, o.b_stride}, eb) && eb + b <= len(s.args[1]), "MatMul: b too small");
  }
  Status check(const ReduceMeanOp& o, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    std::int64_t in = 0, out = 0;
    FT_TRY(expect(o.outer > 0 && o.len > 0 && o.inner > 0 && product({o.outer, o.len, o.inner}, in) &&
                      in == len(s.args[0]),
                  "ReduceMean: input size"));
    return expect(product({o.outer, o.inner}, out) && out == out_len(s), "ReduceMean: output size");
  }
  Status check(const PadOp& o, const Step& s) const {
    FT_TRY(args(s, 1, 1));
    std::int64_t in = 1, out = 1;
    for (int k = 0; k < 4; ++k) {
      FT_TRY(expect(o.in_dims[k] >= 1 && o.begin[k] >= 0 && o.end[k] >= 0 && o.begin[k] <= kMaxLen &&
                        o.end[k] <= kMaxLen && mul(in, o.in_dims[k], in) &&
                        mul(out, o.in_dims[k] + o.begin[k] + o.end[k], out),
                    "Pad: bad dims"));
    }
    FT_TRY(expect(in == len(s.args[0]), "Pad: input size"));
    return expect(out == out_len(s), "Pad: output size");
  }
  Status check_fusion(const Fusion& f, std::size_t i) const {
    if (f.kind == FusionKind::kNone) return expect(f.steps == 1, "unfused step spans several steps");
    FT_TRY(expect(f.steps >= 1 && static_cast<std::uint64_t>(f.steps) <= p_.steps.size() - i,
                  "fused group runs past the last step"));
    for (std::int8_t m : {f.pre, f.pre_act, f.pw, f.pw_act, f.dw, f.dw_act, f.pool, f.side})
      FT_TRY(expect(m >= -1 && m < f.steps, "fusion member offset out of range"));
    if (f.kind == FusionKind::kConvBand)
      FT_TRY(expect(f.pw >= 0 && f.dw >= 0, "band without its 1×1 or depthwise"));
    if (f.kind == FusionKind::kResizeBinary) FT_TRY(expect(f.side == 0 || f.side == 1, "resize fusion side"));
    return {};
  }
  Status take_blob(std::uint64_t floats, const char* what) {
    if (conv_blob_ >= blobs_.size()) return bad(std::string(what) + ": missing from the constant table");
    if (blobs_[conv_blob_] != floats)
      return bad(std::string(what) + ": " + std::to_string(blobs_[conv_blob_]) + " floats, expected " +
                 std::to_string(floats));
    ++conv_blob_;
    return {};
  }

  const Program& p_;
  const std::vector<std::uint64_t>& blobs_;
  std::size_t step_ = 0;
  std::size_t conv_blob_ = 0;
};

}  // namespace

Expected<EncodedProgram> encode_program(const Program& p) {
  EncodedProgram e;
  Writer w;
  w.pod(kMagic), w.pod(kVersion);
  w.vec_i64(p.input_shape, kMaxRank, "input_shape");
  w.vec_i64(p.lens, 0, "lens");
  w.count(p.shapes.size(), "shapes");
  for (const auto& s : p.shapes) w.vec_i64(s, kMaxRank, "shape");
  w.pod(p.conv_count);
  for (std::size_t i = 0; i < p.consts.size(); ++i) {
    if (!p.consts[i]) return invalid_argument("program constant " + std::to_string(i) + " is null");
    e.blobs.push_back(p.consts[i]);
  }
  w.count(p.steps.size(), "steps");
  for (const Step& s : p.steps) {
    w.pod(static_cast<std::uint8_t>(s.op.index()));
    std::visit([&](const auto& op) { walk(w, op, std::type_identity<std::decay_t<decltype(op)>>{}); }, s.op);
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      if (!j->weights) return invalid_argument("conv '" + s.node + "' has no weights");
      w.flag(j->bias != nullptr, "conv.has_bias");
      e.blobs.push_back(j->weights);
      if (j->bias) e.blobs.push_back(j->bias);
    }
    w.count(s.args.size(), "args");
    for (const Arg& a : s.args) {
      w.pod(static_cast<std::uint8_t>(a.kind));
      w.pod(a.id);
    }
    w.pod(s.out);
    w.str(s.node, "node");
    walk_fusion(w, s.fusion);
  }
  w.count(p.free.size(), "free");
  for (const auto& f : p.free) w.vec_i32(f, "free list");
  w.count(p.outputs.size(), "outputs");
  for (const auto& o : p.outputs) {
    w.str(o.name, "output name");
    w.pod(o.value);
    w.vec_i64(o.shape, kMaxRank, "output shape");
  }
  w.count(e.blobs.size(), "blobs");
  for (const auto& b : e.blobs) w.pod(static_cast<std::uint64_t>(b->size()));
  e.bytes = w.take();
  return e;
}

Expected<DecodedProgram> decode_program(std::span<const std::byte> bytes) {
  Reader r(bytes);
  std::uint32_t magic = 0, version = 0;
  r.pod(magic, "magic"), r.pod(version, "version");
  if (r.ok() && magic != kMagic) return invalid_argument("program bytes: bad magic");
  if (r.ok() && version != kVersion)
    return invalid_argument("program bytes: version " + std::to_string(version) + ", expected " +
                            std::to_string(kVersion));
  DecodedProgram d;
  Program& p = d.program;
  std::vector<bool> conv_bias;  // per Conv in step order
  r.vec_i64(p.input_shape, kMaxRank, "input_shape");
  r.vec_i64(p.lens, std::numeric_limits<std::uint64_t>::max(), "lens");
  const std::uint64_t nshapes = r.count(8, "shapes");
  if (r.ok()) p.shapes.resize(nshapes);
  for (auto& s : p.shapes) r.vec_i64(s, kMaxRank, "shape");
  r.pod(p.conv_count, "conv_count");
  const std::uint64_t nsteps = r.count(16, "steps");
  if (r.ok()) p.steps.resize(nsteps);
  for (Step& s : p.steps) {
    std::uint8_t index = 0;
    if (!r.pod(index, "step op")) break;
    read_op(r, index, s.op);
    if (std::holds_alternative<ConvJob>(s.op)) {
      bool b = false;
      r.flag(b, "conv.has_bias");
      conv_bias.push_back(b);
    }
    const std::uint64_t nargs = r.count(5, "args");
    if (!r.ok()) break;
    s.args.resize(nargs);
    for (Arg& a : s.args) {
      r.enumeration(a.kind, Arg::Kind::kConst, "arg kind");
      r.pod(a.id, "arg id");
    }
    r.pod(s.out, "step out");
    r.str(s.node, "node");
    walk_fusion(r, s.fusion);
  }
  const std::uint64_t nfree = r.count(8, "free");
  if (r.ok()) p.free.resize(nfree);
  for (auto& f : p.free) r.vec_i32(f, "free list");
  const std::uint64_t nout = r.count(20, "outputs");
  if (r.ok()) p.outputs.resize(nout);
  for (auto& o : p.outputs) {
    r.str(o.name, "output name");
    r.pod(o.value, "output value");
    r.vec_i64(o.shape, kMaxRank, "output shape");
  }
  const std::uint64_t nblobs = r.count(8, "blobs");
  if (r.ok()) d.blob_floats.resize(nblobs);
  for (auto& b : d.blob_floats) {
    r.pod(b, "blob size");
    if (b > kMaxBlobFloats) r.fail("constant of " + std::to_string(b) + " floats, above 64 Mi");
  }
  if (!r.ok()) return invalid_argument("program bytes: " + r.error());
  if (!r.at_end())
    return invalid_argument("program bytes: " + std::to_string(bytes.size() - r.pos()) + " trailing bytes");
  // Program::consts are the blobs before the conv weights.
  std::size_t conv_blobs = 0;
  for (bool b : conv_bias) conv_blobs += b ? 2 : 1;
  if (conv_blobs > d.blob_floats.size())
    return invalid_argument("program bytes: the constant table is shorter than the convolutions need");
  p.consts.assign(d.blob_floats.size() - conv_blobs, nullptr);
  // A Conv's bias flag becomes an empty placeholder blob (validation counts it; bind_blobs fills it).
  std::size_t conv = 0;
  for (Step& s : p.steps)
    if (auto* j = std::get_if<ConvJob>(&s.op))
      if (conv_bias[conv++]) j->bias = std::make_shared<const std::vector<float>>();
  FT_TRY(Validator(p, d.blob_floats).run());
  return d;
}

Status bind_blobs(Program& p, std::span<const Blob> blobs) {
  std::size_t need = p.consts.size();
  for (const Step& s : p.steps)
    if (const auto* j = std::get_if<ConvJob>(&s.op)) need += j->bias ? 2 : 1;
  if (blobs.size() != need)
    return invalid_argument("bind_blobs: " + std::to_string(blobs.size()) + " constants, the program needs " +
                            std::to_string(need));
  for (const auto& b : blobs)
    if (!b) return invalid_argument("bind_blobs: a null constant");
  std::size_t k = 0;
  for (auto& c : p.consts) {
    if (c && c->size() != blobs[k]->size()) return invalid_argument("bind_blobs: constant size differs");
    c = blobs[k++];
  }
  for (Step& s : p.steps) {
    auto* j = std::get_if<ConvJob>(&s.op);
    if (!j) continue;
    const auto wts = static_cast<std::size_t>(j->cout * (j->cin / j->groups) * j->kh * j->kw);
    if (blobs[k]->size() != wts) return invalid_argument("bind_blobs: conv weights of a wrong size");
    j->weights = blobs[k++];
    if (j->bias) {
      if (blobs[k]->size() != static_cast<std::size_t>(j->cout))
        return invalid_argument("bind_blobs: conv bias size");
      j->bias = blobs[k++];
    }
  }
  return {};
}

}  // namespace facetrace::faces::gpu
