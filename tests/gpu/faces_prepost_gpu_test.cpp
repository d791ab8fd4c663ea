/// @file
/// YuNet pre- and post-processing on the GPU (cuda/faces/yunet_gpu.h) against the CPU detector's own functions
/// (letterbox_bgr, decode_yunet): bit-identical letterbox for odd sizes, the native pad against a plain loop,
/// decode_expf on the device against the host, and decode + NMS on synthetic outputs (ties, overlaps, NaN,
/// the 4000 cap) and on the CPU network's real outputs for the five photos. Also prints a batch-64 timing.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/image.h"
#include "facetrace/core/parallel.h"
#include "facetrace/faces/decode_math.h"
#include "facetrace/faces/detector.h"
#include "faces/yunet_gpu.h"
#include "gpu_skip.h"
#include "log_guard.h"

namespace facetrace::faces::gpu {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

/// A device buffer of T; freed on destruction.
template <class T>
struct DeviceBuf {
  T* ptr = nullptr;
  std::size_t count = 0;
  explicit DeviceBuf(std::size_t n) : count(n) {
    if (cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(n, 1) * sizeof(T)) != cudaSuccess)
      ptr = nullptr;
  }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  ~DeviceBuf() { static_cast<void>(cudaFree(ptr)); }
  bool upload(const std::vector<T>& v) {
    return cudaMemcpy(ptr, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess;
  }
  std::vector<T> download() const {
    std::vector<T> v(count);
    if (cudaMemcpy(v.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost) != cudaSuccess) v.clear();
    return v;
  }
};

struct Rng {
  std::uint32_t s;
  std::uint32_t next() {
    s ^= s << 13, s ^= s >> 17, s ^= s << 5;
    return s;
  }
  float uniform(float lo, float hi) { return lo + (hi - lo) * static_cast<float>(next() >> 8) / 16777216.0f; }
};

std::vector<std::uint8_t> random_rgb(int w, int h, std::uint32_t seed) {
  Rng r{seed};
  std::vector<std::uint8_t> v(static_cast<std::size_t>(w) * h * 3);
  for (auto& b : v) b = static_cast<std::uint8_t>(r.next() >> 24);
  return v;
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { static_cast<void>(cudaStreamCreate(&s)); }
  ~Stream() { static_cast<void>(cudaStreamDestroy(s)); }
};

/// Frames uploaded to the device (one buffer each) and their descriptors.
struct DeviceFrames {
  std::vector<std::vector<std::uint8_t>> host;
  std::vector<std::unique_ptr<DeviceBuf<std::uint8_t>>> dev;
  std::vector<FrameDesc> desc;
  void add(std::vector<std::uint8_t> rgb, int w, int h) {
    dev.push_back(std::make_unique<DeviceBuf<std::uint8_t>>(rgb.size()));
    static_cast<void>(dev.back()->upload(rgb));
    desc.push_back({dev.back()->ptr, w, h});
    host.push_back(std::move(rgb));
  }
};

std::size_t count_bit_diffs(const float* a, const float* b, std::size_t n, std::size_t* first) {
  std::size_t d = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) {
      if (d == 0) *first = i;
      ++d;
    }
  return d;
}

// Letterboxes `frames` on the GPU at side n and expects letterbox_bgr's bits, scale and geometry for each.
void expect_letterbox_matches_cpu(DeviceFrames& frames, int n) {
  const int count = static_cast<int>(frames.desc.size());
  const std::size_t per = static_cast<std::size_t>(3) * n * n;
  DeviceBuf<float> out(per * count);
  DeviceBuf<ImageGeom> geom(count);
  std::vector<float> scales(count, -1.0f);
  Stream st;
  // Poison the output so a pixel the kernel forgets is caught.
  CUDA_OK(cudaMemset(out.ptr, 0xff, per * count * sizeof(float)));
  const Status s = letterbox_batch(frames.desc.data(), count, n, out.ptr, geom.ptr, scales.data(), st.s);
  ASSERT_TRUE(s.ok()) << s.to_string();
  CUDA_OK(cudaStreamSynchronize(st.s));
  const auto got = out.download();
  const auto g = geom.download();
  ASSERT_EQ(got.size(), per * count);
  for (int i = 0; i < count; ++i) {
    const FrameDesc& f = frames.desc[i];
    SCOPED_TRACE(::testing::Message() << "frame " << i << " " << f.width << "x" << f.height << " n " << n);
    std::vector<float> want(per);
    const float scale = letterbox_bgr(frames.host[i], f.width, f.height, n, want);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(scales[i]), std::bit_cast<std::uint32_t>(scale));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(g[i].scale), std::bit_cast<std::uint32_t>(scale));
    EXPECT_EQ(g[i].width, f.width);
    EXPECT_EQ(g[i].height, f.height);
    std::size_t first = 0;
    const std::size_t d = count_bit_diffs(got.data() + per * i, want.data(), per, &first);
    EXPECT_EQ(d, 0u) << "first at " << first << ": gpu " << got[per * i + first] << " cpu " << want[first];
  }
}

TEST(FacesPrepostGpu, letterbox_equals_letterbox_bgr_bit_for_bit_on_odd_sizes) {
  FT_REQUIRE_GPU();
  DeviceFrames frames;
  const std::pair<int, int> sizes[] = {{1, 1},     {37, 41},   {1000, 20}, {20, 1000}, {4000, 3000},
                                       {640, 640}, {641, 639}, {3, 2},     {333, 1},   {1279, 719}};
  std::uint32_t seed = 1;
  for (auto [w, h] : sizes) frames.add(random_rgb(w, h, seed++), w, h);
  // More than one launch's frame table (32): small random sizes.
  Rng r{77};
  while (frames.desc.size() < 45) {
    const int w = 1 + static_cast<int>(r.next() % 300), h = 1 + static_cast<int>(r.next() % 300);
    frames.add(random_rgb(w, h, seed++), w, h);
  }
  // The three kernels of cuda/faces/preprocess.cu: at 640 the first launch holds the 4000×3000 frame (rows
  // shrink 6.25×, more than the separable kernel's rows allow) and is tiled, the second (small frames) separable;
  // at 32, 96 and 160 that frame shrinks by more than the tiled kernel's taps allow, so its launch takes
  // letterbox_kernel, and the second launch is tiled (32: frames up to 300 rows shrink up to 9×) or separable.
  for (int n : {640, 32, 96, 160}) expect_letterbox_matches_cpu(frames, n);
}

TEST(FacesPrepostGpu, letterbox_refuses_bad_arguments) {
  FT_REQUIRE_GPU();
  DeviceBuf<float> out(3 * 64 * 64);
  DeviceBuf<ImageGeom> geom(1);
  DeviceBuf<std::uint8_t> px(3);
  FrameDesc zero{px.ptr, 0, 5};
  EXPECT_EQ(letterbox_batch(&zero, 1, 64, out.ptr, geom.ptr, nullptr, nullptr).code(),
            Code::kInvalidArgument);
  FrameDesc ok{px.ptr, 1, 1};
  EXPECT_EQ(letterbox_batch(&ok, 1, 0, out.ptr, geom.ptr, nullptr, nullptr).code(), Code::kInvalidArgument);
  FrameDesc null_px{nullptr, 1, 1};
  EXPECT_EQ(letterbox_batch(&null_px, 1, 64, out.ptr, geom.ptr, nullptr, nullptr).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(pad_native_batch(&ok, 1, 33, 64, out.ptr, geom.ptr, nullptr).code(), Code::kInvalidArgument);
  FrameDesc big{px.ptr, 65, 1};
  const Status s = pad_native_batch(&big, 1, 64, 32, out.ptr, geom.ptr, nullptr);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.what().find("does not fit"), std::string::npos) << s.to_string();
}

TEST(FacesPrepostGpu, native_pad_copies_each_frame_top_left_as_bgr_and_zeroes_the_rest) {
  FT_REQUIRE_GPU();
  DeviceFrames frames;
  const std::pair<int, int> sizes[] = {{1, 1}, {37, 41}, {64, 64}, {100, 7}, {95, 96}};
  std::uint32_t seed = 11;
  for (auto [w, h] : sizes) frames.add(random_rgb(w, h, seed++), w, h);
  const int ow = native_side(100), oh = native_side(96);
  ASSERT_EQ(ow, 128);
  ASSERT_EQ(oh, 96);
  const int count = static_cast<int>(frames.desc.size());
  const std::size_t plane = static_cast<std::size_t>(ow) * oh;
  DeviceBuf<float> out(3 * plane * count);
  DeviceBuf<ImageGeom> geom(count);
  CUDA_OK(cudaMemset(out.ptr, 0xff, 3 * plane * count * sizeof(float)));
  ASSERT_TRUE(pad_native_batch(frames.desc.data(), count, ow, oh, out.ptr, geom.ptr, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  const auto got = out.download();
  const auto g = geom.download();
  for (int i = 0; i < count; ++i) {
    const auto [w, h] = sizes[i];
    EXPECT_EQ(g[i].scale, 1.0f);
    EXPECT_EQ(g[i].width, w);
    std::size_t bad = 0;
    for (int c = 0; c < 3; ++c)
      for (int y = 0; y < oh; ++y)
        for (int x = 0; x < ow; ++x) {
          const float want =
              x < w && y < h
                  ? static_cast<float>(frames.host[i][(static_cast<std::size_t>(y) * w + x) * 3 + 2 - c])
                  : 0.0f;
          bad += got[(i * 3 + c) * plane + static_cast<std::size_t>(y) * ow + x] != want;
        }
    EXPECT_EQ(bad, 0u) << "frame " << i;
  }
  // A square frame of a multiple of 32 is its own letterbox at that side (scale 1, the identity taps).
  std::vector<float> lb(3 * 64 * 64);
  ASSERT_EQ(letterbox_bgr(frames.host[2], 64, 64, 64, lb), 1.0f);
  std::size_t bad = 0;
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 64; ++y)
      for (int x = 0; x < 64; ++x)
        bad += got[(2 * 3 + c) * plane + static_cast<std::size_t>(y) * ow + x] !=
               lb[static_cast<std::size_t>(c) * 64 * 64 + y * 64 + x];
  EXPECT_EQ(bad, 0u);
}

TEST(FacesPrepostGpu, decode_expf_on_the_device_equals_the_host) {
  FT_REQUIRE_GPU();
  // Every 61st float bit pattern with |x| ≤ 12, plus the edges and a NaN.
  std::vector<float> x;
  const std::uint32_t top = std::bit_cast<std::uint32_t>(12.0f);
  for (std::uint32_t b = 0; b <= top; b += 61) {
    x.push_back(std::bit_cast<float>(b));
    x.push_back(-std::bit_cast<float>(b));
  }
  for (float v : {0.0f, -0.0f, 10.0f, -10.0f, 80.0f, -80.0f, 1e30f, -1e30f}) x.push_back(v);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  DeviceBuf<float> dx(x.size()), dy(x.size());
  ASSERT_TRUE(dx.upload(x));
  ASSERT_TRUE(decode_expf_device(dx.ptr, dy.ptr, x.size(), nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  const auto y = dy.download();
  ASSERT_EQ(y.size(), x.size());
  std::vector<std::size_t> bad(64, 0);
  const std::int64_t chunks = 64;
  core::parallel_for(chunks, 0, [&](std::int64_t c) {
    const std::size_t lo = x.size() * c / chunks, hi = x.size() * (c + 1) / chunks;
    for (std::size_t i = lo; i < hi; ++i) {
      const float want = decode_expf(x[i]);
      if (std::isnan(want) ? !std::isnan(y[i])
                           : std::bit_cast<std::uint32_t>(want) != std::bit_cast<std::uint32_t>(y[i]))
        ++bad[static_cast<std::size_t>(c)];
    }
  });
  std::size_t total = 0;
  for (auto b : bad) total += b;
  EXPECT_EQ(total, 0u) << "of " << x.size();
  // And it is e^x: within one ulp of the C library's expf on the range YuNet uses.
  for (float v : {-10.0f, -3.3f, -0.5f, 1e-6f, 0.25f, 1.0f, 2.5f, 10.0f}) {
    const float a = decode_expf(v), b = std::exp(v);
    EXPECT_LE(std::abs(std::bit_cast<std::int32_t>(a) - std::bit_cast<std::int32_t>(b)), 1) << v;
  }
}

const char* kOutputNames[12] = {"cls_8",  "cls_16",  "cls_32",  "obj_8", "obj_16", "obj_32",
                                "bbox_8", "bbox_16", "bbox_32", "kps_8", "kps_16", "kps_32"};

/// YuNet outputs of one image, by name.
using Outputs = std::vector<NamedTensor>;

struct PostInput {
  Outputs outs;
  int width = 0, height = 0;
  float scale = 1.0f;
};

/// What the CPU found over a batch: detections, and adjacent pairs of equal score (ties whose order matters).
struct CpuFound {
  std::size_t detections = 0;
  std::size_t ties = 0;
};

/// Runs the GPU post-processing on `images` (outputs laid out as `order` says, image-major) and expects
/// decode_yunet's result for each: same count, order and float bits. Adds what the CPU found to `found`.
void expect_post_matches_cpu(const std::vector<PostInput>& images, int n, const DetectOptions& o,
                             const std::vector<std::string>& order, CpuFound& found) {
  const int batch = static_cast<int>(images.size());
  std::vector<std::int64_t> lens;
  std::vector<float> flat;
  for (const std::string& name : order) {
    const auto pick = [&](const PostInput& im) -> const NamedTensor& {
      return *std::find_if(im.outs.begin(), im.outs.end(),
                           [&](const NamedTensor& t) { return t.name == name; });
    };
    lens.push_back(static_cast<std::int64_t>(pick(images[0]).data.size()));
    for (const PostInput& im : images) {
      const auto& d = pick(im).data;
      flat.insert(flat.end(), d.begin(), d.end());
    }
  }
  auto layout = yunet_layout(order, lens, batch, n, n);
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  ASSERT_EQ(layout->total_floats, flat.size());
  DeviceBuf<float> d_out(flat.size());
  ASSERT_TRUE(d_out.upload(flat));
  std::vector<ImageGeom> geom;
  for (const PostInput& im : images) geom.push_back({im.scale, im.width, im.height, 0});
  DeviceBuf<ImageGeom> d_geom(geom.size());
  ASSERT_TRUE(d_geom.upload(geom));
  const std::uint64_t sb = yunet_post_scratch_bytes(*layout);
  DeviceBuf<std::uint8_t> scratch(sb);
  const int cap = std::max(1, std::min(std::clamp(o.max_faces, 0, 10000), 4000));
  DeviceBuf<int> counts(batch);
  DeviceBuf<GpuDetection> recs(static_cast<std::size_t>(batch) * cap);
  // both forms of the post-processing: the one kernel per batch (where it applies) and the Thrust path
  for (const char* thrust_only : {"0", "1"}) {
    SCOPED_TRACE(::testing::Message() << "FACETRACE_FACES_POST_THRUST=" << thrust_only);
    ::setenv("FACETRACE_FACES_POST_THRUST", thrust_only, 1);
    const bool count = thrust_only[0] == '0';  // what the CPU found, once
    CUDA_OK(cudaMemset(counts.ptr, 0xff, batch * sizeof(int)));
    Stream st;
    const Status s = yunet_decode_nms(d_out.ptr, *layout, d_geom.ptr, o, {scratch.ptr, sb},
                                      {counts.ptr, recs.ptr, cap}, st.s);
    ASSERT_TRUE(s.ok()) << s.to_string();
    CUDA_OK(cudaStreamSynchronize(st.s));
    const auto c = counts.download();
    const auto r = recs.download();
    for (int b = 0; b < batch; ++b) {
      SCOPED_TRACE(::testing::Message() << "image " << b);
      const auto want = decode_yunet(images[b].outs, n, images[b].scale, images[b].width, images[b].height, o);
      if (count) found.detections += want.size();
      for (std::size_t i = 1; count && i < want.size(); ++i) found.ties += want[i].score == want[i - 1].score;
      ASSERT_EQ(c[b], static_cast<int>(want.size()));
      const auto got = to_detections(std::span(r).subspan(static_cast<std::size_t>(b) * cap, c[b]));
      for (std::size_t i = 0; i < want.size(); ++i) {
        const float* a = &want[i].x0;
        const float* g = &got[i].x0;
        static_assert(sizeof(Detection) == 15 * sizeof(float));
        std::size_t first = 0;
        ASSERT_EQ(count_bit_diffs(a, g, 15, &first), 0u)
            << "detection " << i << " field " << first << ": cpu " << a[first] << " gpu " << g[first];
      }
    }
  }
  ::unsetenv("FACETRACE_FACES_POST_THRUST");
}

// Synthetic outputs: scores from a few levels (exact ties between cells), boxes jittered around their cells so
// neighbours overlap heavily, some NaN / infinite / out-of-range values.
PostInput synthetic_image(int n, std::uint32_t seed, int width, int height) {
  Rng r{seed};
  PostInput im;
  im.width = width, im.height = height;
  im.scale = letterbox_fit(width, height, n).scale;
  const float levels[] = {0.0f, 0.3f, 0.55f, 0.7f, 0.8f, 0.9f, 1.0f, 1.7f, -0.4f};
  for (int k = 0; k < 4; ++k)
    for (int s = 0; s < 3; ++s) {
      const std::size_t cells = static_cast<std::size_t>(n / (8 << s)) * (n / (8 << s));
      const std::size_t per = k < 2 ? 1 : (k == 2 ? 4 : 10);
      NamedTensor t;
      t.name = kOutputNames[k * 3 + s];
      t.data.resize(cells * per);
      for (std::size_t i = 0; i < t.data.size(); ++i) {
        float v;
        if (k < 2) {
          v = levels[r.next() % 9];
          if (r.next() % 97 == 0) v = std::numeric_limits<float>::quiet_NaN();
        } else if (k == 2) {
          v = (i % 4 < 2) ? r.uniform(-0.5f, 1.5f) : r.uniform(-1.0f, 2.5f);
          const std::uint32_t e = r.next() % 211;
          if (e == 0) v = std::numeric_limits<float>::quiet_NaN();
          if (e == 1) v = (i % 4 < 2) ? std::numeric_limits<float>::infinity() : 40.0f;
          if (e == 2) v = -25.0f;
        } else {
          v = r.uniform(-3.0f, 3.0f);
        }
        t.data[i] = v;
      }
      im.outs.push_back(std::move(t));
    }
  return im;
}

TEST(FacesPrepostGpu, decode_nms_equals_decode_yunet_on_synthetic_outputs_with_ties_and_overlaps) {
  FT_REQUIRE_GPU();
  // The network's order, and a shuffled one: the layout is found by name.
  std::vector<std::string> order(kOutputNames, kOutputNames + 12);
  std::vector<std::string> shuffled = {"kps_32", "bbox_8",  "cls_16", "obj_8",  "cls_8",  "kps_8",
                                       "obj_32", "bbox_32", "cls_32", "obj_16", "kps_16", "bbox_16"};
  const std::pair<int, int> photo[] = {{640, 480}, {1000, 20}, {37, 41}, {4000, 3000}, {1, 1}, {480, 640}};
  for (int n : {64, 640}) {
    std::vector<PostInput> images;
    std::uint32_t seed = 1234;
    for (auto [w, h] : photo) images.push_back(synthetic_image(n, seed++, w, h));
    DetectOptions defaults;
    DetectOptions all;  // every cell passes: more than 4000 candidates at n = 640
    all.score = 0.0f, all.nms_iou = 0.5f, all.max_faces = 10000;
    DetectOptions strict;
    strict.score = 0.5f, strict.nms_iou = 0.0f, strict.max_faces = 5;
    DetectOptions odd;  // non-finite and out-of-range options take the defaults / clamp
    odd.score = std::numeric_limits<float>::quiet_NaN(), odd.nms_iou = 7.0f, odd.max_faces = -3;
    DetectOptions loose;
    loose.score = 0.3f, loose.nms_iou = 1.0f, loose.max_faces = 300;
    DetectOptions one;
    one.score = 0.69f, one.max_faces = 1;
    DetectOptions odd2;  // non-finite score and IoU take the defaults; max_faces clamps to 10000
    odd2.score = std::numeric_limits<float>::infinity(),
    odd2.nms_iou = std::numeric_limits<float>::quiet_NaN();
    odd2.max_faces = 20000;
    const DetectOptions opts[] = {defaults, all, strict, odd, loose, one, odd2};
    for (int k = 0; k < 7; ++k) {
      const DetectOptions& o = opts[k];
      SCOPED_TRACE(::testing::Message()
                   << "n " << n << " score " << o.score << " iou " << o.nms_iou << " max " << o.max_faces);
      CpuFound found, again;
      expect_post_matches_cpu(images, n, o, order, found);
      expect_post_matches_cpu(images, n, o, shuffled, again);
      if (k == 3) {
        EXPECT_EQ(found.detections, 0u);  // max_faces −3 clamps to 0
      } else if (k != 5) {
        EXPECT_GT(found.detections, images.size());  // not vacuous: several faces kept per image
      }
      if (k == 1 || k == 4) {
        EXPECT_GT(found.ties, 0u);  // and equal scores among them (all, loose)
      }
    }
    if (n == 640) {  // at score 0 every non-NaN cell is a candidate: well over the 4000 cap
      std::size_t passing = 0;
      for (int s = 0; s < 3; ++s)
        for (std::size_t i = 0; i < images[0].outs[s].data.size(); ++i)
          passing += !std::isnan(images[0].outs[s].data[i]) && !std::isnan(images[0].outs[3 + s].data[i]);
      EXPECT_GT(passing, 4000u);
    }
  }
}

TEST(FacesPrepostGpu, decode_nms_refuses_bad_layouts_capacity_and_scratch) {
  FT_REQUIRE_GPU();
  std::vector<std::string> names(kOutputNames, kOutputNames + 12);
  std::vector<std::int64_t> lens = {64, 16, 4, 64, 16, 4, 256, 64, 16, 640, 160, 40};
  ASSERT_TRUE(yunet_layout(names, lens, 2, 64, 64).ok());
  auto wrong = lens;
  wrong[7] = 63;
  auto l = yunet_layout(names, wrong, 2, 64, 64);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().what().find("bbox_16"), std::string::npos) << l.status().to_string();
  auto renamed = names;
  renamed[4] = "obj16";
  l = yunet_layout(renamed, lens, 2, 64, 64);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().what().find("'obj_16' is missing"), std::string::npos) << l.status().to_string();
  EXPECT_FALSE(yunet_layout(names, lens, 0, 64, 64).ok());
  EXPECT_FALSE(yunet_layout(names, lens, 2, 64, 48).ok());
  auto good = yunet_layout(names, lens, 2, 64, 64);
  ASSERT_TRUE(good.ok());
  DeviceBuf<float> out(good->total_floats);
  DeviceBuf<ImageGeom> geom(2);
  DeviceBuf<int> counts(2);
  DeviceBuf<GpuDetection> recs(2 * 200);
  const std::uint64_t sb = yunet_post_scratch_bytes(*good);
  DeviceBuf<std::uint8_t> scratch(sb);
  const DetectOptions o;
  EXPECT_EQ(yunet_decode_nms(out.ptr, *good, geom.ptr, o, {scratch.ptr, sb - 1}, {counts.ptr, recs.ptr, 200},
                             nullptr)
                .code(),
            Code::kInvalidArgument);
  EXPECT_EQ(
      yunet_decode_nms(out.ptr, *good, geom.ptr, o, {scratch.ptr, sb}, {counts.ptr, recs.ptr, 199}, nullptr)
          .code(),
      Code::kInvalidArgument);
}

const char* kPhotos[] = {"astronaut_eileen_collins.png", "obama_portrait_2012.jpg", "obama_congress_2009.jpg",
                         "biden_crop_2010.jpg", "obama_biden_kagan_crop_2010.jpg"};

TEST(FacesPrepostGpu, letterbox_and_decode_nms_equal_the_cpu_on_the_five_photos) {
  FT_REQUIRE_GPU();
  FT_REQUIRE_TEST_DATA(dir);
  auto det = Detector::builtin();
  ASSERT_TRUE(det.ok()) << det.status().to_string();
  const int n = det->input_size();
  DeviceFrames frames;
  for (const char* name : kPhotos) {
    auto im = core::load_image(dir + "/images/" + name);
    ASSERT_TRUE(im.ok()) << im.status().to_string();
    frames.add(std::move(im->rgb), im->width, im->height);
  }
  // The network input: the GPU letterbox equals the CPU's, so the CPU network sees the same input either way.
  expect_letterbox_matches_cpu(frames, n);
  std::vector<PostInput> images;
  for (std::size_t i = 0; i < frames.desc.size(); ++i) {
    PostInput im;
    im.width = frames.desc[i].width, im.height = frames.desc[i].height;
    std::vector<float> input(static_cast<std::size_t>(3) * n * n);
    im.scale = letterbox_bgr(frames.host[i], im.width, im.height, n, input);
    auto outs = det->net().run(input, {1, 3, n, n});
    ASSERT_TRUE(outs.ok()) << outs.status().to_string();
    im.outs = std::move(*outs);
    images.push_back(std::move(im));
  }
  std::vector<std::string> order;
  for (const NamedTensor& t : images[0].outs) order.push_back(t.name);
  DetectOptions defaults;
  DetectOptions low;
  low.score = 0.05f, low.nms_iou = 0.5f, low.max_faces = 1000;
  DetectOptions all;
  all.score = 0.0f, all.nms_iou = 0.3f, all.max_faces = 10000;
  for (const DetectOptions& o : {defaults, low, all}) {
    SCOPED_TRACE(::testing::Message() << "score " << o.score);
    CpuFound found;
    expect_post_matches_cpu(images, n, o, order, found);
    EXPECT_GE(found.detections, images.size());
  }
  // Each photo has its one face at the default options (the CPU test's expectation), on the GPU too.
  for (const PostInput& im : images)
    EXPECT_EQ(decode_yunet(im.outs, n, im.scale, im.width, im.height, defaults).size(), 1u);

  // Timing (printed, not asserted): letterbox + post for batches of 1 and 64 (the five photos repeated).
  const auto time_batch = [&](int batch) {
    std::vector<FrameDesc> desc;
    std::vector<PostInput> many;
    for (int i = 0; i < batch; ++i) {
      desc.push_back(frames.desc[i % frames.desc.size()]);
      many.push_back(images[i % images.size()]);
    }
    std::vector<std::int64_t> lens;
    std::vector<float> flat;
    for (const std::string& name : order) {
      for (int b = 0; b < batch; ++b) {
        const auto& t = *std::find_if(many[b].outs.begin(), many[b].outs.end(),
                                      [&](const NamedTensor& x) { return x.name == name; });
        if (b == 0) lens.push_back(static_cast<std::int64_t>(t.data.size()));
        flat.insert(flat.end(), t.data.begin(), t.data.end());
      }
    }
    auto layout = yunet_layout(order, lens, batch, n, n);
    ASSERT_TRUE(layout.ok());
    DeviceBuf<float> d_in(static_cast<std::size_t>(batch) * 3 * n * n), d_out(flat.size());
    ASSERT_TRUE(d_out.upload(flat));
    DeviceBuf<ImageGeom> d_geom(batch);
    const std::uint64_t sb = yunet_post_scratch_bytes(*layout);
    DeviceBuf<std::uint8_t> scratch(sb);
    DeviceBuf<int> counts(batch);
    DeviceBuf<GpuDetection> recs(static_cast<std::size_t>(batch) * 200);
    Stream st;
    cudaEvent_t e0, e1, e2;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    CUDA_OK(cudaEventCreate(&e2));
    std::vector<float> pre_ms, post_ms, wall_ms;
    for (int it = 0; it < 13; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      CUDA_OK(cudaEventRecord(e0, st.s));
      ASSERT_TRUE(letterbox_batch(desc.data(), batch, n, d_in.ptr, d_geom.ptr, nullptr, st.s).ok());
      CUDA_OK(cudaEventRecord(e1, st.s));
      ASSERT_TRUE(yunet_decode_nms(d_out.ptr, *layout, d_geom.ptr, defaults, {scratch.ptr, sb},
                                   {counts.ptr, recs.ptr, 200}, st.s)
                      .ok());
      CUDA_OK(cudaEventRecord(e2, st.s));
      CUDA_OK(cudaEventSynchronize(e2));
      const auto t1 = std::chrono::steady_clock::now();
      float a = 0, b = 0;
      CUDA_OK(cudaEventElapsedTime(&a, e0, e1));
      CUDA_OK(cudaEventElapsedTime(&b, e1, e2));
      if (it >= 3) {
        pre_ms.push_back(a), post_ms.push_back(b);
        wall_ms.push_back(std::chrono::duration<float, std::milli>(t1 - t0).count());
      }
    }
    const auto median = [](std::vector<float> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const auto c = counts.download();
    for (int b = 0; b < batch; ++b) EXPECT_EQ(c[b], 1) << b;
    std::printf(
        "[timing] batch %d of the five photos at %d: letterbox %.3f ms, decode+nms %.3f ms (GPU events), "
        "wall %.3f ms, %.0f images/s (median of 10)\n",
        batch, n, median(pre_ms), median(post_ms), median(wall_ms), batch / (median(wall_ms) / 1000.0f));
    static_cast<void>(cudaEventDestroy(e0));
    static_cast<void>(cudaEventDestroy(e1));
    static_cast<void>(cudaEventDestroy(e2));
  };
  time_batch(1);
  time_batch(64);
}

}  // namespace
}  // namespace facetrace::faces::gpu
