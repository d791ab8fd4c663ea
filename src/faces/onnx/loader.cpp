/// @file
/// ONNX protobuf → detail::Graph with limits (docs/design/faces.md §1). Parsing goes through libonnx's onnx_proto.
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <string>

#include "facetrace/core/text.h"
#include "onnx/graph.h"

namespace facetrace::faces::detail {
namespace {

constexpr int kFloat = onnx::TensorProto_DataType_FLOAT;
constexpr int kInt64 = onnx::TensorProto_DataType_INT64;

Status bad(const std::string& where, const std::string& what) {
  return invalid_argument("ONNX " + where + ": " + what);
}

// Element count = ∏dims with overflow and limit checks.
Status checked_count(const Shape& dims, const NetLimits& limits, const std::string& where,
                     std::int64_t* out) {
  if (static_cast<std::int64_t>(dims.size()) > limits.max_rank)
    return bad(where, "rank " + std::to_string(dims.size()) + " exceeds " + std::to_string(limits.max_rank));
  std::int64_t n = 1;
  for (std::int64_t d : dims) {
    if (d < 0) return bad(where, "negative dimension " + std::to_string(d));
    if (d != 0 && n > limits.max_tensor_elements / d)
      return bad(where, "more than " + std::to_string(limits.max_tensor_elements) + " elements");
    n *= d;
  }
  if (n > limits.max_tensor_elements)
    return bad(where, "more than " + std::to_string(limits.max_tensor_elements) + " elements");
  *out = n;
  return {};
}

// A tensor's n values of type T: from raw_data (little-endian, as ONNX stores it) when that is set or the typed
// field is empty, else from the typed field (`field`: its name for errors).
template <class T, class Repeated>
Expected<std::vector<T>> tensor_values(const std::string& raw, const Repeated& typed, const char* field,
                                       std::int64_t n, const std::string& where) {
  constexpr auto kSize = static_cast<std::int64_t>(sizeof(T));
  std::vector<T> v;
  if (!raw.empty() || (n > 0 && typed.empty())) {
    if (raw.size() != static_cast<std::size_t>(n * kSize))
      return bad(where, "raw_data holds " + std::to_string(raw.size()) + " bytes, expected " +
                            std::to_string(n * kSize));
    v.resize(static_cast<std::size_t>(n));
    if (n > 0) std::memcpy(v.data(), raw.data(), raw.size());
  } else {
    if (typed.size() != n)
      return bad(where, std::string(field) + " holds " + std::to_string(typed.size()) + " values, expected " +
                            std::to_string(n));
    v.assign(typed.begin(), typed.end());
  }
  return v;
}

Expected<ConstPtr> convert_tensor(const onnx::TensorProto& t, const NetLimits& limits,
                                  const std::string& where) {
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL || t.external_data_size() > 0)
    return bad(where, "external data is not supported");
  if (t.has_segment()) return bad(where, "segmented tensors are not supported");
  auto c = std::make_shared<ConstTensor>();
  c->dims.assign(t.dims().begin(), t.dims().end());
  std::int64_t n = 0;
  FT_TRY(checked_count(c->dims, limits, where, &n));
  if (t.data_type() == kFloat) {
    auto v = tensor_values<float>(t.raw_data(), t.float_data(), "float_data", n, where);
    if (!v) return v.status();
    c->f = std::move(*v);
    for (float x : c->f)
      if (!std::isfinite(x)) return bad(where, "non-finite weight");
  } else if (t.data_type() == kInt64) {
    auto v = tensor_values<std::int64_t>(t.raw_data(), t.int64_data(), "int64_data", n, where);
    if (!v) return v.status();
    c->is_int = true;
    c->i = std::move(*v);
  } else {
    return not_supported("ONNX " + where + ": data type " + std::to_string(t.data_type()) +
                         " (only FLOAT and INT64 tensors are supported)");
  }
  return ConstPtr(std::move(c));
}

Expected<GraphIo> convert_io(const onnx::ValueInfoProto& v, const NetLimits& limits, const char* kind) {
  const std::string where = std::string(kind) + " '" + core::printable(v.name()) + "'";
  if (!v.has_type() || !v.type().has_tensor_type()) return bad(where, "not a tensor");
  const auto& tt = v.type().tensor_type();
  if (tt.elem_type() != kFloat)
    return not_supported("ONNX " + where + ": element type " + std::to_string(tt.elem_type()) +
                         " (graph I/O must be float32)");
  GraphIo io;
  io.name = v.name();
  if (tt.has_shape()) {
    if (tt.shape().dim_size() > limits.max_rank)
      return bad(where, "rank exceeds " + std::to_string(limits.max_rank));
    for (const auto& d : tt.shape().dim()) {
      const std::int64_t dv = d.has_dim_value() ? d.dim_value() : 0;
      if (dv < 0 || dv > limits.max_tensor_elements) return bad(where, "dimension " + std::to_string(dv));
      io.dims.push_back(dv);
    }
  }
  return io;
}

}  // namespace

Expected<Graph> parse_onnx(std::span<const std::uint8_t> bytes, const NetLimits& limits) {
  if (bytes.empty()) return invalid_argument("ONNX model: empty file");
  if (static_cast<std::int64_t>(bytes.size()) > limits.max_file_bytes ||
      bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    return invalid_argument("ONNX model: " + std::to_string(bytes.size()) + " bytes exceeds the limit of " +
                            std::to_string(limits.max_file_bytes));
  onnx::ModelProto model;
  {
    google::protobuf::io::ArrayInputStream raw(bytes.data(), static_cast<int>(bytes.size()));
    google::protobuf::io::CodedInputStream cis(&raw);
    cis.SetTotalBytesLimit(static_cast<int>(bytes.size()));
    if (!model.ParseFromCodedStream(&cis) || !cis.ConsumedEntireMessage())
      return invalid_argument("ONNX model: malformed protobuf (truncated or corrupt file)");
  }
  if (!model.has_graph()) return invalid_argument("ONNX model: no graph");
  Graph g;
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") g.opset = op.version();
  const onnx::GraphProto& gp = model.graph();
  if (gp.sparse_initializer_size() > 0)
    return not_supported("ONNX graph: sparse initializers are not supported");
  if (gp.node_size() == 0) return invalid_argument("ONNX graph: no nodes");
  if (gp.node_size() > limits.max_nodes)
    return invalid_argument("ONNX graph: " + std::to_string(gp.node_size()) + " nodes exceed the limit of " +
                            std::to_string(limits.max_nodes));
  if (gp.initializer_size() > limits.max_initializers)
    return invalid_argument("ONNX graph: " + std::to_string(gp.initializer_size()) +
                            " initializers exceed the limit of " + std::to_string(limits.max_initializers));
  std::int64_t weights = 0;
  for (const auto& t : gp.initializer()) {
    auto c = convert_tensor(t, limits, "initializer '" + core::printable(t.name()) + "'");
    if (!c) return c.status();
    weights += (*c)->count();
    if (weights > limits.max_weight_elements)
      return invalid_argument("ONNX graph: initializers exceed " +
                              std::to_string(limits.max_weight_elements) + " elements in total");
    // a second initializer of one name would silently replace the first: refuse the file instead
    if (!g.inits.emplace(t.name(), *c).second)
      return invalid_argument("ONNX graph: initializer '" + core::printable(t.name()) + "' is defined twice");
  }
  for (const auto& v : gp.input()) {
    if (g.inits.count(v.name())) continue;  // graph inputs that are initializers are dropped
    auto io = convert_io(v, limits, "graph input");
    if (!io) return io.status();
    g.inputs.push_back(std::move(*io));
  }
  for (const auto& v : gp.output()) {
    auto io = convert_io(v, limits, "graph output");
    if (!io) return io.status();
    g.outputs.push_back(std::move(*io));
  }
  if (g.inputs.empty()) return invalid_argument("ONNX graph: no inputs");
  if (g.outputs.empty()) return invalid_argument("ONNX graph: no outputs");
  g.nodes.reserve(static_cast<std::size_t>(gp.node_size()));
  int index = 0;
  for (const auto& np : gp.node()) {
    Node n;
    n.op = np.op_type();
    n.name = np.name().empty() ? np.op_type() + "#" + std::to_string(index) : np.name();
    ++index;
    const std::string where = "node '" + core::printable(n.name) + "' (" + core::printable(n.op) + ")";
    if (!np.domain().empty() && np.domain() != "ai.onnx")
      return not_supported("ONNX " + where + ": custom domain '" + core::printable(np.domain()) + "'");
    if (np.input_size() > limits.max_node_io || np.output_size() > limits.max_node_io ||
        np.attribute_size() > limits.max_node_io)
      return bad(where, "more than " + std::to_string(limits.max_node_io) + " inputs, outputs or attributes");
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& ap : np.attribute()) {
      const std::string aw = where + " attribute '" + core::printable(ap.name()) + "'";
      if (!ap.ref_attr_name().empty()) return not_supported("ONNX " + aw + ": attribute references");
      Attr a;
      switch (ap.type()) {
        case onnx::AttributeProto_AttributeType_FLOAT:
          a.type = Attr::Type::kFloat;
          a.f = ap.f();
          break;
        case onnx::AttributeProto_AttributeType_INT:
          a.type = Attr::Type::kInt;
          a.i = ap.i();
          break;
        case onnx::AttributeProto_AttributeType_STRING:
          a.type = Attr::Type::kString;
          a.s = ap.s();
          break;
        case onnx::AttributeProto_AttributeType_FLOATS:
          if (ap.floats_size() > limits.max_list) return bad(aw, "list too long");
          a.type = Attr::Type::kFloats;
          a.floats.assign(ap.floats().begin(), ap.floats().end());
          break;
        case onnx::AttributeProto_AttributeType_INTS:
          if (ap.ints_size() > limits.max_list) return bad(aw, "list too long");
          a.type = Attr::Type::kInts;
          a.ints.assign(ap.ints().begin(), ap.ints().end());
          break;
        case onnx::AttributeProto_AttributeType_TENSOR: {
          auto c = convert_tensor(ap.t(), limits, aw);
          if (!c) return c.status();
          weights += (*c)->count();
          if (weights > limits.max_weight_elements)
            return invalid_argument("ONNX graph: constants exceed " +
                                    std::to_string(limits.max_weight_elements) + " elements in total");
          a.type = Attr::Type::kTensor;
          a.t = *c;
          break;
        }
        default: return not_supported("ONNX " + aw + ": attribute type " + std::to_string(ap.type()));
      }
      if (!n.attrs.emplace(ap.name(), std::move(a)).second) return bad(aw, "given twice");
    }
    g.nodes.push_back(std::move(n));
  }
  return g;
}

}  // namespace facetrace::faces::detail
