/// @file
/// GPU test support: FT_REQUIRE_GPU skips a test, naming the reason, when this process cannot run GPU work.
#pragma once

#include <gtest/gtest.h>

#include "facetrace/runtime/executor.h"

/// Skips the current test when the runtime reports no usable GPU (docs/design/style.md §9).
#define FT_REQUIRE_GPU()                                                \
  do {                                                                  \
    if (auto why = ::facetrace::runtime::gpu_unavailable_reason(); why) \
      GTEST_SKIP() << "no usable GPU: " << *why;                        \
  } while (false)
