/// @file
/// YuNet's pre- and post-processing on the GPU (docs/design/faces.md §5): letterbox (or the native zero pad) of
/// decoded RGB8 frames into the network's planar BGR input, and the decode, score filter, top-k and NMS of its 12
/// outputs into final detections, all on one stream so a batch's pixels and candidates stay on the device; the
/// results equal the CPU's letterbox_bgr and decode_yunet bit for bit. Host C++20 only (no CUDA headers), like
/// cuda/faces/gpu_program.h; implemented in cuda/faces/yunet_gpu.cpp over the launchers and plain types of
/// cuda/faces/prepost_launch.h (FrameDesc, ImageGeom, YunetLayout, GpuDetection, DetectionsOut, DeviceScratch,
/// decode_expf_device), whose kernels are cuda/faces/preprocess.cu and cuda/faces/yunet_post.cu.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/detector.h"
#include "faces/prepost_launch.h"

namespace facetrace::faces::gpu {

/// The letterbox scale and placed size for a width×height frame in an n×n input, exactly as letterbox_bgr
/// computes them (host arithmetic).
struct LetterboxFit {
  float scale = 1.0f;
  int placed_width = 0;
  int placed_height = 0;
};
LetterboxFit letterbox_fit(int width, int height, int n);

/// Letterboxes `count` frames into `d_out` ([count, 3, n, n] floats, device, BGR planar 0..255, each image at the
/// top-left and the rest 0), the same values as letterbox_bgr (separable area-average shrink / half-pixel bilinear
/// enlarge, horizontal first, in float). `frames` is a host array of descriptors of device frames. Writes
/// `d_geom[i]` (device, `count` entries) and, when `scales` is not null, the host array scales[i]. Asynchronous
/// on `stream`. kInvalidArgument for n outside 1..4096, a frame side outside 1..65536 or a null pointer;
/// kDeviceLost / kInternal for a launch failure.
Status letterbox_batch(const FrameDesc* frames, int count, int n, float* d_out, ImageGeom* d_geom,
                       float* scales, CUstream_st* stream);

/// The input side for `--input-size native` (what OpenCV's FaceDetectorYN does for setInputSize(w, h)): `side`
/// rounded up to a multiple of 32.
inline int native_side(int side) { return (side + 31) / 32 * 32; }

/// The native variant: each frame copied without resizing into the top-left of an out_width×out_height input
/// ([count, 3, out_height, out_width] floats, BGR planar 0..255), zero to the right and below; scale 1.
/// kInvalidArgument when a frame does not fit or out sides are not multiples of 32 in 32..65536.
Status pad_native_batch(const FrameDesc* frames, int count, int out_width, int out_height, float* d_out,
                        ImageGeom* d_geom, CUstream_st* stream);

/// Builds the layout from the program's output names and per-image lengths (Program::outputs order and
/// lens[outputs[i].value]). kInvalidArgument naming the output that is missing or has the wrong length for an
/// input_width×input_height input (sides multiples of 32), or for batch outside 1..4096.
Expected<YunetLayout> yunet_layout(std::span<const std::string> names, std::span<const std::int64_t> lens,
                                   int batch, int input_width, int input_height);

/// Converts the records of one image to the CPU's type.
std::vector<Detection> to_detections(std::span<const GpuDetection> records);

/// Scratch yunet_decode_nms needs for `layout` at most.
std::uint64_t yunet_post_scratch_bytes(const YunetLayout& layout);

/// Decodes, filters, sorts (descending score; ties in the CPU's cell order), caps at 4000 candidates and runs
/// greedy NMS with clipping per image, exactly as decode_yunet (docs/design/faces.md §5): same count, order and
/// float bits. `d_outputs`: device, layout.total_floats floats. `d_geom`: device, layout.batch entries (from the
/// preprocessing). One device→host read of the number of candidates above the threshold (Thrust's copy_if
/// returns it); everything else stays on `stream`. kInvalidArgument (layout, capacity, scratch smaller than
/// yunet_post_scratch_bytes), kOutOfMemory (scratch exhausted), kDeviceLost / kInternal (CUDA failures).
Status yunet_decode_nms(const float* d_outputs, const YunetLayout& layout, const ImageGeom* d_geom,
                        const DetectOptions& options, DeviceScratch scratch, DetectionsOut out,
                        CUstream_st* stream);

}  // namespace facetrace::faces::gpu
