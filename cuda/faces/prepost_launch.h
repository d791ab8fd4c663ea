/// @file
/// The launch layer under cuda/faces/yunet_gpu.h: the plain data the YuNet pre/post-processing passes between the
/// host API (cuda/faces/yunet_gpu.cpp, C++20) and the kernels (cuda/faces/preprocess.cu, yunet_post.cu, C++17),
/// and the launchers. C++17, no CUDA headers (cudaStream_t is CUstream_st*, as cuda/faces/gpu_program.h has it).
/// Arguments reaching a launcher are already checked by the host API.
#pragma once

#include <cstdint>

#include "facetrace/core/status.h"

struct CUstream_st;  // cudaStream_t without <cuda_runtime.h>

namespace facetrace::faces::gpu {

/// One decoded frame: `rgb` is a device pointer to width·height·3 bytes (interleaved RGB8, rows packed).
struct FrameDesc {
  const std::uint8_t* rgb = nullptr;
  int width = 0;
  int height = 0;
};

/// Where a frame sits in the network input: what decode needs per image. Written on the device by the
/// preprocessing launchers (one per frame, in frame order) and read there by yunet_decode_nms.
struct ImageGeom {
  float scale = 1.0f;  ///< letterbox scale min(n/w, n/h); 1 for the native pad
  int width = 0;       ///< frame width in pixels
  int height = 0;      ///< frame height in pixels
  int pad_ = 0;
};
static_assert(sizeof(ImageGeom) == 16);

/// Where YuNet's outputs lie in the buffer GpuProgram::run writes (every Program::outputs entry in order, each
/// B·lens image-major): for kind k (0 cls, 1 obj, 2 bbox, 3 kps) and stride index s (0: 8, 1: 16, 2: 32), the
/// float offset of image 0's block; image b's block follows at b·cells(s)·{1, 1, 4, 10}.
struct YunetLayout {
  std::uint64_t offset[4][3] = {};
  int batch = 0;
  int input_width = 0;   ///< network input width (n, or the native padded width)
  int input_height = 0;  ///< network input height
  std::uint64_t total_floats = 0;
};

/// One detection as the GPU writes it; the same fields as faces::Detection (landmarks x, y interleaved).
struct GpuDetection {
  float x0, y0, x1, y1;
  float score;
  float landmarks[10];
};
static_assert(sizeof(GpuDetection) == 15 * sizeof(float));

/// The device result of yunet_decode_nms: counts[b] detections for image b in records[b·capacity ...], best score
/// first. capacity must be at least min(clamped max_faces, 4000).
struct DetectionsOut {
  int* counts = nullptr;            ///< device, batch entries
  GpuDetection* records = nullptr;  ///< device, batch·capacity entries
  int capacity = 0;
};

/// A caller-provided device scratch region (e.g. from the program arena): the post-processing and Thrust's
/// temporaries are carved from it; nothing is allocated with cudaMalloc.
struct DeviceScratch {
  void* data = nullptr;
  std::uint64_t bytes = 0;
};

/// One letterbox frame as the kernel takes it: the source and its placed (resized) size and scale, computed on
/// the host exactly as letterbox_bgr does (letterbox_fit).
struct LetterboxFrame {
  const std::uint8_t* rgb = nullptr;
  int width = 0, height = 0;
  int placed_width = 0, placed_height = 0;
  float scale = 1.0f;
};

/// Letterboxes count frames into d_out ([count, 3, n, n]) and writes d_geom (see letterbox_batch).
Status launch_letterbox(const LetterboxFrame* frames, int count, int n, float* d_out, ImageGeom* d_geom,
                        CUstream_st* stream);
/// The native pad (see pad_native_batch).
Status launch_pad_native(const FrameDesc* frames, int count, int out_width, int out_height, float* d_out,
                         ImageGeom* d_geom, CUstream_st* stream);

/// The post-processing's sanitised options (decode_yunet's: score and IoU in [0, 1], max_faces in [0, 10000]).
struct PostOptions {
  float score = 0.6f;
  float nms_iou = 0.3f;
  int max_faces = 200;
  /// The one-kernel form where every cell's key fits in shared memory (no host synchronisation); false: the
  /// Thrust path (copy_if, sort_by_key), which also takes the larger native inputs. Both give the same results.
  bool one_kernel = true;
};

/// Cells per image of a layout (strides 8, 16, 32).
std::uint64_t yunet_cells_per_image(const YunetLayout& layout);

/// Decode, filter, sort, cap and NMS (see yunet_decode_nms); scratch at least yunet_post_scratch_bytes.
Status launch_yunet_post(const float* d_outputs, const YunetLayout& layout, const ImageGeom* d_geom,
                         const PostOptions& options, DeviceScratch scratch, DetectionsOut out,
                         CUstream_st* stream);

/// decode_expf (facetrace/faces/decode_math.h) on the device for `count` inputs (the tests compare it with the
/// host's bits). Asynchronous on `stream`.
Status decode_expf_device(const float* d_x, float* d_y, std::uint64_t count, CUstream_st* stream);

}  // namespace facetrace::faces::gpu
