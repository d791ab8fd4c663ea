/// @file
/// YuNet preprocessing on the GPU (docs/design/faces.md §5 letterbox): RGB8 frames to the planar BGR float input,
/// letterboxed (the CPU's letterbox_bgr, bit for bit) or zero-padded at native size. The launchers of
/// cuda/faces/prepost_launch.h; arguments are checked by cuda/faces/yunet_gpu.cpp.
#include <algorithm>
#include <cmath>

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"
#include "faces/preprocess.cuh"
#include "faces/prepost_launch.h"

namespace facetrace::faces::gpu {
namespace {

constexpr int kBlock = 256;

// Thread ↔ output pixel (x, y) of one frame's n×n plane (blockIdx.y: frame of the table); it writes all three
// channels. The resampled value is Σ_ty wy·(Σ_tx wx·p) with each sum in tap order from 0 in float, which is
// exactly the CPU's horizontal pass into a temporary followed by its vertical pass (the temporary's entries are
// pure functions of their inputs, so recomputing them per output gives the same bits). Reads: the frame's bytes
// (global, through L1); writes: out, coalesced per plane. Deterministic.
__global__ void letterbox_kernel(PrepTable table, int n, float* out, ImageGeom* geom) {
  pdl_entry();
  const PrepFrame& f = table.frame[blockIdx.y];
  const std::size_t plane = static_cast<std::size_t>(n) * n;
  const std::size_t pix = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pix == 0) geom[f.out_index] = ImageGeom{f.scale, f.width, f.height, 0};
  if (pix >= plane) return;
  const int x = static_cast<int>(pix % n), y = static_cast<int>(pix / n);
  float* o = out + static_cast<std::size_t>(f.out_index) * 3 * plane + pix;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
  if (x < f.placed_w && y < f.placed_h) {
    for_each_tap(y, f.height, f.ry, [&](int sy, float wy) {
      const std::uint8_t* row = f.rgb + static_cast<std::size_t>(sy) * f.width * 3;
      float h0 = 0.0f, h1 = 0.0f, h2 = 0.0f;
      for_each_tap(x, f.width, f.rx, [&](int sx, float wx) {
        const std::uint8_t* p = row + static_cast<std::size_t>(sx) * 3;
        h0 = __fadd_rn(h0, __fmul_rn(wx, static_cast<float>(p[0])));
        h1 = __fadd_rn(h1, __fmul_rn(wx, static_cast<float>(p[1])));
        h2 = __fadd_rn(h2, __fmul_rn(wx, static_cast<float>(p[2])));
      });
      s0 = __fadd_rn(s0, __fmul_rn(wy, h0));
      s1 = __fadd_rn(s1, __fmul_rn(wy, h1));
      s2 = __fadd_rn(s2, __fmul_rn(wy, h2));
    });
  }
  o[0] = s2, o[plane] = s1, o[2 * plane] = s0;  // B, G, R
}

constexpr int kTileW = 32, kTileH = 8, kMaxTaps = 16;  // tile sides and taps per axis (kernels below)

// The taps of a tile into shared memory (letterbox_tiled_kernel and letterbox_sep_kernel): thread t < kTileW
// lists output column x0 + t's, the next TH threads output row y0 + r's (the same for_each_tap calls as
// letterbox_kernel, so the same (source, weight) pairs in the same order; none outside the placed image). The
// block at the plane's origin also writes the frame's geometry. The caller synchronises after it.
template <int TH>
struct TileTaps {
  int col_src[kTileW][kMaxTaps], row_src[TH][kMaxTaps];
  float col_w[kTileW][kMaxTaps], row_w[TH][kMaxTaps];
  int col_n[kTileW], row_n[TH];
};

template <int TH>
__device__ void fill_tile_taps(const PrepFrame& f, int x0, int y0, int t, TileTaps<TH>& tt, ImageGeom* geom) {
  if (t == 0 && blockIdx.x == 0 && blockIdx.y == 0)
    geom[f.out_index] = ImageGeom{f.scale, f.width, f.height, 0};
  if (t < kTileW) {
    int c = 0;
    if (x0 + t < f.placed_w)
      for_each_tap(x0 + t, f.width, f.rx,
                   [&](int s, float w) { tt.col_src[t][c] = s, tt.col_w[t][c] = w, ++c; });
    tt.col_n[t] = c;
  } else if (t < kTileW + TH) {
    const int r = t - kTileW;
    int c = 0;
    if (y0 + r < f.placed_h)
      for_each_tap(y0 + r, f.height, f.ry,
                   [&](int s, float w) { tt.row_src[r][c] = s, tt.row_w[r][c] = w, ++c; });
    tt.row_n[r] = c;
  }
}

// The horizontal sums of source row `row` over output column tx's taps, in tap order from 0.
template <int TH>
__device__ void row_sums(const TileTaps<TH>& tt, const std::uint8_t* row, int tx, float& h0, float& h1,
                         float& h2) {
  h0 = h1 = h2 = 0.0f;
  for (int b = 0; b < tt.col_n[tx]; ++b) {
    const std::uint8_t* p = row + static_cast<std::size_t>(tt.col_src[tx][b]) * 3;
    const float wx = tt.col_w[tx][b];
    h0 = __fadd_rn(h0, __fmul_rn(wx, static_cast<float>(p[0])));
    h1 = __fadd_rn(h1, __fmul_rn(wx, static_cast<float>(p[1])));
    h2 = __fadd_rn(h2, __fmul_rn(wx, static_cast<float>(p[2])));
  }
}

// The tiled letterbox: block ↔ a kTileW×kTileH tile of one frame's n×n plane (blockIdx.z: frame of the table),
// thread ↔ one output pixel. The tile's column and row taps are worked out once per block into shared memory by
// the first kTileW + kTileH threads (the same for_each_tap calls, so the same (source, weight) pairs in the same
// order), instead of once per output pixel and row tap as letterbox_kernel does: the taps' double arithmetic
// was most of that kernel's time. Sums as letterbox_kernel, so the same bits. Needs at most kMaxTaps taps per
// axis (launch_letterbox checks; frames with larger ratios take letterbox_kernel).
__global__ void __launch_bounds__(kTileW* kTileH)
    letterbox_tiled_kernel(PrepTable table, int n, float* out, ImageGeom* geom) {
  pdl_entry();
  __shared__ TileTaps<kTileH> tt;
  const PrepFrame& f = table.frame[blockIdx.z];
  const int x0 = static_cast<int>(blockIdx.x) * kTileW, y0 = static_cast<int>(blockIdx.y) * kTileH;
  const int t = static_cast<int>(threadIdx.x);
  fill_tile_taps(f, x0, y0, t, tt, geom);
  __syncthreads();
  const int tx = t % kTileW, ty = t / kTileW, x = x0 + tx, y = y0 + ty;
  if (x >= n || y >= n) return;
  const std::size_t plane = static_cast<std::size_t>(n) * n, pix = static_cast<std::size_t>(y) * n + x;
  float* o = out + static_cast<std::size_t>(f.out_index) * 3 * plane + pix;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
  for (int a = 0; a < tt.row_n[ty]; ++a) {  // 0 taps outside the placed image: the zero border
    float h0, h1, h2;
    row_sums(tt, f.rgb + static_cast<std::size_t>(tt.row_src[ty][a]) * f.width * 3, tx, h0, h1, h2);
    const float wy = tt.row_w[ty][a];
    s0 = __fadd_rn(s0, __fmul_rn(wy, h0));
    s1 = __fadd_rn(s1, __fmul_rn(wy, h1));
    s2 = __fadd_rn(s2, __fmul_rn(wy, h2));
  }
  o[0] = s2, o[plane] = s1, o[2 * plane] = s0;  // B, G, R
}

// The separable letterbox: block ↔ a kTileW×kSepTileH tile of one frame's n×n plane (blockIdx.z: frame of the
// table). Taps as letterbox_tiled_kernel; then the horizontal sums h(source row, output column) of every source
// row the tile's rows read, once each, into shared memory, and each output pixel's vertical sum over them. An h
// is a pure function of its row and column (the same taps in the same order from 0), so it is the value the
// per-pixel kernel computes again for every output row that reads that source row: the same bits, with about
// half the byte loads. Needs the tile's rows to read at most kSepRows source rows (launch_letterbox checks:
// kSepTileH·ry + 2 ≤ kSepRows).
constexpr int kSepTileH = 16, kSepRows = 64;

__global__ void __launch_bounds__(kTileW* kTileH)
    letterbox_sep_kernel(PrepTable table, int n, float* out, ImageGeom* geom) {
  pdl_entry();
  __shared__ TileTaps<kSepTileH> tt;
  __shared__ float hsum[3][kSepRows][kTileW];
  const PrepFrame& f = table.frame[blockIdx.z];
  const int x0 = static_cast<int>(blockIdx.x) * kTileW, y0 = static_cast<int>(blockIdx.y) * kSepTileH;
  const int t = static_cast<int>(threadIdx.x);
  fill_tile_taps(f, x0, y0, t, tt, geom);
  __syncthreads();
  // The source rows the tile reads: from the first row's first tap to the last placed row's last tap (taps
  // ascend with the output row).
  int lo = 0, rows = 0;
  if (tt.row_n[0] > 0) {
    int last = 0;
    for (int r = 0; r < kSepTileH; ++r)
      if (tt.row_n[r] > 0) last = r;
    lo = tt.row_src[0][0];
    rows = tt.row_src[last][tt.row_n[last] - 1] - lo + 1;
  }
  for (int i = t; i < rows * kTileW; i += kTileW * kTileH) {
    const int r = i / kTileW, x = i % kTileW;
    row_sums(tt, f.rgb + static_cast<std::size_t>(lo + r) * f.width * 3, x, hsum[0][r][x], hsum[1][r][x],
             hsum[2][r][x]);
  }
  __syncthreads();
  const int tx = t % kTileW, x = x0 + tx;
  if (x >= n) return;
  const std::size_t plane = static_cast<std::size_t>(n) * n;
  float* base = out + static_cast<std::size_t>(f.out_index) * 3 * plane;
  for (int ty = t / kTileW; ty < kSepTileH; ty += kTileH) {
    const int y = y0 + ty;
    if (y >= n) break;
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f;
    for (int a = 0; a < tt.row_n[ty]; ++a) {  // 0 taps below the placed image: the zero border
      const int r = tt.row_src[ty][a] - lo;
      const float wy = tt.row_w[ty][a];
      s0 = __fadd_rn(s0, __fmul_rn(wy, hsum[0][r][tx]));
      s1 = __fadd_rn(s1, __fmul_rn(wy, hsum[1][r][tx]));
      s2 = __fadd_rn(s2, __fmul_rn(wy, hsum[2][r][tx]));
    }
    float* o = base + static_cast<std::size_t>(y) * n + x;
    o[0] = s2, o[plane] = s1, o[2 * plane] = s0;  // B, G, R
  }
}

// Thread ↔ output pixel (x, y) of one frame's out_w×out_h plane: the source pixel as float, or 0 outside it.
__global__ void pad_native_kernel(PrepTable table, int out_w, int out_h, float* out, ImageGeom* geom) {
  pdl_entry();
  const PrepFrame& f = table.frame[blockIdx.y];
  const std::size_t plane = static_cast<std::size_t>(out_w) * out_h;
  const std::size_t pix = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pix == 0) geom[f.out_index] = ImageGeom{1.0f, f.width, f.height, 0};
  if (pix >= plane) return;
  const int x = static_cast<int>(pix % out_w), y = static_cast<int>(pix / out_w);
  float* o = out + static_cast<std::size_t>(f.out_index) * 3 * plane + pix;
  float r = 0.0f, g = 0.0f, b = 0.0f;
  if (x < f.width && y < f.height) {
    const std::uint8_t* p = f.rgb + (static_cast<std::size_t>(y) * f.width + x) * 3;
    r = p[0], g = p[1], b = p[2];
  }
  o[0] = b, o[plane] = g, o[2 * plane] = r;
}

}  // namespace

Status launch_letterbox(const LetterboxFrame* frames, int count, int n, float* d_out, ImageGeom* d_geom,
                        CUstream_st* stream) {
  const std::size_t plane = static_cast<std::size_t>(n) * n;
  for (int first = 0; first < count; first += kFramesPerLaunch) {
    PrepTable t{};
    t.frames = std::min(kFramesPerLaunch, count - first);
    for (int j = 0; j < t.frames; ++j) {
      const LetterboxFrame& f = frames[first + j];
      // The ratios of the CPU's taps(src, dst): src / dst in double.
      t.frame[j] = PrepFrame{f.rgb,
                             f.width,
                             f.height,
                             f.placed_width,
                             f.placed_height,
                             static_cast<double>(f.width) / f.placed_width,
                             static_cast<double>(f.height) / f.placed_height,
                             f.scale,
                             first + j};
    }
    // Taps per axis: at most ceil(r) + 1 when shrinking by r, 2 when enlarging.
    bool tiled = true, sep = true;
    for (int j = 0; j < t.frames; ++j) {
      tiled = tiled && std::ceil(std::max(t.frame[j].rx, t.frame[j].ry)) + 1.0 <= kMaxTaps;
      sep = sep && kSepTileH * t.frame[j].ry + 2.0 <= kSepRows;
    }
    if (tiled && sep) {
      const unsigned tiles = static_cast<unsigned>((n + kTileW - 1) / kTileW);
      const dim3 grid(tiles, static_cast<unsigned>((n + kSepTileH - 1) / kSepTileH),
                      static_cast<unsigned>(t.frames));
      pdl_launch(letterbox_sep_kernel, grid, kTileW * kTileH, 0, stream, t, n, d_out, d_geom);
      FT_CUDA_LAUNCH_CHECK("letterbox_sep_kernel", stream);
      continue;
    }
    if (tiled) {
      const unsigned tiles = static_cast<unsigned>((n + kTileW - 1) / kTileW);
      const dim3 grid(tiles, static_cast<unsigned>((n + kTileH - 1) / kTileH),
                      static_cast<unsigned>(t.frames));
      pdl_launch(letterbox_tiled_kernel, grid, kTileW * kTileH, 0, stream, t, n, d_out, d_geom);
      FT_CUDA_LAUNCH_CHECK("letterbox_tiled_kernel", stream);
      continue;
    }
    const dim3 grid(static_cast<unsigned>((plane + kBlock - 1) / kBlock), static_cast<unsigned>(t.frames));
    pdl_launch(letterbox_kernel, grid, kBlock, 0, stream, t, n, d_out, d_geom);
    FT_CUDA_LAUNCH_CHECK("letterbox_kernel", stream);
  }
  return {};
}

Status launch_pad_native(const FrameDesc* frames, int count, int out_width, int out_height, float* d_out,
                         ImageGeom* d_geom, CUstream_st* stream) {
  const std::size_t plane = static_cast<std::size_t>(out_width) * out_height;
  for (int first = 0; first < count; first += kFramesPerLaunch) {
    PrepTable t{};
    t.frames = std::min(kFramesPerLaunch, count - first);
    for (int j = 0; j < t.frames; ++j) {
      const FrameDesc& f = frames[first + j];
      t.frame[j] = PrepFrame{f.rgb, f.width, f.height, f.width, f.height, 1.0, 1.0, 1.0f, first + j};
    }
    const dim3 grid(static_cast<unsigned>((plane + kBlock - 1) / kBlock), static_cast<unsigned>(t.frames));
    pdl_launch(pad_native_kernel, grid, kBlock, 0, stream, t, out_width, out_height, d_out, d_geom);
    FT_CUDA_LAUNCH_CHECK("pad_native_kernel", stream);
  }
  return {};
}

}  // namespace facetrace::faces::gpu
