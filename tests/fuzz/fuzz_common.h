/// @file
/// Shared bits of the libFuzzer targets (docs/testing.md "Fuzzing"): silence the library's logger, and a
/// check that aborts (so libFuzzer records the input as a crash) when a property of the code under test fails.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace facetrace::fuzz {

/// Turns the library's logging off: it logs refusals at warn/error, thousands per second (fuzz_common.cpp).
void quiet_logs();

/// Aborts with `what` when `ok` is false: a broken invariant is a finding, like a crash.
inline void check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace facetrace::fuzz
