/// @file
/// `facetrace faces detect|embed|compare`: YuNet detection and aligned embeddings over many photos (files, folders,
/// @lists) in batches, streamed as JSON lines, on the CPU or the GPU accelerator; face comparison (docs/faces.md).
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <new>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/env.h"
#include "facetrace/core/file.h"
#include "facetrace/core/image.h"
#include "facetrace/core/parallel.h"
#include "facetrace/core/text.h"
#include "facetrace/faces/accelerator.h"
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
constexpr int kMaxBatch = 256;
constexpr std::size_t kProgressMinImages = 16;     // fewer images: no progress line
constexpr std::uint64_t kMaxListBytes = 64 << 20;  // an @list file

// ---- inputs -----------------------------------------------------------------------------------------

/// What every multi-photo command takes.
struct BatchArgs {
  std::vector<std::string> paths;
  std::string device = "auto";
  int batch = 8;
  std::string input_size = "640";
  bool quiet = false;
};

struct DetectArgs {
  BatchArgs run;
  std::string model, annotate, annotate_dir;
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
  BatchArgs run;
  ModelArgs models;
  float score = 0.6f;
};

struct CompareArgs {
  std::string a, b;
  std::string device = "auto";
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

void warn(const std::string& what) { std::fprintf(stderr, "facetrace faces: warning: %s\n", what.c_str()); }

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
  return invalid_argument("FACETRACE_MODELS=" + core::printable(*dir) + " holds none of: " + list +
                          " (or pass --embedder PATH)");
}

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

/// A folder's JPEG and PNG files (by extension, not recursive), sorted by name; anything else: the path itself.
Status expand_path(const std::string& path, std::vector<std::string>& out) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    out.push_back(path);  // missing or unreadable files become error records when loaded
    return {};
  }
  std::vector<std::string> found;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (std::error_code fe; it->is_regular_file(fe) && is_image_name(it->path()))
      found.push_back(it->path().string());
  if (ec) return invalid_argument("folder '" + core::printable(path) + "': " + ec.message());
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
  return {};
}

/// Files, folders and @lists (one path a line, relative to the current directory; blank lines skipped) → the
/// photos in order. kInvalidArgument for an unreadable list or folder, or when nothing is left.
Expected<std::vector<std::string>> expand_inputs(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    if (a.size() > 1 && a[0] == '@') {
      auto bytes = core::read_file(a.substr(1), kMaxListBytes);
      if (!bytes) return invalid_argument("list " + core::printable(a) + ": " + bytes.status().what());
      std::string line;
      auto flush = [&]() -> Status {
        while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t'))
          line.pop_back();
        Status st = line.empty() ? Status{} : expand_path(line, out);
        line.clear();
        return st;
      };
      for (std::uint8_t c : *bytes) {
        if (c != '\n') {
          line.push_back(static_cast<char>(c));
          continue;
        }
        if (Status st = flush(); !st.ok()) return st;
      }
      if (Status st = flush(); !st.ok()) return st;
    } else {
      if (Status st = expand_path(a, out); !st.ok()) return st;
    }
  }
  if (out.empty())
    return invalid_argument(
        "no photos found in the given paths (folders are searched for .jpg, "
        ".jpeg and .png files)");
  return out;
}

/// `--input-size`: "native", or the detector's own letterbox side.
Expected<DetectInput> parse_input_size(const std::string& text, const Detector& det) {
  if (text == "native") return DetectInput::kNative;
  if (text == std::to_string(det.input_size())) return DetectInput::kLetterbox;
  return invalid_argument("--input-size " + core::printable(text) + ": expected " +
                          std::to_string(det.input_size()) + " (the detector's letterbox side) or native");
}

/// Attaches the GPU accelerator to `nets` as `--device` says (cpu: never touches the GPU). gpu: any failure is
/// returned (exit 1); auto: the first failure is one warning and the CPU does the work.
Status attach_device(const std::string& device, std::initializer_list<Net> nets, bool quiet) {
  if (device == "cpu") return {};
  const bool required = device == "gpu";
  auto refuse = [&](const Status& why) -> Status {
    if (required) return Status(why.code(), "--device gpu: " + why.what());
    warn("GPU not used (" + why.what() + "); running on the CPU");
    return {};
  };
  auto acc = make_gpu_accelerator(GpuAcceleratorOptions::from_env());
  if (!acc) return refuse(acc.status());
  for (Net net : nets) {  // a Net is a handle: attaching to the copy attaches the model's shared state
    if (Status st = net.attach_checked(*acc); !st.ok()) {
      for (Net other : nets) other.detach();
      return refuse(st);
    }
  }
  if (!quiet) std::fprintf(stderr, "facetrace faces: on %s\n", (*acc)->device().c_str());
  return {};
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

/// One compact JSON line on stdout, flushed (a consumer sees each photo as it is done); bytes that are not UTF-8
/// (a path) are replaced rather than refused.
void print_json(const Json& j) {
  std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  std::fflush(stdout);
}

Json error_json(const std::string& path, const Status& st) {
  return Json{{"path", path}, {"error", st.what()}, {"code", std::string(code_name(st.code()))}};
}

void print_faces_text(const std::string& path, const core::Image& im, const std::vector<Detection>& found) {
  std::printf("%s (%dx%d): %zu face%s\n", core::printable(path).c_str(), im.width, im.height, found.size(),
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
  std::fflush(stdout);
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

/// Annotation file names in `--annotate-dir`: DIR/<stem>.png, with -2, -3, … for a stem seen before in this run.
class AnnotationNames {
 public:
  explicit AnnotationNames(std::string dir) : dir_(std::move(dir)) {}
  std::string next(const std::string& photo) {
    const std::string stem = fs::path(photo).stem().string();
    std::string name = stem + ".png";
    for (int k = 2; !used_.insert(name).second; ++k) name = stem + "-" + std::to_string(k) + ".png";
    return (fs::path(dir_) / name).string();
  }

 private:
  std::string dir_;
  std::set<std::string> used_;
};

/// The progress line on stderr for long runs: rewritten in place on a terminal, else one line per 10 %.
class Progress {
 public:
  Progress(std::size_t total, bool quiet)
      : total_(total), on_(!quiet && total >= kProgressMinImages), tty_(::isatty(STDERR_FILENO) == 1) {}
  void update(std::size_t done, std::size_t faces, std::size_t failed) {
    if (!on_) return;
    const std::size_t decile = done * 10 / total_;
    if (!tty_ && decile == last_decile_) return;
    last_decile_ = decile;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::fprintf(stderr, "%sfacetrace faces: %zu/%zu photos (%zu%%), %zu faces, %zu failed, %.1f photos/s%s",
                 tty_ ? "\r" : "", done, total_, done * 100 / total_, faces, failed,
                 s > 0 ? static_cast<double>(done) / s : 0.0, tty_ ? "   " : "\n");
    if (tty_ && done == total_) std::fputc('\n', stderr);
    std::fflush(stderr);
  }

 private:
  std::size_t total_;
  bool on_, tty_;
  std::size_t last_decile_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// ---- batches ----------------------------------------------------------------------------------------

/// A photo of the current batch: its path and, once loaded and detected, the image and faces or the error.
struct Item {
  std::string path;
  Expected<core::Image> image{internal_error("not loaded")};
  Expected<std::vector<Detection>> faces{internal_error("not detected")};
};

/// Loads `paths` (in parallel, one thread per photo) and detects faces in those that loaded, one detect_batch.
std::vector<Item> load_and_detect(std::span<const std::string> paths, const Detector& det,
                                  const DetectOptions& options, int threads) {
  std::vector<Item> items(paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) items[i].path = paths[i];
  core::parallel_for(static_cast<std::int64_t>(items.size()), threads, [&](std::int64_t i) {
    Item& it = items[static_cast<std::size_t>(i)];
    try {
      it.image = core::load_image(it.path);
    } catch (const std::bad_alloc&) {
      it.image = Status(Code::kOutOfMemory, core::quoted(it.path) + ": out of memory");
    }
  });
  std::vector<core::Image> images;
  std::vector<std::size_t> loaded;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (items[i].image) {
      loaded.push_back(i);
      images.push_back(std::move(*items[i].image));
    }
  auto found = det.detect_batch(images, options);
  for (std::size_t k = 0; k < loaded.size(); ++k) {
    Item& it = items[loaded[k]];
    it.image = std::move(images[k]);
    if (found[k])
      it.faces = std::move(found[k]);
    else
      it.faces = found[k].status().with_context(core::quoted(it.path));
  }
  return items;
}

/// Runs every photo of `paths` through load_and_detect in batches of `a.batch`, calling `emit(item)` for each in
/// order; emit returns the number of faces it reported, or nullopt when the photo failed. Returns 0, or 1 if any
/// failed.
template <class Emit>
int run_batches(const BatchArgs& a, const std::vector<std::string>& paths, const Detector& det,
                const DetectOptions& options, int threads, Emit&& emit) {
  Progress progress(paths.size(), a.quiet);
  std::size_t done = 0, faces = 0, failed = 0;
  const std::size_t step = static_cast<std::size_t>(a.batch);
  for (std::size_t first = 0; first < paths.size(); first += step) {
    const std::size_t n = std::min(step, paths.size() - first);
    for (Item& it : load_and_detect(std::span(paths).subspan(first, n), det, options, threads)) {
      const std::optional<std::size_t> r = emit(it);
      if (r)
        faces += *r;
      else
        ++failed;
    }
    done += n;
    progress.update(done, faces, failed);
  }
  return failed == 0 ? kExitOk : kExitFailure;
}

/// The shared start of detect and embed: the photo list, the batch size and the input size.
struct Prepared {
  std::vector<std::string> paths;
  DetectOptions options;
};

Expected<Prepared> prepare(const BatchArgs& a, const Detector& det, float score) {
  Prepared p;
  auto input = parse_input_size(a.input_size, det);
  if (!input) return input.status();
  p.options.input = *input;
  p.options.score = score;
  auto paths = expand_inputs(a.paths);
  if (!paths) return paths.status();
  p.paths = std::move(*paths);
  return p;
}

// ---- the commands -----------------------------------------------------------------------------------

int run_detect(const DetectArgs& a) {
  auto det = open_detector(a.model, a.threads);
  if (!det) return fail(det.status());
  auto p = prepare(a.run, *det, a.score);
  if (!p) return fail(kExitBadInput, p.status().what());
  if (!a.annotate.empty() && p->paths.size() != 1)
    return fail(kExitBadInput, "--annotate takes exactly one photo (use --annotate-dir for many)");
  if (!a.annotate_dir.empty()) {
    std::error_code ec;
    fs::create_directories(a.annotate_dir, ec);
    if (ec || !fs::is_directory(a.annotate_dir))  // an output that cannot be: bad input, as check_outputs
      return fail(kExitBadInput, "--annotate-dir " + core::printable(a.annotate_dir) + ": " +
                                     (ec ? ec.message() : std::string("not a folder")));
  }
  // Every annotation checked before the first photo (core/file.h check_outputs): none may be a photo or the
  // model (`--annotate-dir` over a folder of PNGs), a FIFO, a directory or unwritable.
  if (!a.annotate.empty() || !a.annotate_dir.empty()) {
    std::vector<core::NamedPath> inputs, outputs;
    for (const std::string& photo : p->paths) inputs.push_back({"photo", photo});
    if (!a.model.empty()) inputs.push_back({"--model", a.model});
    if (!a.annotate.empty()) outputs.push_back({"--annotate", a.annotate});
    AnnotationNames planned(a.annotate_dir);  // the same names, in the same order, as the run below
    if (!a.annotate_dir.empty())
      for (const std::string& photo : p->paths) outputs.push_back({"--annotate-dir", planned.next(photo)});
    if (Status st = core::check_outputs(inputs, outputs); !st.ok()) return fail(kExitBadInput, st.what());
  }
  if (Status st = attach_device(a.run.device, {det->net()}, a.run.quiet); !st.ok())
    return fail(kExitFailure, st.what());
  AnnotationNames names(a.annotate_dir);
  return run_batches(
      a.run, p->paths, *det, p->options, a.threads, [&](const Item& it) -> std::optional<std::size_t> {
        const Status& err = !it.image ? it.image.status() : it.faces.status();
        if (!it.image || !it.faces) {
          if (a.json)
            print_json(error_json(it.path, err));
          else
            std::fprintf(stderr, "facetrace faces: %s\n", err.to_string().c_str());
          return std::nullopt;
        }
        const core::Image& im = *it.image;
        Status wrote;
        if (!a.annotate.empty()) wrote = annotate(im, *it.faces, a.annotate);
        if (!a.annotate_dir.empty()) wrote = annotate(im, *it.faces, names.next(it.path));
        if (a.json) {
          Json faces = Json::array();
          for (const Detection& d : *it.faces) faces.push_back(face_json(d));
          Json rec{
              {"path", it.path}, {"width", im.width}, {"height", im.height}, {"faces", std::move(faces)}};
          if (!wrote.ok()) rec["error"] = wrote.what(), rec["code"] = std::string(code_name(wrote.code()));
          print_json(rec);
        } else {
          print_faces_text(it.path, im, *it.faces);
        }
        if (!wrote.ok()) {
          if (!a.json) std::fprintf(stderr, "facetrace faces: %s\n", wrote.to_string().c_str());
          return std::nullopt;
        }
        return it.faces->size();
      });
}

/// Rounded to 7 significant digits (what a float holds), as a JSON array.
Json embedding_json(const std::vector<float>& v) {
  Json e = Json::array();
  for (float x : v) {
    char buf[24];
    std::snprintf(buf, sizeof buf, "%.7g", static_cast<double>(x));
    e.push_back(std::strtod(buf, nullptr));
  }
  return e;
}

int run_embed(const EmbedArgs& a, const Detector& det, const Embedder& emb) {
  auto p = prepare(a.run, det, a.score);
  if (!p) return fail(kExitBadInput, p.status().what());
  if (Status st = attach_device(a.run.device, {det.net(), emb.net()}, a.run.quiet); !st.ok())
    return fail(kExitFailure, st.what());
  const ModelInfo& info = emb.info();
  return run_batches(
      a.run, p->paths, det, p->options, a.models.threads, [&](const Item& it) -> std::optional<std::size_t> {
        if (!it.image || !it.faces) {
          print_json(error_json(it.path, !it.image ? it.image.status() : it.faces.status()));
          return std::nullopt;
        }
        const auto vectors = emb.embed_faces(*it.image, *it.faces);  // every face of the photo in one run
        bool ok = true;
        for (std::size_t k = 0; k < vectors.size(); ++k) {
          Json rec{{"path", it.path}, {"face", k}};
          if (!vectors[k]) {
            rec["error"] = vectors[k].status().what();
            rec["code"] = std::string(code_name(vectors[k].status().code()));
            ok = false;
          } else {
            rec.update(face_json((*it.faces)[k]));
            rec["model"] = info.name;
            rec["dim"] = info.dim;
            rec["embedding"] = embedding_json(*vectors[k]);
          }
          print_json(rec);
        }
        return ok ? std::optional<std::size_t>(vectors.size()) : std::nullopt;
      });
}

/// A decoded photo and the faces found in it, best score first.
struct Photo {
  core::Image image;
  std::vector<Detection> faces;
};

Expected<Photo> detect_photo(const Detector& det, const std::string& path) {
  auto im = core::load_image(path);
  if (!im) return im.status();
  auto found = det.detect(*im);
  if (!found) return found.status();
  return Photo{std::move(*im), std::move(*found)};
}

int run_compare(const CompareArgs& a, const Detector& det, const Embedder& emb) {
  if (Status st = attach_device(a.device, {det.net(), emb.net()}, true); !st.ok())
    return fail(kExitFailure, st.what());
  std::vector<float> v[2];
  const std::string* paths[2] = {&a.a, &a.b};
  for (int i = 0; i < 2; ++i) {  // the best-scoring face of each photo
    auto p = detect_photo(det, *paths[i]);
    if (!p) return fail(p.status());
    if (p->faces.empty()) return fail(kExitFailure, *paths[i] + ": no face found");
    auto e = emb.embed_face(p->image, p->faces[0]);
    if (!e) return fail(e.status());
    v[i] = std::move(*e);
  }
  const auto sim = cosine_similarity(v[0], v[1]);
  if (!sim) return fail(kExitFailure, "embeddings are not comparable");
  const ModelInfo& info = emb.info();
  std::printf("similarity %.4f (%s)", static_cast<double>(*sim), info.name.c_str());
  if (info.match > 0)
    std::printf(": %s (threshold %.2f)\n", *sim >= info.match ? "same person" : "different people",
                static_cast<double>(info.match));
  else
    std::printf(": this model has no match threshold\n");
  return kExitOk;
}

/// Opens the detector and the embedder of `embed` / `compare` and runs `body(detector, embedder)`, or prints why
/// they cannot be opened and returns the exit code.
template <class Body>
int with_models(const ModelArgs& a, Body&& body) {
  auto det = open_detector(a.detector, a.threads);
  if (!det) return fail(det.status());
  auto path = embedder_path(a.embedder);
  if (!path) return fail(kExitBadInput, path.status().what());
  auto emb = Embedder::load(*path, a.threads);
  if (!emb) return fail(emb.status());
  return body(*det, *emb);
}

/// A finite number in [0, 1] (CLI11's Range lets NaN through: every comparison with it is false).
CLI::Validator unit_interval() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v) || v < 0.0 || v > 1.0)
          return "must be a number in [0, 1] (got '" + core::printable(s, 32) + "')";
        return {};
      },
      "[0, 1]");
}

/// Threads: 0 (all) up to 4096.
CLI::Validator thread_count() { return CLI::Range(0, 4096); }

void add_model_options(CLI::App* cmd, ModelArgs& m) {
  cmd->add_option(
      "--detector", m.detector,
      std::string("YuNet ONNX (default: $FACETRACE_MODELS/") + kDetectorFile + ", else the built-in one)");
  cmd->add_option("--embedder", m.embedder, "embedder ONNX (default: $FACETRACE_MODELS)");
  cmd->add_option("--threads", m.threads, "threads (0 = all)")->check(thread_count())->capture_default_str();
}

void add_device_option(CLI::App* cmd, std::string& device) {
  cmd->add_option("--device", device,
                  "auto: the GPU when it is usable, else the CPU with one warning; gpu: the GPU or exit 1; "
                  "cpu: never the GPU")
      ->check(CLI::IsMember({"auto", "cpu", "gpu"}))
      ->capture_default_str();
}

void add_batch_options(CLI::App* cmd, BatchArgs& b) {
  cmd->add_option("paths", b.paths,
                  "JPEG or PNG photos, folders of them (sorted by name), @list.txt (one a line)")
      ->required();
  add_device_option(cmd, b.device);
  cmd->add_option("--batch", b.batch, "photos per network run")
      ->check(CLI::Range(1, kMaxBatch))
      ->capture_default_str();
  cmd->add_option(
         "--input-size", b.input_size,
         "640: the photo scaled into the 640x640 letterbox; native: the photo at its own size, padded "
         "to multiples of 32 (OpenCV's FaceDetectorYN)")
      ->capture_default_str();
  cmd->add_flag("--quiet", b.quiet, "no progress line on stderr");
}

}  // namespace

void register_faces(CLI::App& app, int& exit_code) {
  auto* faces = app.add_subcommand("faces", "face detection (YuNet) and embeddings, on the CPU or the GPU");
  faces->require_subcommand(1);

  auto da = std::make_shared<DetectArgs>();
  auto* detect = faces->add_subcommand("detect", "find faces: boxes, scores and 5 landmarks in image pixels");
  add_batch_options(detect, da->run);
  detect->add_option("--model", da->model,
                     std::string("YuNet ONNX (default: $FACETRACE_MODELS/") + kDetectorFile +
                         ", else the built-in YuNet 2023mar)");
  detect->add_option("--score", da->score, "minimum score (0..1)")->check(unit_interval())->capture_default_str();
  detect->add_flag("--json", da->json, "one JSON line per photo");
  detect->add_option("--annotate", da->annotate, "write a PNG with boxes and landmarks (one photo only)");
  detect->add_option("--annotate-dir", da->annotate_dir,
                     "write DIR/<name>.png with boxes and landmarks for every photo");
  detect->add_option("--threads", da->threads, "threads (0 = all)")->check(thread_count())->capture_default_str();
  detect->callback([da, &exit_code] { exit_code = run_detect(*da); });

  auto ea = std::make_shared<EmbedArgs>();
  auto* embed = faces->add_subcommand("embed", "unit-norm embeddings of every face, one JSON line per face");
  add_batch_options(embed, ea->run);
  add_model_options(embed, ea->models);
  embed->add_option("--score", ea->score, "minimum detection score (0..1)")
      ->check(unit_interval())
      ->capture_default_str();
  embed->callback([ea, &exit_code] {
    exit_code =
        with_models(ea->models, [&](const Detector& d, const Embedder& e) { return run_embed(*ea, d, e); });
  });

  auto ca = std::make_shared<CompareArgs>();
  auto* compare =
      faces->add_subcommand("compare", "cosine similarity of the best face in each of two photos");
  compare->add_option("a", ca->a, "first photo")->required();
  compare->add_option("b", ca->b, "second photo")->required();
  add_model_options(compare, ca->models);
  add_device_option(compare, ca->device);
  compare->callback([ca, &exit_code] {
    exit_code =
        with_models(ca->models, [&](const Detector& d, const Embedder& e) { return run_compare(*ca, d, e); });
  });
}

}  // namespace facetrace::cli
