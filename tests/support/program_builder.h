// A Program built by hand for tests (faces GPU and channels-last tests): values appended in step order, free lists
// from the last readers, the given values as outputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "facetrace/faces/program.h"

namespace facetrace::faces {

inline std::int64_t count_of(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), std::int64_t{1}, std::multiplies<>());
}

inline std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline Blob blob(std::vector<float> v) { return std::make_shared<const std::vector<float>>(std::move(v)); }

struct ProgramBuilder {
  Program p;
  explicit ProgramBuilder(const Shape& in) {
    p.input_shape = in;
    p.lens.push_back(count_of(in));
    p.shapes.push_back(in);
  }
  std::int32_t constant(std::vector<float> v) {
    p.consts.push_back(blob(std::move(v)));
    return static_cast<std::int32_t>(p.consts.size() - 1);
  }
  std::int32_t step(Op op, std::vector<Arg> args, const Shape& out, Fusion fusion = {}) {
    const auto v = static_cast<std::int32_t>(p.lens.size());
    p.lens.push_back(count_of(out));
    p.shapes.push_back(out);
    p.steps.push_back(Step{std::move(op), std::move(args), v, "n" + std::to_string(p.steps.size()), fusion});
    if (std::holds_alternative<ConvJob>(p.steps.back().op)) ++p.conv_count;
    return v;
  }
  // Marks `outs` as the program's outputs ("y<value>") and computes the free lists from the last readers.
  Program done(std::vector<std::int32_t> outs) {
    for (auto v : outs)
      p.outputs.push_back(ProgramOutput{"y" + std::to_string(v), v, p.shapes[static_cast<std::size_t>(v)]});
    std::vector<std::int32_t> last(p.lens.size(), -1);
    for (std::size_t i = 0; i < p.steps.size(); ++i)
      for (const auto& a : p.steps[i].args)
        if (a.kind == Arg::Kind::kValue) last[static_cast<std::size_t>(a.id)] = static_cast<std::int32_t>(i);
    p.free.assign(p.steps.size(), {});
    for (std::size_t v = 0; v < last.size(); ++v) {
      const bool out =
          std::any_of(outs.begin(), outs.end(), [&](auto o) { return o == static_cast<std::int32_t>(v); });
      if (last[v] >= 0 && !out) p.free[static_cast<std::size_t>(last[v])].push_back(static_cast<std::int32_t>(v));
    }
    return p;
  }
};

}  // namespace facetrace::faces
