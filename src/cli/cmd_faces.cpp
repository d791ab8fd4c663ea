/// @file
/// `facetrace faces detect|embed|compare`: YuNet detection, aligned embeddings and face comparison on the CPU.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/env.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"

namespace facetrace::cli {
namespace {

namespace fs = std::filesystem;
using namespace facetrace::faces;
using Json = nlohmann::ordered_json;  // keys in the order written

constexpr const char* kDetectorFile = "face_detection_yunet_2023mar.onnx";
// Embedders looked for in FACETRACE_MODELS, in order of preference.
constexpr std::initializer_list<const char*> kEmbedderFiles = {
    "face_recognition_sface_2021dec.onnx", "glintr100.onnx", "mobilefacenet_foamliu_128d.onnx"};

// ---- inputs -----------------------------------------------------------------------------------------

struct DetectArgs {
  std::vector<std::string> images;
  std::string model, annotate;
  float score = 0.6f;
  bool json = false;
  int threads = 0;
};

/// The models of `embed` and `compare`.
struct ModelArgs {
  std::string detector, embedder;
  int threads = 0;
};

struct EmbedArgs {
  std::string image;
  ModelArgs models;
};

struct CompareArgs {
  std::string a, b;
  ModelArgs models;
};

/// Bad input (arguments, unreadable or malformed files) is kExitBadInput; everything else kExitFailure.
int exit_code_for(const Status& st) {
  return st.code() == Code::kInvalidArgument || st.code() == Code::kIo ? kExitBadInput : kExitFailure;
}

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "facetrace faces: %s\n", what.c_str());
  return code;
}

int fail(const Status& st) { return fail(exit_code_for(st), st.to_string()); }

/// The detector: the flag's file, else FACETRACE_MODELS/face_detection_yunet_2023mar.onnx when that exists, else
/// the YuNet 2023mar built into the library.
Expected<Detector> open_detector(const std::string& flag, int threads) {
  DetectorConfig cfg;
  cfg.threads = threads;
  if (!flag.empty()) return Detector::load(flag, cfg);
  if (const auto dir = core::env_string("FACETRACE_MODELS")) {
    const fs::path p = fs::path(*dir) / kDetectorFile;
    std::error_code ec;
    if (fs::exists(p, ec)) return Detector::load(p.string(), cfg);
  }
  return Detector::builtin(cfg);
}

/// The embedder file: the flag, else the first of kEmbedderFiles in FACETRACE_MODELS.
Expected<std::string> embedder_path(const std::string& flag) {
  if (!flag.empty()) return flag;
  const auto dir = core::env_string("FACETRACE_MODELS");
  if (!dir)
    return invalid_argument(
        std::string("no model given: pass --embedder PATH or set FACETRACE_MODELS to a folder "
                    "holding ") +
        *kEmbedderFiles.begin());
  std::string list;
  for (const char* f : kEmbedderFiles) {
    const fs::path p = fs::path(*dir) / f;
    std::error_code ec;
    if (fs::exists(p, ec)) return p.string();
    list += (list.empty() ? "" : ", ") + std::string(f);
  }
  return invalid_argument("FACETRACE_MODELS=" + *dir + " holds none of: " + list +
                          " (or pass --embedder PATH)");
}

struct Models {
  Detector detector;
  Embedder embedder;
};

/// Opens the detector and the embedder of `embed` / `compare` and runs `body(models)`, or prints why they cannot be
/// opened and returns the exit code.
template <class Body>
int with_models(const ModelArgs& a, Body&& body) {
  auto det = open_detector(a.detector, a.threads);
  if (!det) return fail(det.status());
  auto path = embedder_path(a.embedder);
  if (!path) return fail(kExitBadInput, path.status().what());
  auto emb = Embedder::load(*path, a.threads);
  if (!emb) return fail(emb.status());
  return body(Models{std::move(*det), std::move(*emb)});
}

/// A decoded photo and the faces found in it, best score first.
struct Photo {
  core::Image image;
  std::vector<Detection> faces;
};

Expected<Photo> detect_photo(const Detector& det, const std::string& path,
                             const DetectOptions& options = {}) {
  auto im = core::load_image(path);
  if (!im) return im.status();
  auto found = det.detect(*im, options);
  if (!found) return found.status();
  return Photo{std::move(*im), std::move(*found)};
}

// ---- output -----------------------------------------------------------------------------------------

/// `v` printed with `digits` decimals, read back: the JSON holds the same decimal the text output shows.
double rounded(double v, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return std::strtod(buf, nullptr);
}

Json face_json(const Detection& d) {
  Json landmarks = Json::array();
  for (const Point& p : d.landmarks) landmarks.push_back({rounded(p.x, 2), rounded(p.y, 2)});
  return Json{{"score", rounded(d.score, 4)},
              {"box", {rounded(d.x0, 2), rounded(d.y0, 2), rounded(d.x1, 2), rounded(d.y1, 2)}},
              {"landmarks", std::move(landmarks)}};
}

/// Compact JSON on stdout; bytes that are not UTF-8 (a path) are replaced rather than refused.
void print_json(const Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
}

void print_faces_text(const std::string& path, const core::Image& im, const std::vector<Detection>& found) {
  std::printf("%s (%dx%d): %zu face%s\n", path.c_str(), im.width, im.height, found.size(),
              found.size() == 1 ? "" : "s");
  for (std::size_t k = 0; k < found.size(); ++k) {
    const Detection& d = found[k];
    std::printf(
        "  face %zu: score %.3f box [%.1f, %.1f, %.1f, %.1f] eyes (%.1f, %.1f) (%.1f, %.1f) nose (%.1f, %.1f)"
        " mouth (%.1f, %.1f) (%.1f, %.1f)\n",
        k, d.score, d.x0, d.y0, d.x1, d.y1, d.landmarks[0].x, d.landmarks[0].y, d.landmarks[1].x,
        d.landmarks[1].y, d.landmarks[2].x, d.landmarks[2].y, d.landmarks[3].x, d.landmarks[3].y,
        d.landmarks[4].x, d.landmarks[4].y);
  }
}

Status annotate(const core::Image& photo, const std::vector<Detection>& faces, const std::string& out) {
  core::Image im = photo;
  const int t = std::max(2, std::min(im.width, im.height) / 300);
  constexpr std::uint8_t kColors[5][3] = {
      {255, 0, 0}, {0, 0, 255}, {0, 255, 0}, {255, 0, 255}, {0, 255, 255}};
  for (const auto& d : faces) {
    core::draw_rect(im, d.x0, d.y0, d.x1, d.y1, 0, 255, 0, t);
    for (std::size_t k = 0; k < 5; ++k)
      core::draw_dot(im, d.landmarks[k].x, d.landmarks[k].y, t, kColors[k][0], kColors[k][1], kColors[k][2]);
  }
  return core::write_png(out, im);
}

// ---- the commands -----------------------------------------------------------------------------------

int run_detect(const DetectArgs& a) {
  if (!a.annotate.empty() && a.images.size() != 1)
    return fail(kExitBadInput, "--annotate takes exactly one image");
  auto det = open_detector(a.model, a.threads);
  if (!det) return fail(det.status());
  DetectOptions opt;
  opt.score = a.score;
  Json images = Json::array();
  for (const std::string& path : a.images) {
    auto p = detect_photo(*det, path, opt);
    if (!p) return fail(p.status());
    const core::Image& im = p->image;
    if (a.json) {
      Json faces = Json::array();
      for (const Detection& d : p->faces) faces.push_back(face_json(d));
      images.push_back(
          {{"path", path}, {"width", im.width}, {"height", im.height}, {"faces", std::move(faces)}});
    } else {
      print_faces_text(path, im, p->faces);
    }
    if (!a.annotate.empty())
      if (Status st = annotate(im, p->faces, a.annotate); !st.ok()) return fail(kExitFailure, st.to_string());
  }
  if (a.json) print_json(Json{{"images", std::move(images)}});
  return kExitOk;
}

int run_embed(const EmbedArgs& a, const Models& m) {
  auto p = detect_photo(m.detector, a.image);
  if (!p) return fail(p.status());
  Json faces = Json::array();
  for (const Detection& d : p->faces) {
    auto v = m.embedder.embed_face(p->image, d);
    if (!v) return fail(v.status());
    Json face = face_json(d);
    Json embedding = Json::array();
    for (float x : *v) {
      char buf[24];
      std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(x));
      embedding.push_back(std::strtod(buf, nullptr));
    }
    face["embedding"] = std::move(embedding);
    faces.push_back(std::move(face));
  }
  const ModelInfo& info = m.embedder.info();
  print_json(Json{{"path", a.image}, {"model", info.name}, {"dim", info.dim}, {"faces", std::move(faces)}});
  return kExitOk;
}

int run_compare(const CompareArgs& a, const Models& m) {
  std::vector<float> v[2];
  const std::string* paths[2] = {&a.a, &a.b};
  for (int i = 0; i < 2; ++i) {  // the best-scoring face of each photo
    auto p = detect_photo(m.detector, *paths[i]);
    if (!p) return fail(p.status());
    if (p->faces.empty()) return fail(kExitFailure, *paths[i] + ": no face found");
    auto e = m.embedder.embed_face(p->image, p->faces[0]);
    if (!e) return fail(e.status());
    v[i] = std::move(*e);
  }
  const auto sim = cosine_similarity(v[0], v[1]);
  if (!sim) return fail(kExitFailure, "embeddings are not comparable");
  const ModelInfo& info = m.embedder.info();
  std::printf("similarity %.4f (%s)", static_cast<double>(*sim), info.name.c_str());
  if (info.match > 0)
    std::printf(": %s (threshold %.2f)\n", *sim >= info.match ? "same person" : "different people",
                static_cast<double>(info.match));
  else
    std::printf(": this model has no match threshold\n");
  return kExitOk;
}

void add_model_options(CLI::App* cmd, ModelArgs& m) {
  cmd->add_option(
      "--detector", m.detector,
      std::string("YuNet ONNX (default: $FACETRACE_MODELS/") + kDetectorFile + ", else the built-in one)");
  cmd->add_option("--embedder", m.embedder, "embedder ONNX (default: $FACETRACE_MODELS)");
  cmd->add_option("--threads", m.threads, "threads (0 = all)")->capture_default_str();
}

}  // namespace

void register_faces(CLI::App& app, int& exit_code) {
  auto* faces = app.add_subcommand("faces", "face detection (YuNet) and embeddings on the CPU");
  faces->require_subcommand(1);

  auto da = std::make_shared<DetectArgs>();
  auto* detect = faces->add_subcommand("detect", "find faces: boxes, scores and 5 landmarks in image pixels");
  detect->add_option("images", da->images, "JPEG or PNG photos")->required();
  detect->add_option("--model", da->model,
                     std::string("YuNet ONNX (default: $FACETRACE_MODELS/") + kDetectorFile +
                         ", else the built-in YuNet 2023mar)");
  detect->add_option("--score", da->score, "minimum score (0..1)")->capture_default_str();
  detect->add_flag("--json", da->json, "print JSON");
  detect->add_option("--annotate", da->annotate, "write a PNG with boxes and landmarks (one image only)");
  detect->add_option("--threads", da->threads, "threads (0 = all)")->capture_default_str();
  detect->callback([da, &exit_code] { exit_code = run_detect(*da); });

  auto ea = std::make_shared<EmbedArgs>();
  auto* embed = faces->add_subcommand("embed", "unit-norm embeddings of every face, as JSON");
  embed->add_option("image", ea->image, "JPEG or PNG photo")->required();
  add_model_options(embed, ea->models);
  embed->callback([ea, &exit_code] {
    exit_code = with_models(ea->models, [&](const Models& m) { return run_embed(*ea, m); });
  });

  auto ca = std::make_shared<CompareArgs>();
  auto* compare =
      faces->add_subcommand("compare", "cosine similarity of the best face in each of two photos");
  compare->add_option("a", ca->a, "first photo")->required();
  compare->add_option("b", ca->b, "second photo")->required();
  add_model_options(compare, ca->models);
  compare->callback([ca, &exit_code] {
    exit_code = with_models(ca->models, [&](const Models& m) { return run_compare(*ca, m); });
  });
}

}  // namespace facetrace::cli
