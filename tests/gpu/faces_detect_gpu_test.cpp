/// @file
/// YuNet end to end on the GPU (docs/design/faces.md §5; kOpFacesDetect, src/faces/gpu/faces_ops.h): with the GPU
/// accelerator attached (make_gpu_accelerator: an isolated facetrace-gpud child), Detector::detect_batch
/// letterboxes, runs the network and decodes + NMS on the device and reads back only the final boxes. On the five
/// photos of tests/data/images its detections are bit for bit those of the GPU network with the CPU's letterbox and
/// decode_yunet (the accelerator's run_program only), match the CPU-only detector (count and order exactly, every
/// float within the network's fp32 bar), and a batch of 16 equals 16 single detects bit for bit. Prints the
/// end-to-end time per image at batch 1 and 64 for both paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "facetrace/core/image.h"
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/net.h"
#include "gpu_skip.h"
#include "log_guard.h"

namespace facetrace::faces {
namespace {

/// The accelerator with its detect_yunet hidden: programs on the GPU, letterbox and decode on the host (the path
/// kOpFacesDetect replaces; the reference its results must equal bit for bit).
class RunOnly final : public Accelerator {
 public:
  explicit RunOnly(std::shared_ptr<Accelerator> acc) : acc_(std::move(acc)) {}
  std::optional<Expected<std::vector<float>>> conv(const ConvJob& job,
                                                   std::span<const float> input) override {
    return acc_->conv(job, input);
  }
  std::optional<Expected<ProgramOutputs>> run_program(const Program& p,
                                                      std::span<const std::span<const float>> in) override {
    return acc_->run_program(p, in);
  }
  std::string device() const override { return acc_->device() + " (run_program only)"; }
  Precision precision() const override { return acc_->precision(); }
  std::uint64_t resident_bytes() const override { return acc_->resident_bytes(); }
  std::uint64_t generation() const override { return acc_->generation(); }

 private:
  std::shared_ptr<Accelerator> acc_;
};

Detector yunet() {
  auto d = Detector::builtin();
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return std::move(*d);
}

std::vector<core::Image> photos(const std::string& data) {
  std::vector<core::Image> v;
  for (const char* name :
       {"astronaut_eileen_collins.png", "biden_crop_2010.jpg", "obama_biden_kagan_crop_2010.jpg",
        "obama_congress_2009.jpg", "obama_portrait_2012.jpg"}) {
    auto im = core::load_image(data + "/images/" + name);
    EXPECT_TRUE(im.ok()) << name << ": " << im.status().to_string();
    if (im) v.push_back(std::move(*im));
  }
  return v;
}

std::vector<float> floats_of(const Detection& d) {
  std::vector<float> v = {d.x0, d.y0, d.x1, d.y1, d.score};
  for (const Point& p : d.landmarks) v.insert(v.end(), {p.x, p.y});
  return v;
}

/// Bit for bit: same count, order and float bits.
void expect_identical(const std::vector<Detection>& got, const std::vector<Detection>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto a = floats_of(got[i]), b = floats_of(want[i]);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what << " detection " << i;
  }
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// The end-to-end time per image of detect_batch on `frames` in batches of `batch` (after one warm-up pass).
double ms_per_image(const Detector& d, const std::vector<core::Image>& frames, std::size_t batch) {
  auto pass = [&] {
    for (std::size_t at = 0; at < frames.size(); at += batch) {
      const std::size_t n = std::min(batch, frames.size() - at);
      for (const auto& r : d.detect_batch(std::span(frames).subspan(at, n))) EXPECT_TRUE(r.ok());
    }
  };
  pass();
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  return ms_since(t0) / static_cast<double>(frames.size());
}

TEST(FacesDetectGpu,
     five_photos_end_to_end_on_the_gpu_equal_the_host_decode_and_the_cpu_and_batch_16_equals_singles) {
  FT_REQUIRE_GPU();
  FT_REQUIRE_TEST_DATA(data);
  auto acc = make_gpu_accelerator();
  ASSERT_TRUE(acc.ok()) << acc.status().to_string();
  Detector gpu = yunet(), host = yunet();
  const Detector cpu = yunet();
  ASSERT_TRUE(Net(gpu.net()).attach_checked(*acc).ok());
  ASSERT_TRUE(Net(host.net()).attach_checked(std::make_shared<RunOnly>(*acc)).ok());
  const auto ims = photos(data);
  ASSERT_EQ(ims.size(), 5u);

  const auto got = gpu.detect_batch(ims);
  const auto ref = host.detect_batch(ims);  // the same GPU plan (batch 5), the CPU's letterbox and decode
  ASSERT_EQ(got.size(), ims.size());
  std::size_t faces = 0, floats = 0, equal_to_cpu = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < ims.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status().to_string();
    ASSERT_TRUE(ref[i].ok()) << ref[i].status().to_string();
    expect_identical(*got[i], *ref[i], "photo " + std::to_string(i) + " vs the host decode");
    auto want = cpu.detect(ims[i]);
    ASSERT_TRUE(want.ok());
    ASSERT_EQ(got[i]->size(), want->size()) << "photo " << i << " vs the CPU";
    // The network differs from the CPU's within the fp32 bar (docs/design/faces.md §4); the boxes follow it.
    const double side = std::max(ims[i].width, ims[i].height);
    for (std::size_t k = 0; k < want->size(); ++k) {
      const auto a = floats_of((*got[i])[k]), b = floats_of((*want)[k]);
      for (std::size_t f = 0; f < a.size(); ++f) {
        const double tol = f == 4 ? 1e-3 : 1e-3 * side;
        EXPECT_NEAR(a[f], b[f], tol) << "photo " << i << " detection " << k << " field " << f;
        worst = std::max(worst, std::abs(static_cast<double>(a[f]) - b[f]) / tol);
        equal_to_cpu += a[f] == b[f];
        ++floats;
      }
    }
    faces += want->size();
  }
  EXPECT_GE(faces, 5u);  // every photo has at least one face
  std::printf(
      "[ detect ] %zu faces on 5 photos: identical to the host decode; vs the CPU detector same count and "
      "order, %zu of %zu floats bit-equal, worst |gpu-cpu|/tol %.3g\n",
      faces, equal_to_cpu, floats, worst);

  std::vector<core::Image> sixteen;
  for (std::size_t i = 0; i < 16; ++i) sixteen.push_back(ims[i % ims.size()]);
  const auto batch = gpu.detect_batch(sixteen);
  ASSERT_EQ(batch.size(), 16u);
  for (std::size_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(batch[i].ok());
    auto one = gpu.detect(sixteen[i]);
    ASSERT_TRUE(one.ok());
    expect_identical(*batch[i], *one, "image " + std::to_string(i) + " of 16 vs its single detect");
  }
  EXPECT_TRUE(gpu.net().accelerator().has_value()) << gpu.net().detach_reason().value_or("");

  // End-to-end time per image (decoded photos in, final detections out), both paths, batch 1 and 64.
  std::vector<core::Image> many;
  for (std::size_t i = 0; i < 64; ++i) many.push_back(ims[i % ims.size()]);
  const std::vector<core::Image> few(ims.begin(), ims.end());
  const double g1 = ms_per_image(gpu, few, 1), h1 = ms_per_image(host, few, 1);
  const double g64 = ms_per_image(gpu, many, 64), h64 = ms_per_image(host, many, 64);
  std::printf(
      "[ detect ] %s, 640 letterbox, end to end per image: batch 1 %.2f ms (host letterbox+decode %.2f ms), "
      "batch 64 %.2f ms (host letterbox+decode %.2f ms)\n",
      gpu.net().accelerator()->c_str(), g1, h1, g64, h64);
  EXPECT_TRUE(gpu.net().accelerator().has_value()) << gpu.net().detach_reason().value_or("");
}

}  // namespace
}  // namespace facetrace::faces
