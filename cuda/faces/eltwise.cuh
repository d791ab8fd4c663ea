/// @file
/// Private, CUDA builds only: launchers of the element-wise and data-movement kernels of the GPU face program
/// (docs/design/faces.md §8): Unary, ChannelAffine, ChannelPrelu, Binary (broadcast strides), the strided copy
/// (Transpose/Slice/Expand), Pad, Concat, the conv bias/activation epilogue and the Gemv bias fill. Each launcher
/// processes the whole batch in one launch; `*_bstride` is an operand's stride between images (its per-image
/// length for a value, 0 for a constant shared by every image). The arithmetic is the CPU interpreter's
/// (src/faces/cpu/eltwise.cpp), element by element.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "facetrace/core/status.h"
#include "facetrace/faces/program.h"

namespace facetrace::faces::gpu {

/// The activation of a conv epilogue (a fused Relu/Clip step, docs/design/faces.md §3 kConvAct).
struct EpilogueAct {
  enum class Kind : std::uint8_t { kNone, kRelu, kClip };
  Kind kind = Kind::kNone;
  float lo = 0.0f, hi = 0.0f;
};

/// y = u(x) over n floats.
Status launch_unary(const UnaryOp& u, const float* x, float* y, std::int64_t n, cudaStream_t s);
/// y = x·scale[c] + shift[c] over B images of channels·plane.
Status launch_channel_affine(const ChannelAffineOp& a, int batch, const float* x, const float* scale,
                             const float* shift, float* y, cudaStream_t s);
/// A conv's bias added by the step that reads the conv's output (docs/design/faces.md §8.1 "bias deferral"): the
/// operand element at per-image offset i gets bias[(i / plane) % channels] first, rounded, exactly as the conv's
/// epilogue would have. Null bias: nothing added.
struct OperandBias {
  const float* bias = nullptr;
  std::int64_t channels = 1, plane = 1;
};

/// y = v ≥ 0 ? v : slope[c]·v, v = x (+ bias), over B images.
Status launch_channel_prelu(const ChannelPreluOp& p, int batch, const float* x, const float* slope, float* y,
                            cudaStream_t s, OperandBias bias = {});
/// out = a ∘ b with the op's per-image broadcast strides, B images (a deferred conv bias on either operand).
Status launch_binary(const BinaryOp& op, int batch, const float* a, std::int64_t a_bstride, const float* b,
                     std::int64_t b_bstride, float* y, cudaStream_t s, OperandBias a_bias = {},
                     OperandBias b_bias = {});
/// The strided copy of rank ≤ 4 (kDeclined above): out[j] = in[offset + Σ j_k·strides[k]], per image.
Status launch_strided_copy(const TransposeOp& op, int batch, const float* x, std::int64_t x_bstride, float* y,
                           cudaStream_t s);
/// Constant padding (rank ≤ 4, right-aligned), B images.
Status launch_pad(const PadOp& op, int batch, const float* x, std::int64_t x_bstride, float* y, cudaStream_t s);
/// Copies one Concat operand ([outer, part, inner] per image) into its slot at `at` of out ([outer, total, inner]).
Status launch_concat_part(std::int64_t outer, std::int64_t part, std::int64_t inner, std::int64_t total,
                          std::int64_t at, int batch, const float* x, std::int64_t x_bstride, float* y,
                          cudaStream_t s);
/// In place: y = act(y + bias[c]) over B images of channels·plane (bias may be null).
Status launch_bias_act(float* y, const float* bias, std::int64_t channels, std::int64_t plane, int batch,
                       EpilogueAct act, cudaStream_t s);
/// y[b, j] = bias[j] for B rows of n (the Gemv's β term, scaled by cuBLAS's beta).
Status launch_fill_rows(float* y, const float* bias, std::int64_t n, int batch, cudaStream_t s);

}  // namespace facetrace::faces::gpu
