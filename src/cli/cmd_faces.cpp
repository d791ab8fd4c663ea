/// @file
/// `facetrace faces detect|embed|compare`: YuNet detection, aligned embeddings and face comparison on the CPU.
#include <cstdio>
#include <functional>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "facetrace/core/env.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"
#include "facetrace/core/image.h"

namespace facetrace::cli {
namespace {

namespace fs = std::filesystem;
using namespace facetrace::faces;

constexpr const char* kDetectorFile = "face_detection_yunet_2023mar.onnx";
// Embedders looked for in FACETRACE_MODELS, in order of preference.
constexpr const char* kEmbedderFiles[] = {"face_recognition_sface_2021dec.onnx", "glintr100.onnx",
                                          "mobilefacenet_foamliu_128d.onnx"};

struct Failure {
  int code;
  std::string what;
};

// A model path: the flag, else FACETRACE_MODELS/<file> (first existing of `files`).
std::string model_path(const std::string& flag, const char* flag_name, std::initializer_list<const char*> files) {
  if (!flag.empty()) return flag;
  const auto dir = core::env_string("FACETRACE_MODELS");
  if (!dir)
    throw Failure{2, std::string("no model given: pass ") + flag_name +
                         " PATH or set FACETRACE_MODELS to a folder holding " + *files.begin()};
  for (const char* f : files) {
    const fs::path p = fs::path(*dir) / f;
    if (fs::exists(p)) return p.string();
  }
  std::string list;
  for (const char* f : files) list += (list.empty() ? "" : ", ") + std::string(f);
  throw Failure{2, "FACETRACE_MODELS=" + *dir + " holds none of: " + list + " (or pass " + flag_name + " PATH)"};
}

template <class T>
T take(Expected<T> e, int code = 1) {
  if (!e) throw Failure{e.status().code() == Code::kInvalidArgument || e.status().code() == Code::kIo ? 2 : code,
                        e.status().to_string()};
  return std::move(*e);
}

std::string fmt(double v, int digits = 2) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string json_str(const std::string& s) {
  std::string r = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') r += '\\', r += c;
    else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      r += buf;
    } else r += c;
  }
  return r + "\"";
}

std::string face_json(const Detection& d) {
  std::string s = "{\"score\":" + fmt(d.score, 4) + ",\"box\":[" + fmt(d.x0) + "," + fmt(d.y0) + "," +
                  fmt(d.x1) + "," + fmt(d.y1) + "],\"landmarks\":[";
  for (std::size_t k = 0; k < 5; ++k)
    s += (k ? ",[" : "[") + fmt(d.landmarks[k].x) + "," + fmt(d.landmarks[k].y) + "]";
  return s + "]}";
}

void annotate(const core::Image& photo, const std::vector<Detection>& faces, const std::string& out) {
  core::Image im = photo;
  const int t = std::max(2, std::min(im.width, im.height) / 300);
  for (const auto& d : faces) {
    core::draw_rect(im, d.x0, d.y0, d.x1, d.y1, 0, 255, 0, t);
    const std::uint8_t colors[5][3] = {{255, 0, 0}, {0, 0, 255}, {0, 255, 0}, {255, 0, 255}, {0, 255, 255}};
    for (std::size_t k = 0; k < 5; ++k)
      core::draw_dot(im, d.landmarks[k].x, d.landmarks[k].y, t, colors[k][0], colors[k][1], colors[k][2]);
  }
  if (Status s = core::write_png(out, im); !s.ok()) throw Failure{1, s.to_string()};
}

// The best-scoring face of a photo, embedded.
std::vector<float> embed_best(const Detector& det, const Embedder& emb, const std::string& path, Detection* face) {
  const core::Image im = take(core::load_image(path));
  const auto faces = take(det.detect(im));
  if (faces.empty()) throw Failure{1, path + ": no face found"};
  *face = faces[0];
  return take(emb.embed_face(im, faces[0]));
}

int guarded(const std::function<void()>& f) {
  try {
    f();
    return 0;
  } catch (const Failure& e) {
    std::fprintf(stderr, "facetrace faces: %s\n", e.what.c_str());
    return e.code;
  }
}

}  // namespace

void register_faces(CLI::App& app, int& exit_code) {
  auto* faces = app.add_subcommand("faces", "face detection (YuNet) and embeddings on the CPU");
  faces->require_subcommand(1);

  struct DetectArgs {
    std::vector<std::string> images;
    std::string model, annotate;
    float score = 0.6f;
    bool json = false;
    int threads = 0;
  };
  auto da = std::make_shared<DetectArgs>();
  auto* detect = faces->add_subcommand("detect", "find faces: boxes, scores and 5 landmarks in image pixels");
  detect->add_option("images", da->images, "JPEG or PNG photos")->required();
  detect->add_option("--model", da->model, "YuNet 2023mar ONNX (default: $FACETRACE_MODELS/" + std::string(kDetectorFile) + ")");
  detect->add_option("--score", da->score, "minimum score (0..1)")->capture_default_str();
  detect->add_flag("--json", da->json, "print JSON");
  detect->add_option("--annotate", da->annotate, "write a PNG with boxes and landmarks (one image only)");
  detect->add_option("--threads", da->threads, "threads (0 = all)")->capture_default_str();
  detect->callback([da, &exit_code] {
    exit_code = guarded([&] {
      if (!da->annotate.empty() && da->images.size() != 1) throw Failure{2, "--annotate takes exactly one image"};
      DetectorConfig cfg;
      cfg.threads = da->threads;
      const Detector det = take(Detector::load(model_path(da->model, "--model", {kDetectorFile}), cfg));
      DetectOptions opt;
      opt.score = da->score;
      std::string json = "{\"images\":[";
      for (std::size_t i = 0; i < da->images.size(); ++i) {
        const std::string& path = da->images[i];
        const core::Image im = take(core::load_image(path));
        const auto found = take(det.detect(im, opt));
        if (da->json) {
          json += (i ? "," : "") + std::string("{\"path\":") + json_str(path) + ",\"width\":" + std::to_string(im.width) +
                  ",\"height\":" + std::to_string(im.height) + ",\"faces\":[";
          for (std::size_t k = 0; k < found.size(); ++k) json += (k ? "," : "") + face_json(found[k]);
          json += "]}";
        } else {
          std::printf("%s (%dx%d): %zu face%s\n", path.c_str(), im.width, im.height, found.size(),
                      found.size() == 1 ? "" : "s");
          for (std::size_t k = 0; k < found.size(); ++k) {
            const Detection& d = found[k];
            std::printf("  face %zu: score %.3f box [%.1f, %.1f, %.1f, %.1f] eyes (%.1f, %.1f) (%.1f, %.1f) nose (%.1f, %.1f)"
                        " mouth (%.1f, %.1f) (%.1f, %.1f)\n",
                        k, d.score, d.x0, d.y0, d.x1, d.y1, d.landmarks[0].x, d.landmarks[0].y, d.landmarks[1].x,
                        d.landmarks[1].y, d.landmarks[2].x, d.landmarks[2].y, d.landmarks[3].x, d.landmarks[3].y,
                        d.landmarks[4].x, d.landmarks[4].y);
          }
        }
        if (!da->annotate.empty()) annotate(im, found, da->annotate);
      }
      if (da->json) std::printf("%s]}\n", json.c_str());
    });
  });

  struct EmbedArgs {
    std::string image, detector, embedder;
    int threads = 0;
  };
  auto ea = std::make_shared<EmbedArgs>();
  auto* embed = faces->add_subcommand("embed", "unit-norm embeddings of every face, as JSON");
  embed->add_option("image", ea->image, "JPEG or PNG photo")->required();
  embed->add_option("--detector", ea->detector, "YuNet ONNX (default: $FACETRACE_MODELS)");
  embed->add_option("--embedder", ea->embedder, "embedder ONNX (default: $FACETRACE_MODELS)");
  embed->add_option("--threads", ea->threads, "threads (0 = all)")->capture_default_str();
  embed->callback([ea, &exit_code] {
    exit_code = guarded([&] {
      DetectorConfig cfg;
      cfg.threads = ea->threads;
      const Detector det = take(Detector::load(model_path(ea->detector, "--detector", {kDetectorFile}), cfg));
      const Embedder emb = take(Embedder::load(
          model_path(ea->embedder, "--embedder", {kEmbedderFiles[0], kEmbedderFiles[1], kEmbedderFiles[2]}),
          ea->threads));
      const core::Image im = take(core::load_image(ea->image));
      const auto found = take(det.detect(im));
      std::string json = "{\"path\":" + json_str(ea->image) + ",\"model\":" + json_str(emb.info().name) +
                         ",\"dim\":" + std::to_string(emb.info().dim) + ",\"faces\":[";
      for (std::size_t k = 0; k < found.size(); ++k) {
        const auto v = take(emb.embed_face(im, found[k]));
        std::string f = face_json(found[k]);
        f.pop_back();
        f += ",\"embedding\":[";
        for (std::size_t i = 0; i < v.size(); ++i) {
          char buf[24];
          std::snprintf(buf, sizeof buf, "%s%.7g", i ? "," : "", static_cast<double>(v[i]));
          f += buf;
        }
        json += (k ? "," : "") + f + "]}";
      }
      std::printf("%s]}\n", json.c_str());
    });
  });

  struct CompareArgs {
    std::string a, b, detector, embedder;
    int threads = 0;
  };
  auto ca = std::make_shared<CompareArgs>();
  auto* compare = faces->add_subcommand("compare", "cosine similarity of the best face in each of two photos");
  compare->add_option("a", ca->a, "first photo")->required();
  compare->add_option("b", ca->b, "second photo")->required();
  compare->add_option("--detector", ca->detector, "YuNet ONNX (default: $FACETRACE_MODELS)");
  compare->add_option("--embedder", ca->embedder, "embedder ONNX (default: $FACETRACE_MODELS)");
  compare->add_option("--threads", ca->threads, "threads (0 = all)")->capture_default_str();
  compare->callback([ca, &exit_code] {
    exit_code = guarded([&] {
      DetectorConfig cfg;
      cfg.threads = ca->threads;
      const Detector det = take(Detector::load(model_path(ca->detector, "--detector", {kDetectorFile}), cfg));
      const Embedder emb = take(Embedder::load(
          model_path(ca->embedder, "--embedder", {kEmbedderFiles[0], kEmbedderFiles[1], kEmbedderFiles[2]}),
          ca->threads));
      Detection fa, fb;
      const auto va = embed_best(det, emb, ca->a, &fa);
      const auto vb = embed_best(det, emb, ca->b, &fb);
      const auto sim = cosine_similarity(va, vb);
      if (!sim) throw Failure{1, "embeddings are not comparable"};
      std::printf("similarity %.4f (%s)", static_cast<double>(*sim), emb.info().name.c_str());
      if (emb.info().match > 0)
        std::printf(": %s (threshold %.2f)\n", *sim >= emb.info().match ? "same person" : "different people",
                    static_cast<double>(emb.info().match));
      else
        std::printf(": this model has no match threshold\n");
    });
  });
}

}  // namespace facetrace::cli
