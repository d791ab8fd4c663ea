/// @file
/// Private: the parsed ONNX graph (docs/design/faces.md §1), independent of protobuf types.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces::detail {

/// A constant tensor: FLOAT (f) or INT64 (i).
struct ConstTensor {
  Shape dims;
  bool is_int = false;
  std::vector<float> f;
  std::vector<std::int64_t> i;
  std::int64_t count() const {
    return is_int ? static_cast<std::int64_t>(i.size()) : static_cast<std::int64_t>(f.size());
  }
};
using ConstPtr = std::shared_ptr<const ConstTensor>;

struct Attr {
  enum class Type : std::uint8_t { kFloat, kInt, kString, kFloats, kInts, kTensor };
  Type type = Type::kInt;
  float f = 0.0f;
  std::int64_t i = 0;
  std::string s;
  std::vector<float> floats;
  std::vector<std::int64_t> ints;
  ConstPtr t;
};

struct Node {
  std::string name;  ///< the node's name, or "<op_type>#<index>" when unnamed
  std::string op;
  std::vector<std::string> inputs, outputs;
  std::map<std::string, Attr> attrs;
};

struct GraphIo {
  std::string name;
  Shape dims;  ///< symbolic dims are 0
};

struct Graph {
  std::int64_t opset = 0;
  std::vector<Node> nodes;
  std::map<std::string, ConstPtr> inits;
  std::vector<GraphIo> inputs;  ///< initializers removed
  std::vector<GraphIo> outputs;
};

/// Parses ONNX bytes into a Graph, enforcing `limits`.
Expected<Graph> parse_onnx(std::span<const std::uint8_t> bytes, const NetLimits& limits);

/// Lowers `graph` for input `shape` (docs/design/faces.md §2): per image (Program::input_shape[0] = 1, a batch of
/// shape[0] runs as that many items) unless the graph computes across dim 0, then, for shape[0] > 1 or a declared
/// batch above 1, whole (input_shape = shape, one item). `per_image`, when set, receives whether the per-image program
/// is right for every batch (so it can be reused for any shape[0]). `ignored`, when set, receives the attributes
/// no operator rule looked at, each as "node '<name>' (<op>) attribute '<attr>'" (Lowerer::unread_attributes). Every shape is inferred here; errors name the node.
Expected<Program> lower_graph(const Graph& graph, const Shape& shape, const NetLimits& limits,
                              bool* per_image = nullptr, std::vector<std::string>* ignored = nullptr);

}  // namespace facetrace::faces::detail
