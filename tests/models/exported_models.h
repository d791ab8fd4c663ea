/// @file
/// Test support: the face networks exported with PyTorch's own ONNX exporter (tests/models/make_models.py, layout in
/// tests/models/README.md) and the check of a Net against PyTorch's reference outputs. The CPU test
/// (tests/unit/faces_exported_test.cpp) and a GPU variant share `check_exported_case`: it takes the Net, so a test
/// that attached an accelerator first runs the same comparison on the device. A test includes it as
/// "../models/exported_models.h" and defines FT_EXPORTED_MODELS_DIR (cmake/area_faces.cmake, faces_exported_test).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "facetrace/faces/net.h"
#include "facetrace/faces/sha256.h"

#ifndef FT_EXPORTED_MODELS_DIR
#error "FT_EXPORTED_MODELS_DIR (tests/models) must be defined by the build"
#endif

namespace facetrace::testing {

/// One output of a reference case: the whole batch, as PyTorch computed it.
struct ExportedOutput {
  std::string name;
  faces::Shape shape;  ///< [B, ...]
  std::vector<float> data;
  double max_abs = 0.0;  ///< max |ref| over the batch: the scale of the tolerance
};

/// One batch size of one model.
struct ExportedCase {
  int batch = 0;
  faces::Shape input_shape;  ///< [B, C, H, W]
  std::vector<float> input;
  std::vector<ExportedOutput> outputs;
};

/// One exported file of a model (the same weights at one opset).
struct ExportedFile {
  std::int64_t opset = 0;
  std::string path;
  std::string sha256;
};

struct ExportedModel {
  std::string name;
  std::string model_path;  ///< files[0].path, the default opset
  std::string sha256;
  std::vector<ExportedFile> files;  ///< the default opset first, then the manifest's "also" (other opsets)
  std::vector<ExportedCase> cases;  ///< shared by every file
};

/// The folder of the committed models (tests/models).
inline std::string exported_models_dir() { return FT_EXPORTED_MODELS_DIR; }

/// The models make_models.py commits; a test over them fails on a missing folder rather than shrinking silently.
inline const std::vector<std::string> kCommittedExportedModels = {
    "iresnet18_w8", "iresnet50_w16", "mobilefacenet_w05", "retinaface_mnet025", "scrfd_small", "yunet_style"};

/// The models in `root` (default tests/models): every sub-folder holding a manifest.json, sorted by name.
inline std::vector<std::string> exported_model_names(const std::string& root = exported_models_dir()) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "manifest.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace detail {

inline bool read_bytes(const std::string& path, std::vector<std::uint8_t>& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

inline std::int64_t elements(const faces::Shape& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

/// Raw little-endian float32 (the machines the tests run on are little-endian).
inline ::testing::AssertionResult read_f32(const std::string& path, std::int64_t count,
                                           std::vector<float>& out) {
  std::vector<std::uint8_t> bytes;
  if (!read_bytes(path, bytes)) return ::testing::AssertionFailure() << "cannot read " << path;
  if (static_cast<std::int64_t>(bytes.size()) != count * 4)
    return ::testing::AssertionFailure() << path << ": " << bytes.size() << " bytes, want " << count * 4;
  out.resize(static_cast<std::size_t>(count));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return ::testing::AssertionSuccess();
}

}  // namespace detail

/// Reads <root>/<name>/manifest.json (root default tests/models) and every file it names; checks the model's sha256
/// against the manifest (a model regenerated without its references fails here, not with a numeric mismatch).
inline ::testing::AssertionResult load_exported_model(const std::string& name, ExportedModel& m,
                                                      const std::string& root = exported_models_dir()) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(root) / name;
  std::vector<std::uint8_t> bytes;
  if (!detail::read_bytes((dir / "manifest.json").string(), bytes))
    return ::testing::AssertionFailure() << "cannot read " << (dir / "manifest.json");
  const auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  if (j.is_discarded()) return ::testing::AssertionFailure() << name << ": manifest.json is not JSON";
  try {
    m.name = j.at("name").get<std::string>();
    m.files.push_back({j.at("opset").get<std::int64_t>(), (dir / j.at("model").get<std::string>()).string(),
                       j.at("sha256").get<std::string>()});
    for (const auto& a : j.value("also", nlohmann::json::array()))
      m.files.push_back({a.at("opset").get<std::int64_t>(), (dir / a.at("model").get<std::string>()).string(),
                         a.at("sha256").get<std::string>()});
    m.model_path = m.files[0].path;
    m.sha256 = m.files[0].sha256;
    for (const auto& f : m.files) {
      std::vector<std::uint8_t> model;
      if (!detail::read_bytes(f.path, model))
        return ::testing::AssertionFailure() << "cannot read " << f.path;
      const std::string got = faces::sha256_hex(model);
      if (got != f.sha256)
        return ::testing::AssertionFailure()
               << f.path << ": sha256 " << got << ", the manifest says " << f.sha256;
    }
    for (const auto& jc : j.at("cases")) {
      ExportedCase c;
      c.batch = jc.at("batch").get<int>();
      c.input_shape = jc.at("input_shape").get<faces::Shape>();
      auto r = detail::read_f32((dir / jc.at("input").get<std::string>()).string(),
                                detail::elements(c.input_shape), c.input);
      if (!r) return r;
      for (const auto& jo : jc.at("outputs")) {
        ExportedOutput o;
        o.name = jo.at("name").get<std::string>();
        o.shape = jo.at("shape").get<faces::Shape>();
        r = detail::read_f32((dir / jo.at("file").get<std::string>()).string(), detail::elements(o.shape),
                             o.data);
        if (!r) return r;
        for (float v : o.data) o.max_abs = std::max(o.max_abs, static_cast<double>(std::abs(v)));
        c.outputs.push_back(std::move(o));
      }
      m.cases.push_back(std::move(c));
    }
  } catch (const nlohmann::json::exception& e) {
    return ::testing::AssertionFailure() << name << ": manifest.json: " << e.what();
  }
  if (m.cases.empty()) return ::testing::AssertionFailure() << name << ": no cases in manifest.json";
  return ::testing::AssertionSuccess();
}

/// The bar of issue 11 for exported models: every element within 1e-4 + 1e-4·max|ref| of PyTorch.
inline double exported_tolerance(const ExportedOutput& o) { return 1e-4 + 1e-4 * o.max_abs; }

namespace detail {

/// Compares `got` (the outputs of `count` images starting at image `first` of case `c`, batch first) with the
/// reference slice; appends what is off to `report`.
inline bool compare_slice(std::ostringstream& report, const std::string& label,
                          const std::vector<faces::NamedTensor>& got, const ExportedCase& c,
                          std::int64_t first, std::int64_t count) {
  if (got.size() != c.outputs.size()) {
    report << " " << label << ": " << got.size() << " outputs, want " << c.outputs.size() << ";";
    return false;
  }
  bool ok = true;
  for (std::size_t o = 0; o < c.outputs.size(); ++o) {
    const ExportedOutput& want = c.outputs[o];
    const faces::NamedTensor& t = got[o];
    faces::Shape want_shape = want.shape;
    want_shape[0] = count;
    if (t.name != want.name || t.shape != want_shape) {
      report << " " << label << " output " << o << ": got '" << t.name << "' of "
             << ::testing::PrintToString(t.shape) << ", want '" << want.name << "' of "
             << ::testing::PrintToString(want_shape) << ";";
      ok = false;
      continue;
    }
    const std::size_t n1 = want.data.size() / static_cast<std::size_t>(c.batch);
    const std::size_t n = n1 * static_cast<std::size_t>(count);
    const std::span<const float> ref(want.data.data() + static_cast<std::size_t>(first) * n1, n);
    const double tol = exported_tolerance(want);
    double worst = 0.0;
    std::size_t worst_i = 0;
    for (std::size_t i = 0; i < n && i < t.data.size(); ++i) {
      const double d = std::abs(static_cast<double>(t.data[i]) - static_cast<double>(ref[i]));
      if (!(d <= worst)) worst = d, worst_i = i;  // NaN counts as the worst
    }
    if (t.data.size() != n || !(worst <= tol)) {
      report << " " << label << " '" << want.name << "': max |got - ref| " << worst << " at " << worst_i
             << " (got " << (worst_i < t.data.size() ? t.data[worst_i] : NAN) << ", ref " << ref[worst_i]
             << "), allowed " << tol << ", " << t.data.size() << " values for " << n << ";";
      ok = false;
    }
  }
  return ok;
}

}  // namespace detail

/// Runs `c` through `net` and compares every output with PyTorch's. Batch 1 goes through Net::run; batch B > 1
/// through Net::run_batch (B images of shape [1, C, H, W], each compared with its slice of the reference) and through
/// Net::run with the batch shape [B, C, H, W] (the outputs [B, ...] compared whole). The failure message names the
/// model, the path, the image, the output and the worst element.
inline ::testing::AssertionResult check_exported_case(const faces::Net& net, const ExportedModel& m,
                                                      const ExportedCase& c) {
  const std::int64_t b_count = c.batch;
  faces::Shape one = c.input_shape;
  one[0] = 1;
  const auto per_image = static_cast<std::size_t>(detail::elements(one));
  if (b_count < 1 || c.input.size() != per_image * static_cast<std::size_t>(b_count))
    return ::testing::AssertionFailure() << m.name << ": input holds " << c.input.size() << " floats";
  std::ostringstream report;
  bool ok = true;
  const std::string tag = "B=" + std::to_string(b_count);
  if (b_count > 1) {
    std::vector<std::span<const float>> inputs;
    for (std::int64_t b = 0; b < b_count; ++b)
      inputs.emplace_back(c.input.data() + static_cast<std::size_t>(b) * per_image, per_image);
    auto r = net.run_batch(inputs, one);
    if (!r) {
      report << " " << tag << " Net::run_batch failed: " << r.status().to_string() << ";";
      ok = false;
    } else if (static_cast<std::int64_t>(r->size()) != b_count) {
      report << " " << tag << " Net::run_batch: " << r->size() << " results;";
      ok = false;
    } else {
      for (std::int64_t b = 0; b < b_count; ++b)
        ok &= detail::compare_slice(report, tag + " run_batch image " + std::to_string(b), (*r)[b], c, b, 1);
    }
  }
  auto r = net.run(c.input, c.input_shape);
  if (!r) {
    report << " " << tag << " Net::run " << ::testing::PrintToString(c.input_shape)
           << " failed: " << r.status().to_string() << ";";
    ok = false;
  } else {
    ok &= detail::compare_slice(report, tag + " run", *r, c, 0, b_count);
  }
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << m.name << ":" << report.str();
}

}  // namespace facetrace::testing
