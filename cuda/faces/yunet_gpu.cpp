/// @file
/// The host side of YuNet's GPU pre/post-processing (cuda/faces/yunet_gpu.h): argument checks, the letterbox
/// geometry (letterbox_bgr's expressions), the output layout by name, option sanitising (decode_yunet's), and the
/// conversion of records; the launches are in cuda/faces/preprocess.cu and yunet_post.cu.
#include "faces/yunet_gpu.h"

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <string>
#include <vector>

namespace facetrace::faces::gpu {
namespace {

constexpr int kMaxCandidates = 4000;  // docs/design/faces.md §5 NMS
constexpr int kKeyCellBits = 22;      // cuda/faces/yunet_post.cuh sort key
constexpr const char* kKinds[4] = {"cls", "obj", "bbox", "kps"};
constexpr int kPer[4] = {1, 1, 4, 10};

// decode_yunet's option sanitising (non-finite → default, then clamp to [0, 1]).
float sane(float v, float def) { return std::isfinite(v) ? std::clamp(v, 0.0f, 1.0f) : def; }

Status check_frames(const FrameDesc* frames, int count) {
  if (count < 0) return invalid_argument("preprocess: negative frame count " + std::to_string(count));
  if (count > 0 && frames == nullptr) return invalid_argument("preprocess: null frame table");
  for (int i = 0; i < count; ++i) {
    const FrameDesc& f = frames[i];
    if (f.width < 1 || f.height < 1 || f.width > core::kMaxImageSide || f.height > core::kMaxImageSide)
      return invalid_argument("preprocess: frame " + std::to_string(i) + " is " + std::to_string(f.width) +
                              "x" + std::to_string(f.height) + ", sides must be in 1..65536");
    if (f.rgb == nullptr)
      return invalid_argument("preprocess: frame " + std::to_string(i) + " has no pixels");
  }
  return {};
}

}  // namespace

LetterboxFit letterbox_fit(int width, int height, int n) {
  // letterbox_bgr (src/faces/models/detector.cpp), the same expressions.
  const float scale = std::min(static_cast<float>(n) / width, static_cast<float>(n) / height);
  const int nw = std::clamp(static_cast<int>(std::lround(width * static_cast<double>(scale))), 1, n);
  const int nh = std::clamp(static_cast<int>(std::lround(height * static_cast<double>(scale))), 1, n);
  return {scale, nw, nh};
}

Status letterbox_batch(const FrameDesc* frames, int count, int n, float* d_out, ImageGeom* d_geom,
                       float* scales, CUstream_st* stream) {
  FT_TRY(check_frames(frames, count));
  if (n < 1 || n > 4096)
    return invalid_argument("letterbox: input side " + std::to_string(n) + " outside 1..4096");
  if (count > 0 && (d_out == nullptr || d_geom == nullptr)) return invalid_argument("letterbox: null output");
  std::vector<LetterboxFrame> lf(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const FrameDesc& f = frames[i];
    const LetterboxFit fit = letterbox_fit(f.width, f.height, n);
    if (scales) scales[i] = fit.scale;
    lf[static_cast<std::size_t>(i)] = {f.rgb,    f.width, f.height, fit.placed_width, fit.placed_height,
                                       fit.scale};
  }
  if (count == 0) return {};
  return launch_letterbox(lf.data(), count, n, d_out, d_geom, stream);
}

Status pad_native_batch(const FrameDesc* frames, int count, int out_width, int out_height, float* d_out,
                        ImageGeom* d_geom, CUstream_st* stream) {
  FT_TRY(check_frames(frames, count));
  if (out_width < 32 || out_height < 32 || out_width > core::kMaxImageSide ||
      out_height > core::kMaxImageSide || out_width % 32 != 0 || out_height % 32 != 0)
    return invalid_argument("native pad: input " + std::to_string(out_width) + "x" +
                            std::to_string(out_height) +
                            " must have sides that are multiples of 32 in 32..65536");
  if (count > 0 && (d_out == nullptr || d_geom == nullptr))
    return invalid_argument("native pad: null output");
  for (int i = 0; i < count; ++i)
    if (frames[i].width > out_width || frames[i].height > out_height)
      return invalid_argument("native pad: frame " + std::to_string(i) + " (" +
                              std::to_string(frames[i].width) + "x" + std::to_string(frames[i].height) +
                              ") does not fit the " + std::to_string(out_width) + "x" +
                              std::to_string(out_height) + " input");
  if (count == 0) return {};
  return launch_pad_native(frames, count, out_width, out_height, d_out, d_geom, stream);
}

Expected<YunetLayout> yunet_layout(std::span<const std::string> names, std::span<const std::int64_t> lens,
                                   int batch, int input_width, int input_height) {
  if (names.size() != lens.size())
    return invalid_argument("yunet layout: " + std::to_string(names.size()) + " names for " +
                            std::to_string(lens.size()) + " lengths");
  if (batch < 1 || batch > 4096)
    return invalid_argument("yunet layout: batch " + std::to_string(batch) + " outside 1..4096");
  if (input_width < 32 || input_height < 32 || input_width % 32 != 0 || input_height % 32 != 0)
    return invalid_argument("yunet layout: input " + std::to_string(input_width) + "x" +
                            std::to_string(input_height) + " must have sides that are multiples of 32");
  YunetLayout l;
  l.batch = batch, l.input_width = input_width, l.input_height = input_height;
  const std::uint64_t cells = yunet_cells_per_image(l);
  if (cells >= (std::uint64_t{1} << kKeyCellBits) ||
      cells * static_cast<std::uint64_t>(batch) >= (std::uint64_t{1} << 32))
    return invalid_argument("yunet layout: " + std::to_string(cells) + " cells per image × batch " +
                            std::to_string(batch) + " is too large for one call");
  std::vector<std::uint64_t> start(names.size());
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (lens[i] < 0) return invalid_argument("yunet layout: output '" + names[i] + "' has a negative length");
    start[i] = at;
    at += static_cast<std::uint64_t>(lens[i]) * static_cast<std::uint64_t>(batch);
  }
  l.total_floats = at;
  for (int k = 0; k < 4; ++k)
    for (int s = 0; s < 3; ++s) {
      const std::string name = std::string(kKinds[k]) + "_" + std::to_string(8 << s);
      const auto it = std::find(names.begin(), names.end(), name);
      if (it == names.end()) return invalid_argument("yunet layout: output '" + name + "' is missing");
      const auto i = static_cast<std::size_t>(it - names.begin());
      const std::int64_t want =
          static_cast<std::int64_t>(input_width / (8 << s)) * (input_height / (8 << s)) * kPer[k];
      if (lens[i] != want)
        return invalid_argument("yunet layout: output '" + name + "' holds " + std::to_string(lens[i]) +
                                " values per image, expected " + std::to_string(want) + " for a " +
                                std::to_string(input_width) + "x" + std::to_string(input_height) + " input");
      l.offset[k][s] = start[i];
    }
  return l;
}

std::vector<Detection> to_detections(std::span<const GpuDetection> records) {
  std::vector<Detection> out;
  out.reserve(records.size());
  for (const GpuDetection& r : records) {
    Detection d;
    d.x0 = r.x0, d.y0 = r.y0, d.x1 = r.x1, d.y1 = r.y1, d.score = r.score;
    for (std::size_t m = 0; m < 5; ++m) d.landmarks[m] = {r.landmarks[2 * m], r.landmarks[2 * m + 1]};
    out.push_back(d);
  }
  return out;
}

std::uint64_t yunet_post_scratch_bytes(const YunetLayout& layout) {
  const std::uint64_t n = yunet_cells_per_image(layout) * static_cast<std::uint64_t>(layout.batch);
  // ids (4) + keys (8) + the sort's alternate buffers (12) + copy_if's tile state, with room to spare.
  return n * 32 + static_cast<std::uint64_t>(layout.batch + 1) * 4 + (std::uint64_t{8} << 20);
}

Status yunet_decode_nms(const float* d_outputs, const YunetLayout& layout, const ImageGeom* d_geom,
                        const DetectOptions& options, DeviceScratch scratch, DetectionsOut out,
                        CUstream_st* stream) {
  if (layout.batch < 1) return invalid_argument("yunet post: empty layout (build it with yunet_layout)");
  if (d_outputs == nullptr || d_geom == nullptr || out.counts == nullptr)
    return invalid_argument("yunet post: null outputs, geometry or result");
  PostOptions o;
  o.score = sane(options.score, 0.6f);
  o.nms_iou = sane(options.nms_iou, 0.3f);
  o.max_faces = std::clamp(options.max_faces, 0, 10000);
  // FACETRACE_FACES_POST_THRUST=1: the Thrust path even where the one-kernel form applies (tests, A/B)
  const char* thrust_only = std::getenv("FACETRACE_FACES_POST_THRUST");
  o.one_kernel = !(thrust_only && thrust_only[0] == '1');
  const int need = std::min(o.max_faces, kMaxCandidates);
  if (out.capacity < need || (need > 0 && out.records == nullptr))
    return invalid_argument("yunet post: room for " + std::to_string(out.capacity) +
                            " detections per image, " + std::to_string(need) +
                            " needed (min(max_faces, 4000))");
  const std::uint64_t want = yunet_post_scratch_bytes(layout);
  if (scratch.data == nullptr || scratch.bytes < want)
    return invalid_argument("yunet post: scratch of " + std::to_string(scratch.bytes) + " bytes, " +
                            std::to_string(want) + " needed");
  return launch_yunet_post(d_outputs, layout, d_geom, o, scratch, out, stream);
}

}  // namespace facetrace::faces::gpu
