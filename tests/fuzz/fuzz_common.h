/// @file
/// Shared bits of the libFuzzer targets (docs/testing.md "Fuzzing"): silence the library's logger, and a
/// check that aborts (so libFuzzer records the input as a crash) when a property of the code under test fails.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace facetrace::fuzz {

/// The library logs refusals at warn/error; thousands of them per second would only slow the fuzzer down.
inline void quiet_logs() { spdlog::set_level(spdlog::level::off); }

/// Aborts with `what` when `ok` is false: a broken invariant is a finding, like a crash.
inline void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace facetrace::fuzz
