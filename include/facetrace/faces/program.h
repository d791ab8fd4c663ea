/// @file
/// The program IR of a lowered face network (docs/design/faces.md §3): values, steps in topological order, free lists.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace facetrace::faces {

/// A tensor shape (NCHW for images). In a graph's declared I/O a symbolic dimension is stored as 0.
using Shape = std::vector<std::int64_t>;

/// A resident constant blob (weights, biases, per-channel factors). Immutable and shared between copies.
using Blob = std::shared_ptr<const std::vector<float>>;

/// The graph input is always value 0.
inline constexpr std::int32_t kInputValue = 0;

/// An operand: a value computed by the program, or a constant blob (`Program::consts[id]`).
struct Arg {
  enum class Kind : std::uint8_t { kValue, kConst };
  Kind kind = Kind::kValue;
  std::int32_t id = 0;
  static Arg value(std::int32_t v) { return {Kind::kValue, v}; }
  static Arg constant(std::int32_t c) { return {Kind::kConst, c}; }
};

/// A 2-D convolution (docs/design/faces.md §2/§3). Weights are [cout, cin/groups, kh, kw]; bias is [cout] or null.
/// out[co,oy,ox] = bias[co] + Σ_{ci∈grp(co)} Σ_{ky,kx} x[ci, oy·sh+ky−pt, ox·sw+kx−pl]·W[co,ci_l,ky,kx].
struct ConvJob {
  std::int32_t layer = 0;  ///< index of this conv among the program's convs
  std::int64_t cin = 0, h = 0, w = 0, cout = 0, groups = 1, kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0,
               oh = 0, ow = 0;
  std::int64_t dh = 1, dw = 1;  ///< dilations: tap (ky,kx) reads x[ci, oy·sh+ky·dh−pt, ox·sw+kx·dw−pl]
  Blob weights;
  Blob bias;  ///< may be null
  /// Multiply-adds at batch 1: cout·oh·ow·(cin/g)·kh·kw.
  std::int64_t macs() const { return cout * oh * ow * (cin / groups) * kh * kw; }
  /// A dense 1×1, stride-1, unpadded conv (a matrix product over the plane).
  bool is_pointwise() const {
    return groups == 1 && kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h &&
           ow == w && dh == 1 && dw == 1;
  }
  /// One input channel per output channel (groups = cin = cout).
  bool is_depthwise() const { return groups == cin && cout == cin; }
};

enum class UnaryKind : std::uint8_t {
  kRelu,         ///< max(x, 0)
  kSigmoid,      ///< 1/(1+exp(−x))
  kClip,         ///< min(max(x, lo), hi)
  kLeakyRelu,    ///< x ≥ 0 ? x : alpha·x
  kTanh,         ///< tanh(x)
  kHardSigmoid,  ///< max(0, min(1, alpha·x + beta))
  kHardSwish,    ///< x·max(0, min(1, x/6 + 1/2))
  kSqrt,         ///< sqrt(x) (a negative input gives NaN, which the non-finite check reports)
};
/// Element-wise, see UnaryKind.
struct UnaryOp {
  UnaryKind kind = UnaryKind::kRelu;
  float lo = 0.0f, hi = 0.0f;       ///< Clip only (±inf when absent)
  float alpha = 0.0f, beta = 0.0f;  ///< LeakyRelu (alpha), HardSigmoid (alpha, beta)
};
/// y = x·scale[c] + shift[c]. Args: x, scale (const [channels]), shift (const [channels]).
struct ChannelAffineOp {
  std::int64_t channels = 0, plane = 0;
};
/// y = x ≥ 0 ? x : slope[c]·x. Args: x, slope (const [channels]; a scalar slope is expanded).
struct ChannelPreluOp {
  std::int64_t channels = 0, plane = 0;
};
enum class BinaryKind : std::uint8_t { kAdd, kSub, kMul, kDiv };
/// out[i] = a[Σ i_k·as_k] ∘ b[Σ i_k·bs_k]; operands right-aligned to rank 4, broadcast axes have stride 0.
struct BinaryOp {
  BinaryKind kind = BinaryKind::kAdd;
  std::array<std::int64_t, 4> dims{}, a_strides{}, b_strides{};
};
/// A strided copy: out[j] = in[offset + Σ j_k·strides[k]]: `dims` are the output dims, `strides` the input stride
/// of each output axis (0 = broadcast, negative = reversed). Transpose (offset 0), Slice and Split on data (one step
/// per output) and Expand lower here.
struct TransposeOp {
  std::vector<std::int64_t> dims, strides;
  std::int64_t offset = 0;
};
/// Max over kh×kw windows (dilation 1); `channels` planes of h×w → oh×ow. Padded taps (pt/pl before the plane,
/// anything past it, e.g. from ceil_mode) are skipped; every window holds at least one real tap.
struct MaxPoolOp {
  std::int64_t channels = 0, h = 0, w = 0, kh = 0, kw = 0, sh = 1, sw = 1, oh = 0, ow = 0;
  std::int64_t pt = 0, pl = 0;
};
/// Mean over kh×kw windows, geometry as MaxPoolOp. The divisor is kh·kw when count_include_pad (taps in the
/// explicit pads count, taps past pads·ceil_mode do not: ONNX), else the number of real taps.
struct AvgPoolOp {
  std::int64_t channels = 0, h = 0, w = 0, kh = 0, kw = 0, sh = 1, sw = 1, oh = 0, ow = 0;
  std::int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  bool count_include_pad = false;
};
enum class ResizeMode : std::uint8_t { kNearest, kLinear };
/// ONNX coordinate_transformation_mode: x_in = f(x_out) for output x_out of an axis scaled by s = out/in.
enum class ResizeCoord : std::uint8_t {
  kAsymmetric,        ///< x_out / s
  kHalfPixel,         ///< (x_out + 0.5)/s − 0.5
  kPytorchHalfPixel,  ///< out > 1 ? (x_out + 0.5)/s − 0.5 : 0
  kAlignCorners,      ///< out > 1 ? x_out·(in − 1)/(in·s − 1) : 0 (ONNX; in·s = out from sizes)
};
/// ONNX nearest_mode (kNearest only).
enum class ResizeNearest : std::uint8_t { kFloor, kRoundPreferFloor, kRoundPreferCeil, kCeil };
/// Resize of `channels` planes h×w → oh×ow. sy/sx > 0 mark the integer nearest up-scale out[c,y,x] =
/// in[c, y/sy, x/sx] (nearest, asymmetric, floor, oh = h·sy), which the fast paths and kResizeBinary fusion take;
/// 0 otherwise. Linear is bilinear over the two spatial axes, the source coordinate clamped to [0, in − 1].
struct ResizeOp {
  std::int64_t channels = 0, h = 0, w = 0, sy = 1, sx = 1;
  std::int64_t oh = 0, ow = 0;
  ResizeMode mode = ResizeMode::kNearest;
  ResizeCoord coord = ResizeCoord::kAsymmetric;
  ResizeNearest nearest = ResizeNearest::kFloor;
  float scale_y = 0.0f, scale_x = 0.0f;  ///< s per axis as ONNX computes it (from `scales`, or out/in from `sizes`)
};
/// y[c] = Σ x[c,·] / plane.
struct GlobalAverageOp {
  std::int64_t channels = 0, plane = 0;
};
/// y[j] = α·Σ_i x[i]·W(i,j) + β·bias[j]. Args: x, W (const; [n,k] if trans_b, else [k,n]), bias (const [n]) if
/// has_bias.
struct GemvOp {
  std::int64_t k = 0, n = 0;
  bool trans_b = false;
  float alpha = 1.0f, beta = 1.0f;
  bool has_bias = false;
};

/// Softmax along one axis: the value viewed as [outer, axis, inner]; y = exp(x − max)/Σ exp(x − max) per
/// (outer, inner) line.
struct SoftmaxOp {
  std::int64_t outer = 0, axis = 0, inner = 0;
};
/// Concatenation along one axis: every operand viewed as [outer, parts[i], inner] (values or constants, in arg
/// order); out is [outer, Σ parts, inner].
struct ConcatOp {
  std::int64_t outer = 0, inner = 0;
  std::vector<std::int64_t> parts;
};
/// Matrix products: for each of `batch` pairs, C[m,n] = Σ_k A[m,k]·B(k,n), B(k,n) = b[n,k] when trans_b, else
/// b[k,n]. Args: a (value), b (value or const); pair i reads a at i·a_stride and b at i·b_stride (0 = shared, the
/// numpy broadcast of a 2-D operand); c is contiguous [batch, m, n]. Per image: an ONNX MatMul of rank ≥ 3 or a
/// Gemm whose A has rows beyond the batch.
struct MatMulOp {
  std::int64_t batch = 1, m = 0, k = 0, n = 0, a_stride = 0, b_stride = 0;
  bool trans_b = false;
};
/// Mean over a contiguous run of axes: the value viewed as [outer, len, inner] → [outer, inner]
/// (ReduceMean over axes that are adjacent after dropping size-1 axes).
struct ReduceMeanOp {
  std::int64_t outer = 0, len = 0, inner = 0;
};
/// Constant padding of a rank ≤ 4 value (right-aligned like BinaryOp): out dims = in + begin + end (begin/end
/// ≥ 0; a negative ONNX pad lowers to a slice first); taps outside the input are `value`.
struct PadOp {
  std::array<std::int64_t, 4> in_dims{}, begin{}, end{};
  float value = 0.0f;
};

using Op = std::variant<ConvJob, UnaryOp, ChannelAffineOp, ChannelPreluOp, BinaryOp, TransposeOp, MaxPoolOp,
                        ResizeOp, GlobalAverageOp, GemvOp, AvgPoolOp, SoftmaxOp, ConcatOp, MatMulOp, ReduceMeanOp,
                        PadOp>;

/// Short name of an op kind ("Conv", "Unary", ...).
std::string_view op_name(const Op& op);

/// How a step runs together with the steps after it (docs/design/faces.md §3). Set once after lowering by the fusion pass
/// (src/faces/ir/fuse.h) on the first step of each group; an executor runs the group as one unit that reads the
/// first step's operands (and, for kResizeBinary, the Binary's other operand) and writes the last step's value.
/// Every group gives the same values as its steps run one by one.
enum class FusionKind : std::uint8_t {
  kNone,      ///< the step runs alone
  kConvAct,   ///< Conv → Relu/Clip (2 steps): the activation in the conv's epilogue
  kConvBand,  ///< [dense Conv [→ Relu/Clip] →] 1×1 Conv [→ Relu/Clip] → depthwise Conv [→ Relu/Clip [→ MaxPool]],
              ///< computed in row bands so the intermediate tensors are never stored whole
  kResizeBinary,  ///< nearest Resize → element-wise Binary without broadcasting (2 steps): the up-scaled tensor is
                  ///< never stored
};

/// A fused group's layout. Member positions are offsets from the group's first step; −1 = absent.
struct Fusion {
  FusionKind kind = FusionKind::kNone;
  std::int32_t steps = 1;  ///< steps in the group, this one first
  /// kConvBand: the dense conv before the 1×1 conv and its activation, the 1×1 conv and its activation, the
  /// depthwise conv and its activation, the MaxPool. pw and dw are always present.
  std::int8_t pre = -1, pre_act = -1, pw = -1, pw_act = -1, dw = -1, dw_act = -1, pool = -1;
  /// kResizeBinary: the Binary operand (0 or 1) that the Resize feeds.
  std::int8_t side = -1;
};

/// One step: reads `args`, writes exactly one value `out`. `node` is the ONNX node it came from.
struct Step {
  Op op;
  std::vector<Arg> args;
  std::int32_t out = 0;
  std::string node;
  Fusion fusion;  ///< on the first step of a fused group; kNone elsewhere
};

/// A graph output: ONNX name, the value holding it, and its shape (an alias may reshape a value).
struct ProgramOutput {
  std::string name;
  std::int32_t value = 0;
  Shape shape;
};

/// A network lowered for one input shape. At batch B every value v holds B·lens[v] floats, laid out per image.
struct Program {
  Shape input_shape;                            ///< batch 1
  std::vector<std::int64_t> lens;               ///< element count of each value at batch 1
  std::vector<Shape> shapes;                    ///< shape of each value at batch 1 (as first produced)
  std::vector<Step> steps;                      ///< topological order
  std::vector<std::vector<std::int32_t>> free;  ///< free[i]: values whose last reader is step i
  std::vector<ProgramOutput> outputs;           ///< graph order
  std::vector<Blob> consts;                     ///< resident blobs for Arg::Kind::kConst
  std::int64_t conv_count = 0;

  /// Total conv multiply-adds at batch 1.
  std::int64_t macs() const;
};

}  // namespace facetrace::faces
