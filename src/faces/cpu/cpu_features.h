/// @file
/// Private: what the CPU offers the interpreter's kernels, read once per process. FACETRACE_FACES_KERNEL=avx2 or
/// sse2 caps the dispatch (for A/B runs and diagnosis); unset: the best the CPU has.
#pragma once

#include <cstdint>
#include <string>

namespace facetrace::faces::detail {

/// True when the CPU has AVX2 and FMA and the cap allows them (the AVX2 paths are taken).
bool cpu_has_avx2_fma();

/// True when the CPU also has AVX-512F and the cap allows it (the AVX-512 paths are taken).
bool cpu_has_avx512f();

/// Per-core L2 cache size in bytes from sysfs (cpu0), or 1 MiB when unknown.
std::int64_t l2_cache_bytes();

/// One line for diagnostics: CPU brand and vendor, the features the dispatch looks at, cache sizes, and the
/// kernels picked.
std::string cpu_dispatch_info();

}  // namespace facetrace::faces::detail
