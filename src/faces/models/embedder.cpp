/// @file
/// Embedders (docs/design/faces.md §7): model table by sha256, preprocessing, f64 normalisation.
#include "facetrace/faces/embedder.h"

#include <cmath>

#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/sha256.h"

namespace facetrace::faces {

namespace known {

std::optional<ModelInfo> lookup(std::string_view sha) {
  // docs/design/faces.md §7 table.
  // One model a row: not reformatted.
  // clang-format off
  static const ModelInfo kModels[] = {
      {"SFace 2021dec", "0ba9fbfa01b5270c96627c4ef784da859931e02f04419c829e83484087c34e79", 38696353, 112,
       ChannelOrder::kRgb, {0, 0, 0}, {1, 1, 1}, 128, 0.55f},
      {"AuraFace v1 (glintr100)", "a7933ea5330113b01c9b60351d8f4c33003f145d8470ac5f0e52ee2effe25c60", 260694151, 112,
       ChannelOrder::kRgb, {127.5f, 127.5f, 127.5f}, {127.5f, 127.5f, 127.5f}, 512, 0.40f},
      {"MobileFaceNet (foamliu, tests only)", "b7120c095d60094f28a4a54ba6a8bf51b297a6273fb40ef6350dfec1f63d9507",
       3998070, 112, ChannelOrder::kRgb, {127.5f, 127.5f, 127.5f}, {128.0f, 128.0f, 128.0f}, 128, 0.0f},
  };  // clang-format on

  for (const auto& m : kModels)
    if (m.sha256 == sha) return m;
  return std::nullopt;
}

ModelInfo arcface_default() {
  ModelInfo m;
  m.name = "unknown (ArcFace-style)";
  return m;
}

}  // namespace known

Expected<Embedder> Embedder::create(std::span<const std::uint8_t> bytes, int threads) {
  const std::string sha = sha256_hex(bytes);
  auto found = known::lookup(sha);
  ModelInfo info = found ? *found : known::arcface_default();
  if (found && static_cast<std::int64_t>(bytes.size()) != info.bytes)
    return invalid_argument("embedder: " + info.name + " should be " + std::to_string(info.bytes) + " bytes");
  if (!found) info.sha256 = sha, info.bytes = static_cast<std::int64_t>(bytes.size());
  NetOptions o;
  o.threads = threads;
  auto net = Net::create(bytes, o);
  if (!net) return net.status().with_context("embedder");
  const Shape& s = net->input_shape();
  if (s.size() != 4 || (s[0] != 1 && s[0] != 0) || s[1] != 3 || (s[2] != 0 && s[2] != s[3]))
    return invalid_argument("embedder: input must be [1,3,S,S]");
  if (s[2] != 0) info.input = static_cast<int>(s[2]);
  if (info.input < 16 || info.input > 4096) return invalid_argument("embedder: input side outside 16..4096");
  for (float v : info.std)
    if (v == 0.0f) return invalid_argument("embedder: std 0");
  auto prog = net->program({1, 3, info.input, info.input});
  if (!prog) return prog.status().with_context("embedder");
  if (prog->outputs.size() != 1)
    return invalid_argument("embedder: " + std::to_string(prog->outputs.size()) +
                            " outputs (exactly one expected)");
  const std::int64_t dim = prog->lens[static_cast<std::size_t>(prog->outputs[0].value)];
  if (dim < 1 || dim > 4096)
    return invalid_argument("embedder: output length " + std::to_string(dim) + " outside 1..4096");
  if (info.dim != 0 && info.dim != dim)
    return invalid_argument("embedder: " + info.name + " should output " + std::to_string(info.dim) +
                            " values");
  info.dim = static_cast<int>(dim);
  return Embedder(std::move(*net), std::move(info));
}

Expected<Embedder> Embedder::load(const std::string& path, int threads) {
  auto bytes = core::read_file(path, static_cast<std::uint64_t>(NetLimits{}.max_file_bytes));
  if (!bytes) return bytes.status().with_context("embedder model");
  auto e = create(*bytes, threads);
  if (!e) return e.status().with_context(core::quoted(path));
  return e;
}

Expected<std::vector<float>> Embedder::preprocess(const core::Image& im) const {
  const int s = info_.input;
  if (im.width != s || im.height != s || im.rgb.size() != static_cast<std::size_t>(s) * s * 3)
    return invalid_argument("embedder: aligned face must be " + std::to_string(s) + "x" + std::to_string(s) +
                            " RGB, got " + std::to_string(im.width) + "x" + std::to_string(im.height));
  const std::size_t plane = static_cast<std::size_t>(s) * s;
  std::vector<float> x(3 * plane);
  for (int c = 0; c < 3; ++c) {
    const int src = info_.order == ChannelOrder::kRgb ? c : 2 - c;
    for (std::size_t i = 0; i < plane; ++i)
      x[static_cast<std::size_t>(c) * plane + i] =
          (static_cast<float>(im.rgb[i * 3 + static_cast<std::size_t>(src)]) - info_.mean[c]) / info_.std[c];
  }
  return x;
}

namespace {

/// The network's output scaled to unit norm (norm in f64).
Expected<std::vector<float>> unit_norm(std::vector<float> v) {
  double n2 = 0.0;
  for (float f : v) n2 += static_cast<double>(f) * f;
  const double norm = std::sqrt(n2);
  if (!(norm >= 1e-9) || !std::isfinite(norm)) return invalid_argument("embedder: all-zero face");
  for (float& f : v) f = static_cast<float>(f / norm);
  return v;
}

}  // namespace

Expected<std::vector<float>> Embedder::embed(const core::Image& aligned) const {
  auto x = preprocess(aligned);
  if (!x) return x.status();
  auto out = net_.run(*x, {1, 3, info_.input, info_.input});
  if (!out) return out.status().with_context("embedder");
  return unit_norm(std::move((*out)[0].data));
}

Expected<std::vector<float>> Embedder::embed_face(const core::Image& photo, const Detection& face) const {
  auto al = align_face(photo, face.landmarks, info_.input, info_.input);
  if (!al) return al.status();
  return embed(*al);
}

std::vector<Expected<std::vector<float>>> Embedder::embed_batch(std::span<const core::Image> aligned) const {
  std::vector<Expected<std::vector<float>>> results;
  std::vector<std::vector<float>> inputs;
  std::vector<std::size_t> ran;  // index in `aligned` of each input
  results.reserve(aligned.size());
  for (std::size_t i = 0; i < aligned.size(); ++i) {
    auto x = preprocess(aligned[i]);
    if (x) {
      ran.push_back(i);
      inputs.push_back(std::move(*x));
    }
    results.emplace_back(x ? internal_error("embed_batch: not run") : x.status());
  }
  if (inputs.empty()) return results;
  std::vector<std::span<const float>> spans(inputs.begin(), inputs.end());
  auto outs = net_.run_batch(spans, {1, 3, info_.input, info_.input});
  for (std::size_t k = 0; k < ran.size(); ++k) {
    if (outs)
      results[ran[k]] = unit_norm(std::move((*outs)[k][0].data));
    else
      results[ran[k]] = outs.status().with_context("embedder");
  }
  return results;
}

std::vector<Expected<std::vector<float>>> Embedder::embed_faces(const core::Image& photo,
                                                                std::span<const Detection> faces) const {
  std::vector<core::Image> aligned;
  std::vector<std::size_t> ok;
  std::vector<Expected<std::vector<float>>> results;
  results.reserve(faces.size());
  for (std::size_t i = 0; i < faces.size(); ++i) {
    auto al = align_face(photo, faces[i].landmarks, info_.input, info_.input);
    if (al) {
      ok.push_back(i);
      aligned.push_back(std::move(*al));
    }
    results.emplace_back(al ? internal_error("embed_faces: not run") : al.status());
  }
  auto embedded = embed_batch(aligned);
  for (std::size_t k = 0; k < ok.size(); ++k) results[ok[k]] = std::move(embedded[k]);
  return results;
}

std::optional<float> cosine_similarity(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size() || a.empty()) return std::nullopt;
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return std::nullopt;
    s += static_cast<double>(a[i]) * b[i];
  }
  return static_cast<float>(s);
}

}  // namespace facetrace::faces
