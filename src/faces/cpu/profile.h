/// @file
/// Private: the interpreter's profiler. FACETRACE_FACES_PROFILE=1: wall time per step group (a fused group counts
/// as one), summed over runs and printed to stderr at exit, largest first, with the MACs and GFLOP/s of its convs.
#pragma once

#include <cstddef>

#include "facetrace/faces/program.h"

namespace facetrace::faces::detail {

/// True when FACETRACE_FACES_PROFILE is set (and not "0"); read once.
bool profile_on();

/// Adds `ms` to the group of `n` steps starting at step i of `prog`. Thread-safe.
void profile_add(const Program& prog, std::size_t i, std::size_t n, double ms);

}  // namespace facetrace::faces::detail
