/// @file
/// libFuzzer target: the ONNX loader through faces::Net::create (protobuf parse, validation, lowering; no sha
/// check on this path). An accepted net whose input is small is also run once on zeros, which drives shape
/// inference and the CPU interpreter over whatever graph the fuzzer built.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "facetrace/faces/net.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  facetrace::fuzz::quiet_logs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace facetrace;
  faces::NetOptions options;
  options.threads = 1;
  // Smaller tensor limits than the defaults keep each execution fast; the checks that enforce them are the same.
  options.limits.max_tensor_elements = std::int64_t{1} << 18;
  options.limits.max_weight_elements = std::int64_t{1} << 18;
  options.limits.max_live_bytes = std::int64_t{32} << 20;
  auto net = faces::Net::create(std::span<const std::uint8_t>(data, size), options);
  if (!net) {
    fuzz::check(!net.status().what().empty(), "a refused model names the problem");
    return 0;
  }
  faces::Shape shape = net->input_shape();
  std::int64_t elements = 1;
  for (auto& d : shape) {
    if (d <= 0) d = 1;  // a symbolic dim: run batch 1 / size 1
    elements *= d;
    if (elements > (std::int64_t{1} << 14)) return 0;
  }
  const std::vector<float> zeros(static_cast<std::size_t>(elements), 0.0f);
  auto out = net->run(zeros, shape);
  if (out) {
    for (const auto& t : *out) {
      std::int64_t n = 1;
      for (auto d : t.shape) n *= d;
      fuzz::check(n == static_cast<std::int64_t>(t.data.size()), "an output's data matches its shape");
    }
  }
  return 0;
}
