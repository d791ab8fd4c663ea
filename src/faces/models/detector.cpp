/// @file
/// YuNet (docs/design/faces.md §5): load checks, letterbox (area-average shrink, bilinear enlarge), decode and NMS.
#include "facetrace/faces/detector.h"

#include <algorithm>
#include <cmath>

#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "facetrace/faces/decode_math.h"
#include "facetrace/faces/sha256.h"

namespace facetrace::faces {
namespace detail {
// Generated from models/face_detection_yunet_2023mar.onnx by cmake/embed_file.cmake (cmake/area_faces.cmake).
extern const std::uint8_t kYunet2023marOnnx[];
extern const std::size_t kYunet2023marOnnxSize;
}  // namespace detail

namespace {

constexpr int kStrides[3] = {8, 16, 32};
constexpr std::size_t kMaxCandidates = 4000;  // docs/design/faces.md §5 NMS

struct Tap {
  int src;
  float w;
};

// Per destination index, the source taps (docs/design/faces.md §5 letterbox): exact area average when shrinking, bilinear with
// half-pixel centres when enlarging.
std::vector<std::vector<Tap>> taps(int src, int dst) {
  std::vector<std::vector<Tap>> t(static_cast<std::size_t>(dst));
  const double r = static_cast<double>(src) / dst;
  for (int i = 0; i < dst; ++i) {
    auto& v = t[static_cast<std::size_t>(i)];
    if (r >= 1.0) {
      const double a = i * r, b = (i + 1) * r;
      for (int s = static_cast<int>(std::floor(a)); s < src && s < b; ++s) {
        const double ov = std::min<double>(s + 1, b) - std::max<double>(s, a);
        if (ov > 0) v.push_back({s, static_cast<float>(ov / r)});
      }
    } else {
      const double c = std::max((i + 0.5) * r - 0.5, 0.0);
      const int i0 = std::min(static_cast<int>(std::floor(c)), src - 1);
      const float f = static_cast<float>(c - i0);
      v.push_back({i0, 1.0f - f});
      v.push_back({std::min(i0 + 1, src - 1), f});
    }
  }
  return t;
}

int pad32(int v) { return (v + 31) / 32 * 32; }

float sane(float v, float def) { return std::isfinite(v) ? std::clamp(v, 0.0f, 1.0f) : def; }

const NamedTensor* find(const std::vector<NamedTensor>& outs, const std::string& name) {
  for (const auto& o : outs)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

std::optional<Expected<DetectionLists>> Accelerator::detect_yunet(const Program&, int,
                                                                  std::span<const RgbFrame>,
                                                                  const DetectOptions&) {
  return std::nullopt;
}

float letterbox_bgr(std::span<const std::uint8_t> rgb, int width, int height, int n, std::span<float> out) {
  std::fill(out.begin(), out.end(), 0.0f);
  const float scale = std::min(static_cast<float>(n) / width, static_cast<float>(n) / height);
  const int nw = std::clamp(static_cast<int>(std::lround(width * static_cast<double>(scale))), 1, n);
  const int nh = std::clamp(static_cast<int>(std::lround(height * static_cast<double>(scale))), 1, n);
  const auto tx = taps(width, nw), ty = taps(height, nh);
  // horizontal pass: tmp[y][x][c]
  std::vector<float> tmp(static_cast<std::size_t>(height) * nw * 3);
  for (int y = 0; y < height; ++y) {
    const std::uint8_t* row = rgb.data() + static_cast<std::size_t>(y) * width * 3;
    float* t = tmp.data() + static_cast<std::size_t>(y) * nw * 3;
    for (int x = 0; x < nw; ++x) {
      float s0 = 0, s1 = 0, s2 = 0;
      for (const Tap& tp : tx[static_cast<std::size_t>(x)]) {
        const std::uint8_t* p = row + static_cast<std::size_t>(tp.src) * 3;
        s0 += tp.w * p[0], s1 += tp.w * p[1], s2 += tp.w * p[2];
      }
      t[x * 3] = s0, t[x * 3 + 1] = s1, t[x * 3 + 2] = s2;
    }
  }
  // vertical pass into planar BGR
  const std::size_t plane = static_cast<std::size_t>(n) * n;
  for (int y = 0; y < nh; ++y)
    for (int x = 0; x < nw; ++x) {
      float s0 = 0, s1 = 0, s2 = 0;
      for (const Tap& tp : ty[static_cast<std::size_t>(y)]) {
        const float* p = tmp.data() + (static_cast<std::size_t>(tp.src) * nw + x) * 3;
        s0 += tp.w * p[0], s1 += tp.w * p[1], s2 += tp.w * p[2];
      }
      const std::size_t o = static_cast<std::size_t>(y) * n + x;
      out[o] = s2, out[plane + o] = s1, out[2 * plane + o] = s0;  // B, G, R
    }
  return scale;
}

void native_bgr(std::span<const std::uint8_t> rgb, int width, int height, std::span<float> out) {
  const std::size_t pw = static_cast<std::size_t>(pad32(width)), ph = static_cast<std::size_t>(pad32(height));
  const std::size_t plane = pw * ph;
  std::fill(out.begin(), out.end(), 0.0f);
  for (std::size_t y = 0; y < static_cast<std::size_t>(height); ++y) {
    const std::uint8_t* row = rgb.data() + y * static_cast<std::size_t>(width) * 3;
    for (std::size_t x = 0; x < static_cast<std::size_t>(width); ++x) {
      const std::size_t o = y * pw + x;
      out[o] = row[x * 3 + 2], out[plane + o] = row[x * 3 + 1], out[2 * plane + o] = row[x * 3];  // B, G, R
    }
  }
}

std::vector<Detection> decode_yunet(const std::vector<NamedTensor>& outs, int n, float scale, int width,
                                    int height, const DetectOptions& options) {
  return decode_yunet(outs, n, n, scale, width, height, options);
}

std::vector<Detection> decode_yunet(const std::vector<NamedTensor>& outs, int in_width, int in_height,
                                    float scale, int width, int height, const DetectOptions& options) {
  const float thr = sane(options.score, 0.6f);
  const float iou_max = sane(options.nms_iou, 0.3f);
  const int max_faces = std::clamp(options.max_faces, 0, 10000);
  struct Cand {
    float score;
    float box[4];  // fractions x0, y0, x1, y1
    Point lm[5];
  };
  std::vector<Cand> cands;
  const float fw = static_cast<float>(width), fh = static_cast<float>(height);
  for (int s : kStrides) {
    const std::string sfx = std::to_string(s);
    const NamedTensor* cls = find(outs, std::string("cls_").append(sfx));
    const NamedTensor* obj = find(outs, std::string("obj_").append(sfx));
    const NamedTensor* bbox = find(outs, std::string("bbox_").append(sfx));
    const NamedTensor* kps = find(outs, std::string("kps_").append(sfx));
    if (!cls || !obj || !bbox || !kps) continue;
    const int cols = in_width / s, rows = in_height / s;
    const std::size_t cells = static_cast<std::size_t>(cols) * static_cast<std::size_t>(rows);
    if (cls->data.size() < cells || obj->data.size() < cells || bbox->data.size() < 4 * cells ||
        kps->data.size() < 10 * cells)
      continue;
    const auto fs = static_cast<float>(s);
    for (std::size_t i = 0; i < cells; ++i) {
      const float score =
          std::sqrt(std::clamp(cls->data[i], 0.0f, 1.0f) * std::clamp(obj->data[i], 0.0f, 1.0f));
      if (std::isnan(score) || score < thr) continue;
      const auto row = static_cast<float>(i / static_cast<std::size_t>(cols));
      const auto col = static_cast<float>(i % static_cast<std::size_t>(cols));
      const float* b = &bbox->data[4 * i];
      const float cx = (col + b[0]) * fs, cy = (row + b[1]) * fs;
      // decode_expf, not std::exp: the GPU post-processing computes the same bits (decode_math.h).
      const float w = decode_expf(std::clamp(b[2], -10.0f, 10.0f)) * fs;
      const float h = decode_expf(std::clamp(b[3], -10.0f, 10.0f)) * fs;
      Cand c;
      c.score = score;
      c.box[0] = (cx - w / 2) / scale / fw, c.box[1] = (cy - h / 2) / scale / fh;
      c.box[2] = (cx + w / 2) / scale / fw, c.box[3] = (cy + h / 2) / scale / fh;
      const float* k = &kps->data[10 * i];
      for (int m = 0; m < 5; ++m)
        c.lm[m] = {(k[2 * m] + col) * fs / scale / fw, (k[2 * m + 1] + row) * fs / scale / fh};
      cands.push_back(c);
    }
  }
  std::stable_sort(cands.begin(), cands.end(),
                   [](const Cand& a, const Cand& b) { return a.score > b.score; });
  if (cands.size() > kMaxCandidates) cands.resize(kMaxCandidates);
  std::vector<Cand> kept;
  for (Cand c : cands) {
    if (static_cast<int>(kept.size()) >= max_faces) break;
    for (float& v : c.box) v = std::clamp(std::isfinite(v) ? v : 0.0f, 0.0f, 1.0f);
    const float w = c.box[2] - c.box[0], h = c.box[3] - c.box[1];
    if (w <= 1e-4f || h <= 1e-4f) continue;
    bool drop = false;
    for (const Cand& k : kept) {
      const float ix = std::min(c.box[2], k.box[2]) - std::max(c.box[0], k.box[0]);
      const float iy = std::min(c.box[3], k.box[3]) - std::max(c.box[1], k.box[1]);
      if (ix <= 0 || iy <= 0) continue;
      const float inter = ix * iy;
      const float uni = w * h + (k.box[2] - k.box[0]) * (k.box[3] - k.box[1]) - inter;
      if (inter / uni > iou_max) {
        drop = true;
        break;
      }
    }
    if (!drop) kept.push_back(c);
  }
  std::vector<Detection> out;
  out.reserve(kept.size());
  for (const Cand& c : kept) {
    Detection d;
    d.x0 = c.box[0] * fw, d.y0 = c.box[1] * fh, d.x1 = c.box[2] * fw, d.y1 = c.box[3] * fh;
    d.score = c.score;
    for (int m = 0; m < 5; ++m) d.landmarks[static_cast<std::size_t>(m)] = {c.lm[m].x * fw, c.lm[m].y * fh};
    out.push_back(d);
  }
  return out;
}

Expected<Detector> Detector::create(std::span<const std::uint8_t> bytes, const DetectorConfig& config) {
  if (!config.expected_sha256.empty()) {
    const std::string sha = sha256_hex(bytes);
    if (sha != config.expected_sha256)
      return invalid_argument("YuNet model: sha256 " + sha + " (" + std::to_string(bytes.size()) +
                              " bytes) differs from the expected " + config.expected_sha256);
  }
  NetOptions o;
  o.threads = config.threads;
  // DetectInput::kNative runs the photo's own padded size (docs/design/faces.md §5)
  o.free_spatial_dims = true;
  auto net = Net::create(bytes, o);
  if (!net) return net.status().with_context("YuNet model");
  const Shape& s = net->input_shape();
  if (s.size() != 4 || (s[0] != 1 && s[0] != 0) || s[1] != 3 || s[2] != s[3] || s[2] < 64 || s[2] > 4096 ||
      s[2] % 32 != 0)
    return invalid_argument("YuNet model: input must be [1,3,N,N] with N in 64..4096 a multiple of 32");
  const int n = static_cast<int>(s[2]);
  auto prog = net->program({1, 3, n, n});
  if (!prog) return prog.status().with_context("YuNet model");
  const char* kinds[4] = {"cls", "obj", "bbox", "kps"};
  const std::int64_t per[4] = {1, 1, 4, 10};
  for (int st : kStrides)
    for (int k = 0; k < 4; ++k) {
      const std::string name = std::string(kinds[k]) + "_" + std::to_string(st);
      const std::int64_t want = static_cast<std::int64_t>(n / st) * (n / st) * per[k];
      auto it = std::find_if(prog->outputs.begin(), prog->outputs.end(),
                             [&](const ProgramOutput& o) { return o.name == name; });
      if (it == prog->outputs.end()) return invalid_argument("YuNet model: output '" + name + "' is missing");
      if (prog->lens[static_cast<std::size_t>(it->value)] != want)
        return invalid_argument("YuNet model: output '" + name + "' holds " +
                                std::to_string(prog->lens[static_cast<std::size_t>(it->value)]) +
                                " values, expected " + std::to_string(want));
    }
  return Detector(std::move(*net), n);
}

Expected<Detector> Detector::load(const std::string& path, const DetectorConfig& config) {
  auto bytes = core::read_file(path, static_cast<std::uint64_t>(NetLimits{}.max_file_bytes));
  if (!bytes) return bytes.status().with_context("YuNet model");
  auto d = create(*bytes, config);
  if (!d) return d.status().with_context(core::quoted(path));
  return d;
}

std::span<const std::uint8_t> builtin_yunet_onnx() {
  return {detail::kYunet2023marOnnx, detail::kYunet2023marOnnxSize};
}

Expected<Detector> Detector::builtin(const DetectorConfig& config) {
  auto d = create(builtin_yunet_onnx(), config);
  if (!d) return d.status().with_context("built-in YuNet 2023mar");
  return d;
}

/// One image made ready for the network: its input, shape and where the photo sits in it.
struct Detector::Prepared {
  Shape shape;
  std::vector<float> input;
  float scale = 1.0f;
};

namespace {

Status check_frame(std::span<const std::uint8_t> rgb, int width, int height) {
  if (width < 1 || height < 1 || width > core::kMaxImageSide || height > core::kMaxImageSide)
    return invalid_argument("detect: image size " + std::to_string(width) + "x" + std::to_string(height) +
                            " outside 1..65536");
  if (rgb.size() != static_cast<std::size_t>(width) * height * 3)
    return invalid_argument("detect: " + std::to_string(rgb.size()) + " bytes for a " +
                            std::to_string(width) + "x" + std::to_string(height) + " RGB image (expected " +
                            std::to_string(static_cast<std::size_t>(width) * height * 3) + ")");
  return {};
}

}  // namespace

std::optional<std::vector<Expected<std::vector<Detection>>>> Detector::detect_on_accelerator(
    std::span<const RgbFrame> frames, const DetectOptions& options) const {
  if (options.input != DetectInput::kLetterbox || frames.empty()) return std::nullopt;
  const std::shared_ptr<Accelerator> acc = net_.ready_accelerator();
  if (!acc) return std::nullopt;
  std::vector<Expected<std::vector<Detection>>> results;
  std::vector<RgbFrame> good;
  std::vector<std::size_t> where;
  results.reserve(frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    Status st = check_frame(frames[i].rgb, frames[i].width, frames[i].height);
    results.emplace_back(st.ok() ? internal_error("detect: not run") : st);
    if (st.ok()) {
      good.push_back(frames[i]);
      where.push_back(i);
    }
  }
  if (good.empty()) return results;
  auto prog = net_.program({1, 3, n_, n_});
  if (!prog) return std::nullopt;
  // docs/design/faces.md §4: declined or out of memory → this call on the CPU; another error → detached, CPU.
  auto r = acc->detect_yunet(*prog, n_, good, options);
  if (!r) return std::nullopt;
  if (!*r) {
    net_.accelerator_failed(acc, r->status());
    return std::nullopt;
  }
  if ((*r)->size() != good.size()) {
    net_.accelerator_failed(acc, internal_error("detect_yunet returned " + std::to_string((*r)->size()) +
                                                " results for " + std::to_string(good.size()) + " photos"));
    return std::nullopt;
  }
  for (std::size_t k = 0; k < good.size(); ++k) results[where[k]] = std::move((**r)[k]);
  return results;
}

Expected<Detector::Prepared> Detector::prepare(std::span<const std::uint8_t> rgb, int width, int height,
                                               const DetectOptions& options) const {
  FT_TRY(check_frame(rgb, width, height));
  Prepared p;
  if (options.input == DetectInput::kNative) {
    const int pw = pad32(width), ph = pad32(height);
    const std::int64_t elements = std::int64_t{3} * pw * ph;
    if (elements > NetLimits{}.max_tensor_elements)
      return invalid_argument("detect: native input " + std::to_string(pw) + "x" + std::to_string(ph) + " (" +
                              std::to_string(elements) + " values) is over the network's limit of " +
                              std::to_string(NetLimits{}.max_tensor_elements) + "; use the letterbox");
    p.shape = {1, 3, ph, pw};
    p.input.resize(static_cast<std::size_t>(3) * pw * ph);
    native_bgr(rgb, width, height, p.input);
  } else {
    p.shape = {1, 3, n_, n_};
    p.input.resize(static_cast<std::size_t>(3) * n_ * n_);
    p.scale = letterbox_bgr(rgb, width, height, n_, p.input);
  }
  return p;
}

Expected<std::vector<Detection>> Detector::detect(std::span<const std::uint8_t> rgb, int width, int height,
                                                  const DetectOptions& options) const {
  const RgbFrame frame{rgb, width, height};
  if (auto r = detect_on_accelerator(std::span(&frame, 1), options)) return std::move(r->front());
  auto p = prepare(rgb, width, height, options);
  if (!p) return p.status();
  auto outs = net_.run(p->input, p->shape);
  if (!outs) return outs.status().with_context("YuNet");
  return decode_yunet(*outs, static_cast<int>(p->shape[3]), static_cast<int>(p->shape[2]), p->scale, width,
                      height, options);
}

std::vector<Expected<std::vector<Detection>>> Detector::detect_batch(std::span<const core::Image> images,
                                                                     const DetectOptions& options) const {
  {
    std::vector<RgbFrame> frames;
    frames.reserve(images.size());
    for (const core::Image& im : images) frames.push_back({im.rgb, im.width, im.height});
    if (auto r = detect_on_accelerator(frames, options)) return std::move(*r);
  }
  std::vector<Expected<std::vector<Detection>>> results;
  std::vector<Expected<Prepared>> prepared;
  results.reserve(images.size());
  prepared.reserve(images.size());
  for (const core::Image& im : images) {
    prepared.push_back(prepare(im.rgb, im.width, im.height, options));
    results.emplace_back(prepared.back() ? internal_error("detect_batch: not run")
                                         : prepared.back().status());
  }
  // One run per distinct input shape, images in their given order within it.
  std::vector<bool> done(images.size(), false);
  for (std::size_t first = 0; first < images.size(); ++first) {
    if (done[first] || !prepared[first]) continue;
    const Shape& shape = prepared[first]->shape;
    std::vector<std::size_t> group;
    std::vector<std::span<const float>> inputs;
    for (std::size_t i = first; i < images.size(); ++i)
      if (!done[i] && prepared[i] && prepared[i]->shape == shape) {
        done[i] = true;
        group.push_back(i);
        inputs.emplace_back(prepared[i]->input);
      }
    auto outs = net_.run_batch(inputs, shape);
    for (std::size_t k = 0; k < group.size(); ++k) {
      const std::size_t i = group[k];
      if (!outs) {
        results[i] = outs.status().with_context("YuNet");
        continue;
      }
      results[i] = decode_yunet((*outs)[k], static_cast<int>(shape[3]), static_cast<int>(shape[2]),
                                prepared[i]->scale, images[i].width, images[i].height, options);
    }
  }
  return results;
}

}  // namespace facetrace::faces
