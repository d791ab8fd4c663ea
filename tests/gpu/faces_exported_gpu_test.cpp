/// @file
/// The exported face networks and the built-in YuNet on the real device runtime (issue 11; docs/design/faces.md §4,
/// §8): every committed PyTorch export (tests/models/README.md, plus FACETRACE_EXPORTED_MODELS=DIR ones) with the GPU
/// accelerator attached through make_gpu_accelerator and Net::attach_checked is within 1e-4 + 1e-4·max|ref| of
/// PyTorch at batch 1 and 4 (check_exported_case, the same comparison as the CPU test); the embedding models agree
/// with the CPU interpreter to a cosine of 0.99999; and YuNet on the five photos of tests/data/images finds the same
/// faces on the GPU as on the CPU, its raw outputs within the fp32 bar, a batch of 16 equal to 16 single runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/image.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/testing/counting_accelerator.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/net.h"
#include "../models/exported_models.h"
#include "gpu_skip.h"

namespace facetrace::faces {
namespace {

using ::facetrace::testing::check_exported_case;
using ::facetrace::testing::exported_model_names;
using ::facetrace::testing::ExportedModel;
using ::facetrace::testing::load_exported_model;

const std::vector<std::string>& kCommitted = ::facetrace::testing::kCommittedExportedModels;

/// The committed models: the build's tests/models, else ./tests/models (a copy of the tree run from its root, as on
/// the GPU machine).
std::string models_root() {
  const std::string built = ::facetrace::testing::exported_models_dir();
  if (std::filesystem::is_directory(built) || !std::filesystem::is_directory("tests/models")) return built;
  return "tests/models";
}

/// The photos: the build's tests/data/images, else $FACETRACE_TEST_DATA/images, else ./tests/data/images.
std::string photos_dir() {
  const std::string built = std::string(FT_TEST_DATA_DIR) + "/images/";
  if (std::filesystem::is_directory(built)) return built;
  if (const char* env = std::getenv("FACETRACE_TEST_DATA"); env && *env) return std::string(env) + "/images/";
  return "tests/data/images/";
}

using facetrace::faces::testing::CountingAccelerator;  // counts GPU runs and CPU fallbacks

/// A fresh GPU accelerator attached to `net` (fails the test when either step fails); null on failure.
std::shared_ptr<CountingAccelerator> attach_gpu(Net& net, const std::string& what) {
  auto acc = make_gpu_accelerator();
  EXPECT_TRUE(acc.ok()) << what << ": make_gpu_accelerator: " << acc.status().to_string();
  if (!acc.ok()) return nullptr;
  auto counting = std::make_shared<CountingAccelerator>(*acc);
  const Status st = net.attach_checked(counting);
  EXPECT_TRUE(st.ok()) << what << ": attach_checked: " << st.to_string();
  if (!st.ok() || !net.accelerator().has_value()) return nullptr;
  return counting;
}

/// Every program since the attach ran on the GPU.
void expect_all_on_gpu(const CountingAccelerator& acc, const std::string& what) {
  EXPECT_GT(acc.ran.load(), 0u) << what;
  EXPECT_EQ(acc.fell_back.load(), 0u) << what << ": runs handed back to the CPU";
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0.0, aa = 0.0, bb = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += static_cast<double>(a[i]) * b[i];
    aa += static_cast<double>(a[i]) * a[i];
    bb += static_cast<double>(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

/// Every file (opset) of `m` on the GPU against PyTorch's references; for an embedding model the per-image cosine
/// of the GPU's embedding with the CPU interpreter's.
void check_model_on_gpu(const ExportedModel& m) {
  for (const auto& f : m.files) {
    SCOPED_TRACE(m.name + " opset " + std::to_string(f.opset));
    auto gpu = Net::load(f.path);
    ASSERT_TRUE(gpu) << m.name << ": Net::load refused it: " << gpu.status().to_string();
    const auto acc = attach_gpu(*gpu, m.name);
    ASSERT_TRUE(acc) << m.name;
    for (const auto& c : m.cases) EXPECT_TRUE(check_exported_case(*gpu, m, c)) << "opset " << f.opset;
    expect_all_on_gpu(*acc, m.name);
    EXPECT_TRUE(gpu->accelerator().has_value())
        << m.name << ": detached while running: " << gpu->detach_reason().value_or("?");

    const auto outs = gpu->output_names();
    if (std::find(outs.begin(), outs.end(), "embedding") == outs.end()) continue;
    auto cpu = Net::load(f.path);
    ASSERT_TRUE(cpu);
    for (const auto& c : m.cases) {
      auto g = gpu->run(c.input, c.input_shape);
      auto r = cpu->run(c.input, c.input_shape);
      ASSERT_TRUE(g && r) << (g ? r.status() : g.status()).to_string();
      for (std::size_t o = 0; o < r->size(); ++o) {
        if ((*r)[o].name != "embedding") continue;
        const auto& gv = (*g)[o].data;
        const auto& rv = (*r)[o].data;
        ASSERT_EQ(gv.size(), rv.size());
        const std::size_t per = rv.size() / static_cast<std::size_t>(c.batch);
        for (int b = 0; b < c.batch; ++b) {
          const std::vector<float> gb(gv.begin() + b * per, gv.begin() + (b + 1) * per);
          const std::vector<float> rb(rv.begin() + b * per, rv.begin() + (b + 1) * per);
          EXPECT_GE(cosine(gb, rb), 0.99999) << m.name << " B=" << c.batch << " image " << b;
        }
      }
    }
  }
}

class FacesExportedGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(FacesExportedGpu, GpuMatchesPyTorch) {
  FT_REQUIRE_GPU();
  ExportedModel m;
  ASSERT_TRUE(load_exported_model(GetParam(), m, models_root()));
  std::vector<int> batches;
  for (const auto& c : m.cases) batches.push_back(c.batch);
  EXPECT_NE(std::find(batches.begin(), batches.end(), 1), batches.end()) << m.name << ": no batch-1 case";
  EXPECT_NE(std::find(batches.begin(), batches.end(), 4), batches.end()) << m.name << ": no batch-4 case";
  check_model_on_gpu(m);
}

INSTANTIATE_TEST_SUITE_P(Committed, FacesExportedGpu, ::testing::ValuesIn(kCommitted),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// Models generated on demand (`make_models.py --only iresnet100 --out DIR`, tests/models/README.md).
TEST(FacesExportedGpuEnv, OnDemandModelsFromEnvironment) {
  const char* root = std::getenv("FACETRACE_EXPORTED_MODELS");
  if (root == nullptr || *root == '\0') GTEST_SKIP() << "FACETRACE_EXPORTED_MODELS is not set";
  FT_REQUIRE_GPU();
  const auto names = exported_model_names(root);
  ASSERT_FALSE(names.empty()) << "no model folder (with manifest.json) in " << root;
  for (const auto& n : names) {
    SCOPED_TRACE(n);
    ExportedModel m;
    ASSERT_TRUE(load_exported_model(n, m, root));
    check_model_on_gpu(m);
  }
}

// ---- YuNet (the built-in 2023mar) on the photos --------------------------------------------------------------------

const std::vector<std::string> kPhotos = {"astronaut_eileen_collins.png", "biden_crop_2010.jpg",
                                          "obama_biden_kagan_crop_2010.jpg", "obama_congress_2009.jpg",
                                          "obama_portrait_2012.jpg"};

std::vector<core::Image> photos() {
  std::vector<core::Image> out;
  for (const auto& p : kPhotos) {
    auto im = core::load_image(photos_dir() + p);
    EXPECT_TRUE(im.ok()) << p << ": " << im.status().to_string();
    if (im.ok()) out.push_back(std::move(*im));
  }
  return out;
}

/// Same faces: the count, and every box, landmark and score within 1e-4 relative (of the photo's larger side for
/// coordinates, of 1 for the score).
void expect_same_detections(const std::vector<Detection>& got, const std::vector<Detection>& want, float side,
                            const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const float tol = 1e-4f * side;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const Detection& g = got[i];
    const Detection& w = want[i];
    EXPECT_NEAR(g.x0, w.x0, tol) << what << " face " << i;
    EXPECT_NEAR(g.y0, w.y0, tol) << what << " face " << i;
    EXPECT_NEAR(g.x1, w.x1, tol) << what << " face " << i;
    EXPECT_NEAR(g.y1, w.y1, tol) << what << " face " << i;
    EXPECT_NEAR(g.score, w.score, 1e-4f) << what << " face " << i;
    for (std::size_t k = 0; k < w.landmarks.size(); ++k) {
      EXPECT_NEAR(g.landmarks[k].x, w.landmarks[k].x, tol) << what << " face " << i << " landmark " << k;
      EXPECT_NEAR(g.landmarks[k].y, w.landmarks[k].y, tol) << what << " face " << i << " landmark " << k;
    }
  }
}

/// Every output within 1e-4 + 1e-3·max|want| of `want` (docs/design/faces.md §4, the fp32 bar).
void expect_outputs_within_bar(const std::vector<NamedTensor>& got, const std::vector<NamedTensor>& want,
                               const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t o = 0; o < want.size(); ++o) {
    ASSERT_EQ(got[o].name, want[o].name) << what;
    ASSERT_EQ(got[o].data.size(), want[o].data.size()) << what << " " << want[o].name;
    double max_want = 0.0, max_diff = 0.0;
    for (std::size_t i = 0; i < want[o].data.size(); ++i) {
      max_want = std::max(max_want, std::abs(static_cast<double>(want[o].data[i])));
      const double d = std::abs(static_cast<double>(got[o].data[i]) - want[o].data[i]);
      if (!(d <= max_diff)) max_diff = d;  // NaN counts as the worst
    }
    EXPECT_LE(max_diff, 1e-4 + 1e-3 * max_want) << what << " output " << want[o].name;
  }
}

TEST(FacesYunetGpu, PhotosGiveTheCpuDetectionsAndOutputs) {
  FT_REQUIRE_GPU();
  const auto ims = photos();
  ASSERT_EQ(ims.size(), kPhotos.size());
  auto cpu = Detector::builtin();
  auto gpu = Detector::builtin();
  ASSERT_TRUE(cpu && gpu) << (cpu ? gpu.status() : cpu.status()).to_string();
  Net gnet = gpu->net();  // shares its state with the detector's net: attaching here attaches the detector
  const auto acc = attach_gpu(gnet, "yunet");
  ASSERT_TRUE(acc);
  ASSERT_TRUE(gpu->net().accelerator().has_value());
  ASSERT_FALSE(cpu->net().accelerator().has_value());
  const int n = gpu->input_size();
  std::size_t faces = 0;
  for (std::size_t i = 0; i < ims.size(); ++i) {
    const core::Image& im = ims[i];
    const float side = static_cast<float>(std::max(im.width, im.height));
    auto want = cpu->detect(im);
    auto got = gpu->detect(im);
    ASSERT_TRUE(want && got) << kPhotos[i] << ": " << (want ? got.status() : want.status()).to_string();
    expect_same_detections(*got, *want, side, kPhotos[i]);
    faces += want->size();

    std::vector<float> in(static_cast<std::size_t>(3 * n * n));
    letterbox_bgr(im.rgb, im.width, im.height, n, in);
    auto go = gpu->net().run(in);
    auto co = cpu->net().run(in);
    ASSERT_TRUE(go && co) << kPhotos[i] << ": " << (go ? co.status() : go.status()).to_string();
    expect_outputs_within_bar(*go, *co, kPhotos[i]);
  }
  EXPECT_GE(faces, ims.size()) << "every photo holds at least one face";
  expect_all_on_gpu(*acc, "yunet");
  EXPECT_TRUE(gpu->net().accelerator().has_value()) << gpu->net().detach_reason().value_or("?");
}

TEST(FacesYunetGpu, BatchOf16EqualsSixteenSingleRuns) {
  FT_REQUIRE_GPU();
  const auto ims = photos();
  ASSERT_EQ(ims.size(), kPhotos.size());
  auto det = Detector::builtin();
  ASSERT_TRUE(det) << det.status().to_string();
  Net net = det->net();
  const auto acc = attach_gpu(net, "yunet");
  ASSERT_TRUE(acc);
  std::vector<core::Image> batch;
  for (int i = 0; i < 16; ++i) batch.push_back(ims[static_cast<std::size_t>(i) % ims.size()]);

  // The detections: detect_batch (one Net::run_batch of 16) against 16 detect calls.
  const auto many = det->detect_batch(batch);
  ASSERT_EQ(many.size(), batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const std::string what = "image " + std::to_string(i) + " (" + kPhotos[i % kPhotos.size()] + ")";
    auto one = det->detect(batch[i]);
    ASSERT_TRUE(one && many[i]) << what << ": " << (one ? many[i].status() : one.status()).to_string();
    const float side = static_cast<float>(std::max(batch[i].width, batch[i].height));
    expect_same_detections(*many[i], *one, side, what);
  }

  // The raw outputs: Net::run_batch of 16 letterboxed photos against Net::run of each.
  const int n = det->input_size();
  std::vector<std::vector<float>> ins;
  for (const auto& im : batch) {
    ins.emplace_back(static_cast<std::size_t>(3 * n * n));
    letterbox_bgr(im.rgb, im.width, im.height, n, ins.back());
  }
  std::vector<std::span<const float>> spans(ins.begin(), ins.end());
  auto b16 = net.run_batch(spans, net.input_shape());
  ASSERT_TRUE(b16) << b16.status().to_string();
  ASSERT_EQ(b16->size(), ins.size());
  for (std::size_t i = 0; i < ins.size(); ++i) {
    auto one = net.run(ins[i]);
    ASSERT_TRUE(one) << one.status().to_string();
    expect_outputs_within_bar((*b16)[i], *one, "run_batch image " + std::to_string(i));
  }
  expect_all_on_gpu(*acc, "yunet");
  EXPECT_TRUE(net.accelerator().has_value()) << net.detach_reason().value_or("?");
}

}  // namespace
}  // namespace facetrace::faces
