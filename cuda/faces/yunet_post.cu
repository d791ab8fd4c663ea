/// @file
/// YuNet post-processing on the GPU (docs/design/faces.md §5 decode and NMS): score filter (thrust::copy_if),
/// sort by (image, descending score, cell) (thrust::sort_by_key), the 4000-candidate cap and greedy NMS with
/// clipping per image, all on the caller's stream with Thrust's temporaries carved from the caller's scratch.
/// The arithmetic is decode_yunet's, so the detections are the CPU's bit for bit. The launchers of
/// cuda/faces/prepost_launch.h; arguments are checked by cuda/faces/yunet_gpu.cpp.
#include <thrust/copy.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/sort.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <algorithm>
#include <new>
#include <string>

#include "common/cuda_check.cuh"
#include "faces/launch.cuh"
#include "faces/yunet_post.cuh"

namespace facetrace::faces::gpu {
namespace {

constexpr int kMaxCandidates = 4000;  // docs/design/faces.md §5 NMS
constexpr int kNmsBlock = 256;

// A bump allocator over the caller's scratch for Thrust's temporaries (value_type char, as Thrust requires).
// Freeing the most recent block pops it; stream order makes reuse by the next algorithm on the stream safe.
struct ScratchAllocator {
  using value_type = char;
  char* base = nullptr;
  std::size_t cap = 0;
  std::size_t* top = nullptr;
  char* allocate(std::ptrdiff_t n) {
    const std::size_t at = (*top + 255) / 256 * 256;
    if (n < 0 || at + static_cast<std::size_t>(n) > cap) throw std::bad_alloc();
    *top = at + static_cast<std::size_t>(n);
    return base + at;
  }
  void deallocate(char* p, std::size_t n) {
    if (p + n == base + *top) *top = static_cast<std::size_t>(p - base);
  }
};

struct ScorePasses {
  PostParams p;
  __device__ bool operator()(std::uint32_t id) const {
    const int b = static_cast<int>(id / static_cast<std::uint32_t>(p.total));
    const int g = static_cast<int>(id % static_cast<std::uint32_t>(p.total));
    const int s = stride_of(p, g);
    const float score = cell_score(p, b, s, g - p.first[s]);
    return !(isnan(score) || score < p.thr);  // decode_yunet: skipped when NaN or below the threshold
  }
};

// Thread ↔ selected candidate j: its sort key (PostParams docs in yunet_post.cuh).
__global__ void make_keys_kernel(PostParams p, const std::uint32_t* ids, int count, std::uint64_t* keys) {
  pdl_entry();
  const int j = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= count) return;
  const std::uint32_t id = ids[j];
  const int b = static_cast<int>(id / static_cast<std::uint32_t>(p.total));
  const int g = static_cast<int>(id % static_cast<std::uint32_t>(p.total));
  const int s = stride_of(p, g);
  const float score = cell_score(p, b, s, g - p.first[s]);
  const std::uint32_t bits = score == 0.0f ? 0u : __float_as_uint(score);  // −0 sorts as 0
  keys[j] = (static_cast<std::uint64_t>(b) << kKeyImageShift) |
            (static_cast<std::uint64_t>(kScoreOne - bits) << kKeyCellBits) | static_cast<std::uint64_t>(g);
}

// Thread ↔ image b (and one more thread for the end): the first sorted candidate of image b (binary search).
__global__ void segments_kernel(const std::uint64_t* keys, int count, int batch, int* starts) {
  pdl_entry();
  const int b = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (b > batch) return;
  const std::uint64_t want = static_cast<std::uint64_t>(b) << kKeyImageShift;
  int lo = 0, hi = count;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (keys[mid] < want)
      lo = mid + 1;
    else
      hi = mid;
  }
  starts[b] = lo;
}

// decode_yunet's clip of a box coordinate: non-finite → 0, then clamp to [0, 1].
__device__ __forceinline__ float clip01(float v) { return clamp_as_std(isfinite(v) ? v : 0.0f, 0.0f, 1.0f); }

// Whether kept box kb overlaps the candidate (x0, y0, x1, y1) of sides w × h by more than iou_max: the CPU's
// IoU arithmetic, rounding for rounding (std::min(a, b) = b < a ? b : a; std::max(a, b) = a < b ? b : a).
__device__ __forceinline__ bool overlaps(const float4& kb, float x0, float y0, float x1, float y1, float w,
                                         float h, float iou_max) {
  const float ix = __fsub_rn(kb.z < x1 ? kb.z : x1, x0 < kb.x ? kb.x : x0);
  const float iy = __fsub_rn(kb.w < y1 ? kb.w : y1, y0 < kb.y ? kb.y : y0);
  if (ix <= 0 || iy <= 0) return false;
  const float inter = __fmul_rn(ix, iy);
  const float uni =
      __fsub_rn(__fadd_rn(__fmul_rn(w, h), __fmul_rn(__fsub_rn(kb.z, kb.x), __fsub_rn(kb.w, kb.y))), inter);
  return __fdiv_rn(inter, uni) > iou_max;
}

// Block ↔ image b; greedy NMS over its first min(count, 4000) sorted candidates, in order. Every thread decodes
// the current candidate (the same bits); the kept boxes live in shared memory and thread t tests kept boxes
// t, t + blockDim, … against it (the drop decision is "some kept box overlaps by more than the threshold",
// independent of the order the CPU tests them in); thread 0 appends a kept candidate and writes its record.
// Deterministic: the candidate order is the sort's, and each test is the CPU's arithmetic.
__global__ void nms_kernel(PostParams p, const std::uint32_t* ids, const int* starts, const ImageGeom* geom,
                           float iou_max, int max_faces, DetectionsOut out) {
  pdl_entry();
  extern __shared__ float4 kept[];
  const int b = static_cast<int>(blockIdx.x);
  const int first = starts[b];
  const int n = min(starts[b + 1] - first, kMaxCandidates);
  const ImageGeom gm = geom[b];
  const float fw = static_cast<float>(gm.width), fh = static_cast<float>(gm.height);
  int nkept = 0;
  for (int j = 0; j < n; ++j) {
    if (nkept >= max_faces) break;
    const std::uint32_t id = ids[first + j];
    const int g = static_cast<int>(id % static_cast<std::uint32_t>(p.total));
    const int s = stride_of(p, g);
    Candidate c;
    decode_cell(p, b, s, g - p.first[s], gm.scale, fw, fh, false, c);
    const float x0 = clip01(c.box[0]), y0 = clip01(c.box[1]), x1 = clip01(c.box[2]), y1 = clip01(c.box[3]);
    const float w = __fsub_rn(x1, x0), h = __fsub_rn(y1, y0);
    if (w <= 1e-4f || h <= 1e-4f) continue;
    bool drop = false;
    for (int k = static_cast<int>(threadIdx.x); k < nkept && !drop; k += static_cast<int>(blockDim.x)) {
      if (overlaps(kept[k], x0, y0, x1, y1, w, h, iou_max)) drop = true;
    }
    if (__syncthreads_or(drop)) continue;
    if (threadIdx.x == 0) {
      kept[nkept] = make_float4(x0, y0, x1, y1);
      decode_cell(p, b, s, g - p.first[s], gm.scale, fw, fh, true, c);
      GpuDetection& d = out.records[static_cast<std::size_t>(b) * out.capacity + nkept];
      d.x0 = __fmul_rn(x0, fw), d.y0 = __fmul_rn(y0, fh), d.x1 = __fmul_rn(x1, fw), d.y1 = __fmul_rn(y1, fh);
      d.score = cell_score(p, b, s, g - p.first[s]);
      for (int m = 0; m < 5; ++m) {
        d.landmarks[2 * m] = __fmul_rn(c.lm[2 * m], fw);
        d.landmarks[2 * m + 1] = __fmul_rn(c.lm[2 * m + 1], fh);
      }
    }
    ++nkept;
    __syncthreads();
  }
  if (threadIdx.x == 0) out.counts[b] = nkept;
}

constexpr int kOneKernelThreads = 1024;

// The one-kernel form (docs/design/faces.md §5 "one kernel per batch"): block ↔ image b. The cells that pass the
// score filter append their sort key (the key without the image: every key of the block is the same image's) to
// shared memory, the keys are sorted there (bitonic, over the next power of two of their count, padded with
// ~0), and the first min(count, 4000) run through nms_kernel's greedy NMS: in chunks of kOneKernelThreads, each
// thread decodes one candidate's clipped box into shared memory (in parallel: the global reads of the outputs
// are most of a candidate's cost), then warp 0 walks the chunk in order, its lanes testing the kept boxes,
// with warp votes instead of block barriers. The keys are unique, so the order is the sort's whatever order
// they were appended in, and every value and test is nms_kernel's: the same detections. No host
// synchronisation (the thrust path reads the candidate count back).
// Dynamic shared memory: kept[keep_cap] float4 | box[kOneKernelThreads] float4 | keys[key_cap] u64 |
// cell[kOneKernelThreads] int (post_one_shared_bytes).
__global__ void __launch_bounds__(kOneKernelThreads)
    post_one_kernel(PostParams p, const ImageGeom* geom, float iou_max, int max_faces, int keep_cap,
                    int key_cap, DetectionsOut out) {
  pdl_entry();
  extern __shared__ float4 smem[];
  float4* kept = smem;
  float4* box = kept + keep_cap;
  auto* keys = reinterpret_cast<std::uint64_t*>(box + kOneKernelThreads);
  auto* cell = reinterpret_cast<int*>(keys + key_cap);
  __shared__ int count, kept_count;
  const int b = static_cast<int>(blockIdx.x);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  if (tid == 0) count = 0;
  __syncthreads();
  for (int g = tid; g < p.total; g += nt) {
    const int s = stride_of(p, g);
    const float score = cell_score(p, b, s, g - p.first[s]);
    if (isnan(score) || score < p.thr) continue;                             // ScorePasses
    const std::uint32_t bits = score == 0.0f ? 0u : __float_as_uint(score);  // make_keys_kernel's key
    keys[atomicAdd(&count, 1)] =
        (static_cast<std::uint64_t>(kScoreOne - bits) << kKeyCellBits) | static_cast<std::uint64_t>(g);
  }
  __syncthreads();
  const int n_all = count;
  int n2 = 1;
  while (n2 < n_all) n2 *= 2;
  for (int i = n_all + tid; i < n2; i += nt) keys[i] = ~std::uint64_t{0};
  __syncthreads();
  for (int k = 2; k <= n2; k *= 2)
    for (int j = k / 2; j > 0; j /= 2) {
      for (int i = tid; i < n2; i += nt) {
        const int l = i ^ j;
        if (l > i) {
          const std::uint64_t a = keys[i], c = keys[l];
          if ((a > c) == ((i & k) == 0)) keys[i] = c, keys[l] = a;
        }
      }
      __syncthreads();
    }
  const int n = min(n_all, kMaxCandidates);
  const ImageGeom gm = geom[b];
  const float fw = static_cast<float>(gm.width), fh = static_cast<float>(gm.height);
  int nkept = 0;  // warp 0's count; every thread's after each chunk
  for (int j0 = 0; j0 < n && nkept < max_faces; j0 += nt) {
    if (const int j = j0 + tid; j < n) {  // this thread's candidate of the chunk: its clipped box, or skipped
      const int g = static_cast<int>(keys[j] & ((std::uint64_t{1} << kKeyCellBits) - 1));
      const int s = stride_of(p, g);
      Candidate c;
      decode_cell(p, b, s, g - p.first[s], gm.scale, fw, fh, false, c);
      const float x0 = clip01(c.box[0]), y0 = clip01(c.box[1]), x1 = clip01(c.box[2]), y1 = clip01(c.box[3]);
      const bool tiny = __fsub_rn(x1, x0) <= 1e-4f || __fsub_rn(y1, y0) <= 1e-4f;
      box[tid] = make_float4(x0, y0, x1, y1);
      cell[tid] = tiny ? -1 : g;
    }
    __syncthreads();
    if (tid < 32) {
      const int m = min(nt, n - j0);
      for (int j = 0; j < m && nkept < max_faces; ++j) {
        const int g = cell[j];
        if (g < 0) continue;
        const float4 bx = box[j];
        const float x0 = bx.x, y0 = bx.y, x1 = bx.z, y1 = bx.w;
        const float w = __fsub_rn(x1, x0), h = __fsub_rn(y1, y0);
        bool drop = false;
        for (int k = tid; k < nkept && !drop; k += 32) {
          if (overlaps(kept[k], x0, y0, x1, y1, w, h, iou_max)) drop = true;
        }
        if (__any_sync(0xffffffffu, drop)) continue;
        if (tid == 0) {
          kept[nkept] = bx;
          const int s = stride_of(p, g);
          Candidate c;
          decode_cell(p, b, s, g - p.first[s], gm.scale, fw, fh, true, c);
          GpuDetection& d = out.records[static_cast<std::size_t>(b) * out.capacity + nkept];
          d.x0 = __fmul_rn(x0, fw), d.y0 = __fmul_rn(y0, fh), d.x1 = __fmul_rn(x1, fw),
          d.y1 = __fmul_rn(y1, fh);
          d.score = cell_score(p, b, s, g - p.first[s]);
          for (int q = 0; q < 5; ++q) {
            d.landmarks[2 * q] = __fmul_rn(c.lm[2 * q], fw);
            d.landmarks[2 * q + 1] = __fmul_rn(c.lm[2 * q + 1], fh);
          }
        }
        ++nkept;
        __syncwarp();  // lane 0's kept[] entry before the lanes read it
      }
      if (tid == 0) kept_count = nkept;
    }
    __syncthreads();
    nkept = kept_count;
    __syncthreads();  // box[] and cell[] are rewritten by the next chunk
  }
  if (tid == 0) out.counts[b] = nkept;
}

// Dynamic shared bytes of post_one_kernel (its layout above).
std::size_t post_one_shared_bytes(int keep_cap, int key_cap) {
  return static_cast<std::size_t>(keep_cap + kOneKernelThreads) * sizeof(float4) +
         static_cast<std::size_t>(key_cap) * sizeof(std::uint64_t) +
         static_cast<std::size_t>(kOneKernelThreads) * sizeof(int);
}

constexpr std::size_t kOneKernelShared = 200 * 1024;  // of the 227 KB a block may take on sm_90

// Thread ↔ element: y = decode_expf(x).
__global__ void decode_expf_kernel(const float* x, float* y, std::uint64_t count) {
  pdl_entry();
  const std::uint64_t i = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = decode_expf(x[i]);
}

}  // namespace

std::uint64_t yunet_cells_per_image(const YunetLayout& l) {
  std::uint64_t t = 0;
  for (int s = 0; s < 3; ++s)
    t += static_cast<std::uint64_t>(l.input_width / (8 << s)) *
         static_cast<std::uint64_t>(l.input_height / (8 << s));
  return t;
}

namespace {

Status thrust_status(const thrust::system_error& e) {
  if (e.code().category() == thrust::cuda_category())
    return runtime::cuda_status(e.code().value(), e.what(), __FILE__, __LINE__);
  return internal_error(std::string("yunet post: Thrust failed: ") + e.what());
}

}  // namespace

Status launch_yunet_post(const float* d_outputs, const YunetLayout& layout, const ImageGeom* d_geom,
                         const PostOptions& options, DeviceScratch scratch, DetectionsOut out,
                         CUstream_st* stream) {
  const int need = std::min(options.max_faces, kMaxCandidates);
  PostParams p{};
  int first = 0;
  for (int s = 0; s < 3; ++s) {
    p.cols[s] = layout.input_width / (8 << s);
    p.cells[s] = p.cols[s] * (layout.input_height / (8 << s));
    p.first[s] = first;
    first += p.cells[s];
    p.cls[s] = d_outputs + layout.offset[0][s];
    p.obj[s] = d_outputs + layout.offset[1][s];
    p.bbox[s] = d_outputs + layout.offset[2][s];
    p.kps[s] = d_outputs + layout.offset[3][s];
  }
  p.total = first;
  p.thr = options.score;
  const int keep_cap = std::max(need, 1);
  {  // the one-kernel form when every cell's key fits in shared memory beside the kept boxes
    int key_cap = 1;
    while (key_cap < p.total) key_cap *= 2;
    const std::size_t shared = post_one_shared_bytes(keep_cap, key_cap);
    int optin = 0;
    FT_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    if (options.one_kernel && shared <= kOneKernelShared &&
        shared + 1024 <= static_cast<std::size_t>(optin)) {
      FT_CUDA_TRY(cudaFuncSetAttribute(post_one_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shared)));
      pdl_launch(post_one_kernel, layout.batch, kOneKernelThreads, shared, stream, p, d_geom, options.nms_iou,
                 options.max_faces, keep_cap, key_cap, out);
      FT_CUDA_LAUNCH_CHECK("post_one_kernel", stream);
      return {};
    }
  }
  const std::uint64_t n = static_cast<std::uint64_t>(p.total) * static_cast<std::uint64_t>(layout.batch);

  // Scratch: ids [n] u32 | keys [n] u64 | starts [batch + 1] i32 | Thrust's temporaries.
  char* base = static_cast<char*>(scratch.data);
  auto carve = [&](std::size_t& at, std::uint64_t bytes) {
    char* ptr = base + at;
    at = (at + bytes + 255) / 256 * 256;
    return ptr;
  };
  std::size_t at = 0;
  auto* ids = reinterpret_cast<std::uint32_t*>(carve(at, n * 4));
  auto* keys = reinterpret_cast<std::uint64_t*>(carve(at, n * 8));
  auto* starts = reinterpret_cast<int*>(carve(at, static_cast<std::uint64_t>(layout.batch + 1) * 4));
  std::size_t top = 0;
  ScratchAllocator alloc{base + at, static_cast<std::size_t>(scratch.bytes - at), &top};

  int count = 0;
  try {
    auto policy = thrust::cuda::par_nosync(alloc).on(stream);
    const auto end = thrust::copy_if(policy, thrust::counting_iterator<std::uint32_t>(0),
                                     thrust::counting_iterator<std::uint32_t>(static_cast<std::uint32_t>(n)),
                                     ids, ScorePasses{p});
    count = static_cast<int>(end - ids);
    if (count > 0) {
      pdl_launch(make_keys_kernel, (count + 255) / 256, 256, 0, stream, p, ids, count, keys);
      FT_CUDA_LAUNCH_CHECK("make_keys_kernel", stream);
      thrust::sort_by_key(policy, keys, keys + count, ids);
    }
  } catch (const thrust::system_error& e) {
    return thrust_status(e);
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "yunet post: Thrust's temporaries exceed the " +
                                          std::to_string(scratch.bytes) + "-byte scratch");
  }
  pdl_launch(segments_kernel, (layout.batch + 1 + 255) / 256, 256, 0, stream, keys, count, layout.batch,
             starts);
  FT_CUDA_LAUNCH_CHECK("segments_kernel", stream);
  const std::size_t shared = static_cast<std::size_t>(keep_cap) * sizeof(float4);
  FT_CUDA_TRY(cudaFuncSetAttribute(nms_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(shared)));
  pdl_launch(nms_kernel, layout.batch, kNmsBlock, shared, stream, p, ids, starts, d_geom, options.nms_iou,
             options.max_faces, out);
  FT_CUDA_LAUNCH_CHECK("nms_kernel", stream);
  return {};
}

Status decode_expf_device(const float* d_x, float* d_y, std::uint64_t count, CUstream_st* stream) {
  if (count == 0) return {};
  if (d_x == nullptr || d_y == nullptr) return invalid_argument("decode_expf_device: null buffer");
  pdl_launch(decode_expf_kernel, static_cast<unsigned>((count + 255) / 256), 256, 0, stream, d_x, d_y, count);
  FT_CUDA_LAUNCH_CHECK("decode_expf_kernel", stream);
  return {};
}

}  // namespace facetrace::faces::gpu
