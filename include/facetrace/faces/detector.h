/// @file
/// The YuNet face detector (docs/design/faces.md §5): letterbox or native input, network, anchor-free decode,
/// NMS; one photo or a batch.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {

/// sha256 and size of YuNet 2023mar (docs/design/faces.md §7).
inline constexpr const char* kYunetSha256 =
    "8f2383e4dd3cfbb4553ea8718107fc0423210dc964f9f4280604804ed2552fa4";
inline constexpr std::int64_t kYunetBytes = 232589;

struct Point {
  float x = 0.0f, y = 0.0f;
};

/// One face, in photo pixels (x right, y down). The box is clipped to the photo; landmarks are not and may fall
/// slightly outside. Landmark order: subject's right eye, left eye, nose tip, right and left mouth corners
/// (image-left eye first), the ArcFace template order.
struct Detection {
  float x0 = 0.0f, y0 = 0.0f, x1 = 0.0f, y1 = 0.0f;
  float score = 0.0f;
  std::array<Point, 5> landmarks{};
};

/// What the network sees (docs/design/faces.md §5 "Input size").
enum class DetectInput : std::uint8_t {
  /// The photo scaled to fit the model's N×N (640 for 2023mar), top-left, zero padded: one program for every
  /// photo, a fixed cost per image.
  kLetterbox,
  /// The photo at its own size, padded right/bottom with zeros to multiples of 32, never resized (OpenCV's
  /// FaceDetectorYN with setInputSize(w, h)): small faces in big photos stay visible; the cost grows with the
  /// photo's area and each new padded size is lowered once (cached by the Net).
  kNative,
};

/// Detection options. Non-finite → default; score and nms_iou clamped to [0,1]; max_faces to [0, 10000].
struct DetectOptions {
  float score = 0.6f;
  float nms_iou = 0.3f;
  int max_faces = 200;
  DetectInput input = DetectInput::kLetterbox;
};

/// Options of Detector::load / create.
struct DetectorConfig {
  /// The sha256 the file must have; empty skips the check (e.g. another YuNet export).
  std::string expected_sha256 = kYunetSha256;
  /// Threads per call (0 = all).
  int threads = 0;
};

/// Letterboxes 8-bit RGB (width·height·3 bytes) into a planar [3,n,n] BGR float buffer, 0..255, image at the
/// top-left, the rest 0 (docs/design/faces.md §5). Returns the scale min(n/w, n/h).
float letterbox_bgr(std::span<const std::uint8_t> rgb, int width, int height, int n, std::span<float> out);

/// Copies 8-bit RGB (width·height·3 bytes) into a planar [3, pad32(height), pad32(width)] BGR float buffer, 0..255,
/// unscaled, the padding right and bottom 0 (docs/design/faces.md §5 "Input size"); pad32(v) = ⌈v/32⌉·32. `out`
/// must hold 3·pad32(height)·pad32(width) floats.
void native_bgr(std::span<const std::uint8_t> rgb, int width, int height, std::span<float> out);

/// The YuNet 2023mar ONNX built into the library (models/face_detection_yunet_2023mar.onnx: kYunetBytes bytes,
/// sha256 kYunetSha256, MIT, models/SOURCES.md). Static storage; thread-safe.
std::span<const std::uint8_t> builtin_yunet_onnx();

/// A loaded YuNet. Immutable; `detect` is thread-safe.
class Detector {
 public:
  /// The built-in YuNet 2023mar (builtin_yunet_onnx()), checked and lowered as `create` does any bytes; needs
  /// no file. kInvalidArgument if `config.expected_sha256` names another model.
  static Expected<Detector> builtin(const DetectorConfig& config = {});
  /// Reads, checks (sha256, input [1,3,N,N] with N in 64..4096 a multiple of 32, the 12 outputs by name and
  /// size) and lowers the model. kIo, kInvalidArgument (mismatch, naming the missing output), kNotSupported.
  static Expected<Detector> load(const std::string& path, const DetectorConfig& config = {});
  static Expected<Detector> create(std::span<const std::uint8_t> bytes, const DetectorConfig& config = {});

  /// Input side N (640 for 2023mar).
  int input_size() const { return n_; }
  const Net& net() const { return net_; }

  /// Faces in an RGB photo (sides 1..65536), best score first, with the input of `options.input`.
  /// kInvalidArgument for a wrong byte count, or (kNative) a padded input over NetLimits::max_tensor_elements or
  /// activations over max_live_bytes.
  Expected<std::vector<Detection>> detect(std::span<const std::uint8_t> rgb, int width, int height,
                                          const DetectOptions& options = {}) const;
  Expected<std::vector<Detection>> detect(const core::Image& image, const DetectOptions& options = {}) const {
    return detect(image.rgb, image.width, image.height, options);
  }
  /// Faces in each of `images`, in order: one Net::run_batch per distinct network input shape (one for the
  /// letterbox; one per padded size with DetectInput::kNative). Each result equals detect(images[i], options)
  /// exactly. A bad image (wrong size or byte count) gets its own error and the others still run; a failed run
  /// gives its error to every image of that run. Thread-safe.
  std::vector<Expected<std::vector<Detection>>> detect_batch(std::span<const core::Image> images,
                                                             const DetectOptions& options = {}) const;

 private:
  struct Prepared;
  /// The whole detection on the attached accelerator (Accelerator::detect_yunet, letterbox only), per frame in
  /// order (a bad frame gets its own error); nullopt: run the CPU path (no accelerator, declined, or failed).
  std::optional<std::vector<Expected<std::vector<Detection>>>> detect_on_accelerator(
      std::span<const RgbFrame> frames, const DetectOptions& options) const;
  Expected<Prepared> prepare(std::span<const std::uint8_t> rgb, int width, int height,
                             const DetectOptions& options) const;
  Detector(Net net, int n) : net_(std::move(net)), n_(n) {}
  Net net_;
  int n_ = 0;
};

/// Decodes YuNet outputs (cls/obj/bbox/kps at strides 8/16/32, in that order as produced by Detector) for a
/// network input of in_width × in_height (grids in_height/s × in_width/s) holding a width×height photo at
/// `scale`, then applies NMS. Exposed for tests and accelerators.
std::vector<Detection> decode_yunet(const std::vector<NamedTensor>& outputs, int in_width, int in_height,
                                    float scale, int width, int height, const DetectOptions& options);
/// The square letterbox form: decode_yunet(outputs, n, n, scale, width, height, options).
std::vector<Detection> decode_yunet(const std::vector<NamedTensor>& outputs, int n, float scale, int width,
                                    int height, const DetectOptions& options);

}  // namespace facetrace::faces
