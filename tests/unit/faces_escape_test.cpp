/// @file
/// Hostile ONNX models (docs/limits.md, "Echoed input"): names that are huge, hold terminal escapes or are not
/// UTF-8 come back cut and escaped in every refusal; attributes no operator rule reads are noted once per model,
/// naming node, op and attribute, instead of being dropped in silence.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "facetrace/core/text.h"
#include "facetrace/faces/net.h"
#include "log_guard.h"
#include "onnx_builder.h"

namespace facetrace::faces {
namespace {

using testing::OnnxBuilder;

bool has_control_byte(const std::string& s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return true;
  return false;
}

/// What every message quoting a hostile name must be: short, no control byte, valid UTF-8.
void expect_clean(const std::string& what) {
  EXPECT_LT(what.size(), 2000u) << what.substr(0, 300);
  EXPECT_FALSE(has_control_byte(what)) << what.substr(0, 300);
  EXPECT_TRUE(core::is_valid_utf8(what)) << core::printable(what);
}

const std::string kHuge(10u << 20, 'N');  // a 10 MB name

TEST(FacesEscape, hostile_node_and_op_names_are_cut_and_escaped) {
  OnnxBuilder m;
  m.input("x", {1, 4}).output("y");
  auto* n = m.node("LRN\x1b[2J\xff", {"x"}, {"y"});
  n->set_name("\x1b]0;owned\x07" + kHuge);
  const Status st = Net::create(m.bytes()).status();
  ASSERT_EQ(st.code(), Code::kNotSupported) << st.to_string().substr(0, 300);
  expect_clean(st.what());
  EXPECT_NE(st.what().find("node '\\x1b]0;owned\\x07NNN"), std::string::npos) << st.what();
  EXPECT_NE(st.what().find("\xe2\x80\xa6 (10485770 bytes)' (LRN\\x1b[2J\\xff)"), std::string::npos)
      << st.what();
  EXPECT_NE(st.what().find("operator 'LRN\\x1b[2J\\xff' is not supported"), std::string::npos) << st.what();
}

TEST(FacesEscape, hostile_value_and_initializer_names_are_cut_and_escaped) {
  {  // an input nothing produces, named with invalid UTF-8 and 10 MB long
    OnnxBuilder m;
    m.input("x", {1, 4}).output("y");
    m.node("Add", {"x", "\xc0\xaf" + kHuge}, {"y"});
    const Status st = Net::create(m.bytes()).status();
    ASSERT_FALSE(st.ok());
    expect_clean(st.what());
    EXPECT_NE(st.what().find("reads '\\xc0\\xafNNN"), std::string::npos) << st.what();
  }
  {  // a duplicated initializer with a terminal escape in its name
    OnnxBuilder m;
    m.input("x", {1, 4})
        .output("y")
        .init("w\x1b[31m", {4}, {1, 2, 3, 4})
        .init("w\x1b[31m", {4}, {5, 6, 7, 8});
    m.node("Add", {"x", "w\x1b[31m"}, {"y"});
    const Status st = Net::create(m.bytes()).status();
    ASSERT_EQ(st.code(), Code::kInvalidArgument);
    expect_clean(st.what());
    EXPECT_NE(st.what().find("initializer 'w\\x1b[31m' is defined twice"), std::string::npos) << st.what();
  }
}

/// A Relu with one attribute no rule reads, after a Clip whose min/max attributes are read (opset 6 form).
std::vector<std::uint8_t> model_with_unknown_attribute(const std::string& attr_name) {
  OnnxBuilder m(6);
  m.input("x", {1, 4}).output("y");
  auto* clip = m.node("Clip", {"x"}, {"c"});
  clip->set_name("clip");
  OnnxBuilder::float1(clip, "min", -1.0f);
  OnnxBuilder::float1(clip, "max", 1.0f);
  auto* relu = m.node("Relu", {"c"}, {"y"});
  relu->set_name("relu");
  OnnxBuilder::int1(relu, attr_name, 3);
  return m.bytes();
}

TEST(FacesEscape, unknown_attribute_is_noted_once_naming_node_op_and_attribute) {
  facetrace::testing::ExpectLogs logs;
  auto net = Net::create(model_with_unknown_attribute("frobnicate"));
  ASSERT_TRUE(net.ok()) << net.status().to_string();
  EXPECT_EQ(net->ignored_attributes(), std::vector<std::string>{"node 'relu' (Relu) attribute 'frobnicate'"});
  // The note is one warning, at create; running the net (also at another batch) adds none.
  for (int i = 0; i < 2; ++i) {
    auto out = net->run(std::vector<float>{-2.0f, -0.5f, 0.5f, 2.0f});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    // the attribute changed nothing: relu(clip(x, -1, 1))
    EXPECT_EQ((*out)[0].data, (std::vector<float>{0.0f, 0.0f, 0.5f, 1.0f}));
  }
  const float two[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  auto batch = net->run(two, Shape{2, 4});
  ASSERT_TRUE(batch.ok()) << batch.status().to_string();
  const auto messages = logs.messages();
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find("node 'relu' (Relu) attribute 'frobnicate'"), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find("1 attribute is not used"), std::string::npos) << messages[0];
  EXPECT_EQ(messages[0].find("clip"), std::string::npos) << messages[0];  // read attributes are not listed
}

TEST(FacesEscape, a_model_whose_attributes_are_all_read_gets_no_note) {
  OnnxBuilder m(6);
  m.input("x", {1, 4}).output("y");
  auto* clip = m.node("Clip", {"x"}, {"y"});
  OnnxBuilder::float1(clip, "min", -1.0f);
  OnnxBuilder::float1(clip, "max", 1.0f);
  facetrace::testing::ExpectLogs logs;
  auto net = Net::create(m.bytes());
  ASSERT_TRUE(net.ok()) << net.status().to_string();
  EXPECT_TRUE(net->ignored_attributes().empty());
  EXPECT_TRUE(logs.messages().empty());
}

/// BatchNormalization (opset 7) on [1, 2, 1, 2] with `attr` = `value` set (an INT, or a FLOAT for momentum).
std::vector<std::uint8_t> batchnorm_with(const std::string& attr, std::int64_t value) {
  OnnxBuilder m(7);
  m.input("x", {1, 2, 1, 2}).output("y");
  m.init("s", {2}, {1, 1}).init("b", {2}, {0, 0}).init("m", {2}, {0, 0}).init("v", {2}, {1, 1});
  auto* bn = m.node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y"});
  bn->set_name("bn");
  if (attr == "momentum")
    OnnxBuilder::float1(bn, attr, static_cast<float>(value) * 0.9f);
  else
    OnnxBuilder::int1(bn, attr, value);
  return m.bytes();
}

TEST(FacesEscape, training_only_attributes_are_read_and_spatial_0_is_refused) {
  // spatial = 0 (statistics per activation) would compute something else: refused, not ignored
  const Status st = Net::create(batchnorm_with("spatial", 0)).status();
  EXPECT_EQ(st.code(), Code::kNotSupported) << st.to_string();
  EXPECT_NE(st.what().find("node 'bn' (BatchNormalization): attribute 'spatial' = 0"), std::string::npos)
      << st.what();
  // spatial = 1 is what the rule computes; momentum acts in training only: no note for either (the log guard
  // fails the test on a warning)
  for (const char* attr : {"spatial", "momentum"}) {
    auto net = Net::create(batchnorm_with(attr, 1));
    ASSERT_TRUE(net.ok()) << net.status().to_string();
    EXPECT_TRUE(net->ignored_attributes().empty()) << attr;
  }
}

TEST(FacesEscape, the_note_escapes_a_hostile_attribute_name) {
  facetrace::testing::ExpectLogs logs;
  auto net = Net::create(model_with_unknown_attribute("\x1b]0;pwn\x07" + kHuge));
  ASSERT_TRUE(net.ok()) << net.status().to_string();
  const std::vector<std::string> ignored = net->ignored_attributes();
  ASSERT_EQ(ignored.size(), 1u);
  const std::string& what = ignored[0];
  EXPECT_EQ(what.rfind("node 'relu' (Relu) attribute '\\x1b]0;pwn\\x07NNN", 0), 0u) << what.substr(0, 300);
  expect_clean(what);
  ASSERT_EQ(logs.messages().size(), 1u);
  expect_clean(logs.messages()[0]);
}

}  // namespace
}  // namespace facetrace::faces
