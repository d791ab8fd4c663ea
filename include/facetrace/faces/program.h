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
  Blob weights;
  Blob bias;  ///< may be null
  /// Multiply-adds at batch 1: cout·oh·ow·(cin/g)·kh·kw.
  std::int64_t macs() const { return cout * oh * ow * (cin / groups) * kh * kw; }
  /// A dense 1×1, stride-1, unpadded conv (a matrix product over the plane).
  bool is_pointwise() const {
    return groups == 1 && kh == 1 && kw == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && oh == h &&
           ow == w;
  }
  /// One input channel per output channel (groups = cin = cout).
  bool is_depthwise() const { return groups == cin && cout == cin; }
};

enum class UnaryKind : std::uint8_t { kRelu, kSigmoid, kClip };
/// Element-wise: max(x,0); 1/(1+exp(−x)); min(max(x,lo),hi).
struct UnaryOp {
  UnaryKind kind = UnaryKind::kRelu;
  float lo = 0.0f, hi = 0.0f;  ///< Clip only (±inf when absent)
};
/// y = x·scale[c] + shift[c]. Args: x, scale (const [channels]), shift (const [channels]).
struct ChannelAffineOp {
  std::int64_t channels = 0, plane = 0;
};
/// y = x ≥ 0 ? x : slope[c]·x. Args: x, slope (const [channels]; a scalar slope is expanded).
struct ChannelPreluOp {
  std::int64_t channels = 0, plane = 0;
};
enum class BinaryKind : std::uint8_t { kAdd, kSub, kMul };
/// out[i] = a[Σ i_k·as_k] ∘ b[Σ i_k·bs_k]; operands right-aligned to rank 4, broadcast axes have stride 0.
struct BinaryOp {
  BinaryKind kind = BinaryKind::kAdd;
  std::array<std::int64_t, 4> dims{}, a_strides{}, b_strides{};
};
/// out[j] = in[Σ j_k·strides[k]]: `dims` are the output dims, `strides` the input stride of each output axis.
struct TransposeOp {
  std::vector<std::int64_t> dims, strides;
};
/// Max over kh×kw windows, no padding; `channels` planes of h×w → oh×ow.
struct MaxPoolOp {
  std::int64_t channels = 0, h = 0, w = 0, kh = 0, kw = 0, sh = 1, sw = 1, oh = 0, ow = 0;
};
/// Integer nearest up-scale: out[c,y,x] = in[c, y/sy, x/sx].
struct ResizeOp {
  std::int64_t channels = 0, h = 0, w = 0, sy = 1, sx = 1;
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

using Op = std::variant<ConvJob, UnaryOp, ChannelAffineOp, ChannelPreluOp, BinaryOp, TransposeOp, MaxPoolOp,
                        ResizeOp, GlobalAverageOp, GemvOp>;

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
