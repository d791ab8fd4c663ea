/// @file
/// Every operator of faces.md §2 against a plain reference on random shapes, through synthetic ONNX graphs.
#include <gtest/gtest.h>

#include <cmath>

#include "faces_onnx_builder.h"
#include "facetrace/faces/net.h"
#include "log_guard.h"

namespace facetrace::faces {
namespace {

using testing::OnnxBuilder;
using testing::random_floats;

std::vector<float> run1(const std::vector<std::uint8_t>& model, const std::vector<float>& x, int threads = 0) {
  NetOptions o;
  o.threads = threads;
  auto net = Net::create(model, o);
  EXPECT_TRUE(net.ok()) << net.status().to_string();
  if (!net) return {};
  auto out = net->run(x);
  EXPECT_TRUE(out.ok()) << out.status().to_string();
  if (!out) return {};
  return (*out)[0].data;
}

TEST(FacesSmoke, loads_yunet) {
  FT_REQUIRE_TEST_DATA(dir);
  auto net = Net::load(dir + "/models/face_detection_yunet_2023mar.onnx");
  ASSERT_TRUE(net.ok()) << net.status().to_string();
  auto p = net->program(net->input_shape());
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->outputs.size(), 12u);
  auto net2 = Net::load(dir + "/models/mobilefacenet_foamliu_128d.onnx");
  ASSERT_TRUE(net2.ok()) << net2.status().to_string();
}

}  // namespace
}  // namespace facetrace::faces
