/// @file
/// YuNet on the shared photos and odd inputs, MobileFaceNet embeddings, alignment, letterbox and image decode.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <thread>

#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"
#include "facetrace/core/image.h"
#include "facetrace/faces/sha256.h"
#include "log_guard.h"

namespace facetrace::faces {
namespace {

const char* kPhotos[] = {"astronaut_eileen_collins.png", "obama_portrait_2012.jpg", "obama_congress_2009.jpg",
                         "biden_crop_2010.jpg", "obama_biden_kagan_crop_2010.jpg"};

const Detector& yunet(const std::string& dir) {
  static const Detector d = [&] {
    auto r = Detector::load(dir + "/models/face_detection_yunet_2023mar.onnx");
    if (!r) throw std::runtime_error(r.status().to_string());
    return std::move(*r);
  }();
  return d;
}

const Embedder& mobilefacenet(const std::string& dir) {
  static const Embedder e = [&] {
    auto r = Embedder::load(dir + "/models/mobilefacenet_foamliu_128d.onnx");
    if (!r) throw std::runtime_error(r.status().to_string());
    return std::move(*r);
  }();
  return e;
}

TEST(FacesSha256, known_vectors) {
  EXPECT_EQ(sha256_hex({}), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  EXPECT_EQ(sha256_hex({reinterpret_cast<const std::uint8_t*>(abc.data()), abc.size()}),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  const std::string m(1000, 'a');
  EXPECT_EQ(sha256_hex({reinterpret_cast<const std::uint8_t*>(m.data()), 56}),
            "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

TEST(FacesYunet, one_face_per_photo_with_landmarks_inside_the_box) {
  FT_REQUIRE_TEST_DATA(dir);
  const Detector& det = yunet(dir);
  EXPECT_EQ(det.input_size(), 640);
  for (const char* name : kPhotos) {
    SCOPED_TRACE(name);
    auto im = core::load_image(dir + "/images/" + name);
    ASSERT_TRUE(im.ok()) << im.status().to_string();
    auto faces = det.detect(*im);
    ASSERT_TRUE(faces.ok()) << faces.status().to_string();
    ASSERT_EQ(faces->size(), 1u);
    const Detection& d = (*faces)[0];
    EXPECT_GE(d.score, 0.6f);
    EXPECT_GT(d.x1 - d.x0, 40.0f);
    for (const Point& p : d.landmarks) {
      EXPECT_GE(p.x, d.x0);
      EXPECT_LE(p.x, d.x1);
      EXPECT_GE(p.y, d.y0);
      EXPECT_LE(p.y, d.y1);
    }
    EXPECT_LT(d.landmarks[0].x, d.landmarks[1].x);  // image-left eye first
    EXPECT_LT(d.landmarks[0].y, d.landmarks[3].y);  // eyes above the mouth
    auto again = det.detect(*im);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ((*again)[0].x0, d.x0);  // deterministic
    EXPECT_EQ((*again)[0].score, d.score);
  }
}

TEST(FacesYunet, blank_and_odd_sizes_give_no_faces) {
  FT_REQUIRE_TEST_DATA(dir);
  const Detector& det = yunet(dir);
  for (auto [w, h] : {std::pair{640, 480}, std::pair{100, 700}, std::pair{1, 1}, std::pair{37, 41}, std::pair{1000, 20}}) {
    SCOPED_TRACE(::testing::Message() << w << "x" << h);
    const std::vector<std::uint8_t> grey(static_cast<std::size_t>(w) * h * 3, 128);
    auto faces = det.detect(grey, w, h);
    ASSERT_TRUE(faces.ok()) << faces.status().to_string();
    EXPECT_TRUE(faces->empty());
  }
  const std::vector<std::uint8_t> black(37 * 41 * 3, 0);
  auto faces = det.detect(black, 37, 41);
  ASSERT_TRUE(faces.ok());
  EXPECT_TRUE(faces->empty());
  EXPECT_FALSE(det.detect(black, 41, 41).ok());  // wrong byte count
  EXPECT_FALSE(det.detect(black, 0, 41).ok());
}

TEST(FacesLetterbox, shrink_averages_area_and_writes_bgr_top_left) {
  // 4×2 RGB → n = 2: scale 0.5, 2×1 output; each output averages a 2×2 block.
  std::vector<std::uint8_t> rgb(4 * 2 * 3);
  for (int i = 0; i < 8; ++i) rgb[static_cast<std::size_t>(i) * 3] = static_cast<std::uint8_t>(i * 10), rgb[static_cast<std::size_t>(i) * 3 + 2] = 200;
  std::vector<float> out(3 * 2 * 2, -1.0f);
  EXPECT_FLOAT_EQ(letterbox_bgr(rgb, 4, 2, 2, out), 0.5f);
  // channel 0 is B (200), channel 2 is R
  EXPECT_FLOAT_EQ(out[0], 200.0f);
  EXPECT_FLOAT_EQ(out[8], (0 + 10 + 40 + 50) / 4.0f);
  EXPECT_FLOAT_EQ(out[9], (20 + 30 + 60 + 70) / 4.0f);
  EXPECT_FLOAT_EQ(out[10], 0.0f);  // padding row
  EXPECT_FLOAT_EQ(out[11], 0.0f);
}

TEST(FacesAlign, recovers_a_known_similarity_and_rejects_degenerate_points) {
  const auto t = arcface_template();
  Similarity truth;
  truth.a_re = 0.8 * std::cos(0.3), truth.a_im = 0.8 * std::sin(0.3), truth.tx = 5, truth.ty = -7;
  std::array<Point, 5> p;
  for (std::size_t i = 0; i < 5; ++i) p[i] = truth.apply(t[i]);
  auto s = fit_similarity(t, p);
  ASSERT_TRUE(s.ok());
  EXPECT_NEAR(s->a_re, truth.a_re, 1e-6);
  EXPECT_NEAR(s->a_im, truth.a_im, 1e-6);
  EXPECT_NEAR(s->tx, 5, 1e-4);
  EXPECT_NEAR(s->ty, -7, 1e-4);
  std::array<Point, 5> same;
  same.fill({10, 10});
  EXPECT_FALSE(fit_similarity(same, t).ok());
  same[0].x = std::nanf("");
  EXPECT_FALSE(fit_similarity(same, t).ok());
}

TEST(FacesAlign, aligned_landmarks_land_on_the_template_and_off_edge_faces_work) {
  FT_REQUIRE_TEST_DATA(dir);
  auto im = core::load_image(dir + "/images/astronaut_eileen_collins.png");
  ASSERT_TRUE(im.ok());
  auto faces = yunet(dir).detect(*im);
  ASSERT_TRUE(faces.ok());
  ASSERT_EQ(faces->size(), 1u);
  auto s = fit_similarity((*faces)[0].landmarks, arcface_template());
  ASSERT_TRUE(s.ok());
  const auto t = arcface_template();
  double err = 0;
  for (std::size_t i = 0; i < 5; ++i) {
    const Point q = s->apply((*faces)[0].landmarks[i]);
    err = std::max(err, std::hypot(static_cast<double>(q.x - t[i].x), static_cast<double>(q.y - t[i].y)));
  }
  EXPECT_LT(err, 6.0);  // least-squares residual of a real face against the template
  auto al = align_face(*im, (*faces)[0].landmarks);
  ASSERT_TRUE(al.ok());
  EXPECT_EQ(al->width, 112);
  // the aligned face, re-detected on a 112×112 image, has its eyes near the template's
  auto crop = crop_box(*im, -50, -50, 30, 30);  // mostly off the photo: clamp-to-edge, no crash
  ASSERT_TRUE(crop.ok());
}

TEST(FacesEmbed, mobilefacenet_is_deterministic_and_separates_people) {
  FT_REQUIRE_TEST_DATA(dir);
  const Embedder& emb = mobilefacenet(dir);
  EXPECT_EQ(emb.info().dim, 128);
  EXPECT_EQ(emb.info().mean[0], 127.5f);
  EXPECT_EQ(emb.info().std[0], 128.0f);
  std::vector<std::vector<float>> vs;
  for (const char* name : kPhotos) {
    auto im = core::load_image(dir + "/images/" + name);
    ASSERT_TRUE(im.ok());
    auto faces = yunet(dir).detect(*im);
    ASSERT_TRUE(faces.ok());
    ASSERT_FALSE(faces->empty());
    auto al = align_face(*im, (*faces)[0].landmarks);
    ASSERT_TRUE(al.ok());
    auto a = emb.embed(*al);
    auto b = emb.embed(*al);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*a, *b);  // identical, bit for bit
    double n2 = 0;
    for (float v : *a) n2 += static_cast<double>(v) * v;
    EXPECT_NEAR(n2, 1.0, 1e-5);
    vs.push_back(*a);
  }
  // astronaut (a woman) vs each Obama photo: different people differ more than the same person across photos
  const float obama_obama = *cosine_similarity(vs[1], vs[2]);
  const float collins_obama = *cosine_similarity(vs[0], vs[1]);
  const float biden_obama = *cosine_similarity(vs[3], vs[1]);
  EXPECT_LT(collins_obama, 0.9995f);
  EXPECT_LT(biden_obama, 0.9995f);
  EXPECT_GT(obama_obama, collins_obama);
  EXPECT_GT(obama_obama, biden_obama);
  // threads: the same result from 4 concurrent callers
  auto im = core::load_image(dir + "/images/obama_portrait_2012.jpg");
  auto faces = yunet(dir).detect(*im);
  auto al = align_face(*im, (*faces)[0].landmarks);
  std::vector<std::vector<float>> par(4);
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i) ts.emplace_back([&, i] { par[static_cast<std::size_t>(i)] = *emb.embed(*al); });
  for (auto& t : ts) t.join();
  for (const auto& p : par) EXPECT_EQ(p, vs[1]);
  EXPECT_FALSE(emb.embed(core::Image{100, 100, std::vector<std::uint8_t>(30000)}).ok());  // wrong input size
}

TEST(FacesImage, exif_orientation_is_applied) {
  core::Image im{3, 2, {}};
  for (int i = 0; i < 6; ++i) im.rgb.insert(im.rgb.end(), {static_cast<std::uint8_t>(i), 0, 0});
  const core::Image r = core::apply_orientation(im, 6);  // rotate 90° clockwise
  ASSERT_EQ(r.width, 2);
  ASSERT_EQ(r.height, 3);
  // top row of the upright image is the left column of the stored image, bottom-up
  EXPECT_EQ(r.rgb[0], 3);
  EXPECT_EQ(r.rgb[3], 0);
  EXPECT_EQ(core::apply_orientation(core::apply_orientation(im, 3), 3).rgb, im.rgb);
  // a minimal JPEG APP1 header carrying orientation 8 (big-endian TIFF)
  const std::vector<std::uint8_t> jpeg = {0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x22, 'E', 'x', 'i', 'f', 0, 0,
                                          'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0,
                                          0, 0, 0xFF, 0xD9};
  EXPECT_EQ(core::exif_orientation(jpeg), 8);
  EXPECT_EQ(core::exif_orientation(std::vector<std::uint8_t>{1, 2, 3}), 1);
  EXPECT_FALSE(core::decode_image(std::vector<std::uint8_t>{1, 2, 3}).ok());
}

}  // namespace
}  // namespace facetrace::faces
