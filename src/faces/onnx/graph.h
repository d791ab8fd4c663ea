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

/// Lowers `graph` for input `shape` (batch 1). Every shape is inferred here; errors name the node.
Expected<Program> lower_graph(const Graph& graph, const Shape& shape, const NetLimits& limits);

}  // namespace facetrace::faces::detail
