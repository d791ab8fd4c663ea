/// @file
/// Private, CUDA builds only: the fused detection heads of the GPU face program (docs/design/faces.md §8.1 "head
/// fusion"). Several heads read one feature map X [cin, h, w]; each head is a 1×1 conv (cin → n channels) → a
/// depthwise 3×3 conv (stride 1, pad 1) → a transpose to channels-last [h·w, n] → optionally a Sigmoid, as
/// YuNet's cls/obj/bbox/kps heads are. One kernel computes every head of a level: a block takes a tile of
/// output pixels of one image, stages X over the tile and its one-pixel halo in shared memory, computes the 1×1
/// outputs of every head there, then the depthwise taps, the sigmoid and the transposed stores. Per output the
/// same products in the same order as the own direct kernels run one by one (Σ over ci in order, then the
/// bias; the depthwise taps in (ky, kx) order skipping those outside the image, then its bias; the Sigmoid of
/// eltwise.cu), so the fused and the unfused programs give the same bits.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "facetrace/core/status.h"

namespace facetrace::faces::gpu {

inline constexpr int kMaxHeads = 8;          ///< heads one launch takes
inline constexpr int kMaxHeadChannels = 32;  ///< Σ of their channels

/// One level's heads. Weights are packed in one device array (see heads_packed_floats): for the C = Σ n_k
/// channels in head order, the 1×1 weights [C][cin], the 1×1 biases [C], the depthwise weights [C][9] and the
/// depthwise biases [C] (a head without a bias has zeros there and its flag clear: nothing is added).
struct HeadsJob {
  int cin = 0, h = 0, w = 0;
  int heads = 0;
  int channels[kMaxHeads] = {};  ///< n_k
  bool pw_bias[kMaxHeads] = {};
  bool dw_bias[kMaxHeads] = {};
  bool sigmoid[kMaxHeads] = {};
  float* out[kMaxHeads] = {};  ///< head k's output: B images of h·w·n_k floats, [pixel][channel]
};

/// Total channels of a job.
int heads_channels(const HeadsJob& j);
/// Floats of the packed weight array of a job.
std::int64_t heads_packed_floats(const HeadsJob& j);
/// Whether the kernel takes the job's geometry (head and channel counts, shared memory of one tile); the output
/// pointers are checked at launch.
bool heads_fit(const HeadsJob& j);
/// Runs every head of `j` over `batch` images of x ([batch, cin, h, w]); `packed` as HeadsJob says.
Status launch_heads(const HeadsJob& j, int batch, const float* x, const float* packed, cudaStream_t s);

}  // namespace facetrace::faces::gpu
