/// @file
/// Test helper: builds small ONNX models in C++ with onnx_proto and serialises them.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

namespace facetrace::faces::testing {

class OnnxBuilder {
 public:
  explicit OnnxBuilder(std::int64_t opset = 13) {
    model_.set_ir_version(8);
    auto* op = model_.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    graph_ = model_.mutable_graph();
    graph_->set_name("test");
  }
  OnnxBuilder& input(const std::string& name, const std::vector<std::int64_t>& dims) {
    io(graph_->add_input(), name, dims);
    return *this;
  }
  OnnxBuilder& output(const std::string& name, const std::vector<std::int64_t>& dims = {}) {
    io(graph_->add_output(), name, dims);
    return *this;
  }
  OnnxBuilder& init(const std::string& name, const std::vector<std::int64_t>& dims,
                    const std::vector<float>& v) {
    fill(graph_->add_initializer(), name, dims, v);
    return *this;
  }
  OnnxBuilder& init_i64(const std::string& name, const std::vector<std::int64_t>& dims,
                        const std::vector<std::int64_t>& v) {
    auto* t = graph_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_int64_data(x);
    return *this;
  }
  onnx::NodeProto* node(const std::string& op, std::initializer_list<std::string> in,
                        std::initializer_list<std::string> out) {
    auto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + std::to_string(graph_->node_size()));
    for (const auto& s : in) n->add_input(s);
    for (const auto& s : out) n->add_output(s);
    return n;
  }
  static void ints(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INTS);
    for (auto x : v) a->add_ints(x);
  }
  static void int1(onnx::NodeProto* n, const std::string& name, std::int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_INT);
    a->set_i(v);
  }
  static void float1(onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
    a->set_f(v);
  }
  static void str(onnx::NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_STRING);
    a->set_s(v);
  }
  static void tensor(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& dims,
                     const std::vector<float>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    fill(a->mutable_t(), "", dims, v);
  }
  static void floats(onnx::NodeProto* n, const std::string& name, const std::vector<float>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_FLOATS);
    for (auto x : v) a->add_floats(x);
  }
  static void tensor_i64(onnx::NodeProto* n, const std::string& name, const std::vector<std::int64_t>& dims,
                         const std::vector<std::int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto_AttributeType_TENSOR);
    auto* t = a->mutable_t();
    t->set_data_type(onnx::TensorProto_DataType_INT64);
    for (auto d : dims) t->add_dims(d);
    for (auto x : v) t->add_int64_data(x);
  }
  std::vector<std::uint8_t> bytes() const {
    std::string s;
    model_.SerializeToString(&s);
    return {s.begin(), s.end()};
  }
  onnx::ModelProto& model() { return model_; }

 private:
  static void io(onnx::ValueInfoProto* v, const std::string& name, const std::vector<std::int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto_DataType_FLOAT);
    auto* sh = tt->mutable_shape();
    for (auto d : dims) {  // a negative dim is symbolic ("N")
      if (d < 0)
        sh->add_dim()->set_dim_param("N");
      else
        sh->add_dim()->set_dim_value(d);
    }
  }
  static void fill(onnx::TensorProto* t, const std::string& name, const std::vector<std::int64_t>& dims,
                   const std::vector<float>& v) {
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_FLOAT);
    for (auto d : dims) t->add_dims(d);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
  }
  onnx::ModelProto model_;
  onnx::GraphProto* graph_;
};

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

}  // namespace facetrace::faces::testing
