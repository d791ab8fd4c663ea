/// @file
/// CPU feature detection for the interpreter's kernel dispatch: cpuid flags capped by FACETRACE_FACES_KERNEL,
/// cache sizes from sysfs, and the diagnostics line.
#include "cpu/cpu_features.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "cpu/gemm.h"
#include "facetrace/core/parallel.h"

namespace facetrace::faces::detail {
namespace {

// The FACETRACE_FACES_KERNEL cap ("" when unset).
const std::string& kernel_cap() {
  static const std::string v = [] {
    const char* cap = std::getenv("FACETRACE_FACES_KERNEL");
    return std::string(cap ? cap : "");
  }();
  return v;
}

// sysfs cache size of cpu0 at `level` (data or unified), in bytes; 0 when unknown.
std::int64_t cache_bytes(int level) {
  for (int i = 0; i < 8; ++i) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::ifstream lv(dir + "level"), ty(dir + "type"), sz(dir + "size");
    int l = 0;
    std::string type, size;
    if (!(lv >> l) || !(ty >> type) || !(sz >> size)) continue;
    if (l != level || type == "Instruction" || size.empty()) continue;
    std::int64_t v = 0;
    std::size_t pos = 0;
    while (pos < size.size() && size[pos] >= '0' && size[pos] <= '9') v = v * 10 + (size[pos++] - '0');
    if (pos < size.size() && (size[pos] == 'K' || size[pos] == 'k')) v <<= 10;
    if (pos < size.size() && size[pos] == 'M') v <<= 20;
    return v;
  }
  return 0;
}

}  // namespace

bool cpu_has_avx2_fma() {
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && kernel_cap() != "sse2";
  }();
  return v;
}

bool cpu_has_avx512f() {
  static const bool v = [] {
    __builtin_cpu_init();
    return cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") && kernel_cap() != "avx2";
  }();
  return v;
}

std::int64_t l2_cache_bytes() {
  static const std::int64_t v = [] {
    const std::int64_t b = cache_bytes(2);
    return b > 0 ? b : std::int64_t{1} << 20;
  }();
  return v;
}

std::string cpu_dispatch_info() {
  __builtin_cpu_init();
  char brand[49] = {};
  unsigned regs[4];
  if (__get_cpuid(0x80000000u, &regs[0], &regs[1], &regs[2], &regs[3]) && regs[0] >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) {
      __get_cpuid(0x80000002u + i, &regs[0], &regs[1], &regs[2], &regs[3]);
      std::memcpy(brand + 16 * i, regs, 16);
    }
  }
  std::string b(brand);
  while (!b.empty() && b.back() == ' ') b.pop_back();
  while (!b.empty() && b.front() == ' ') b.erase(b.begin());
  const char* vendor = __builtin_cpu_is("amd") ? "amd" : __builtin_cpu_is("intel") ? "intel" : "other";
  auto kib = [](std::int64_t v) { return v > 0 ? std::to_string(v >> 10) + "K" : std::string("?"); };
  std::string s = "cpu: " + (b.empty() ? std::string("?") : b) + " (" + vendor + "), features:";
  s += __builtin_cpu_supports("avx2") ? " avx2" : " -avx2";
  s += __builtin_cpu_supports("fma") ? " fma" : " -fma";
  s += __builtin_cpu_supports("avx512f") ? " avx512f" : " -avx512f";
  s += ", cache L1d " + kib(cache_bytes(1)) + " L2 " + kib(cache_bytes(2)) + " L3 " + kib(cache_bytes(3));
  s += ", hw threads " + std::to_string(core::hardware_threads());
  s += "; kernels: gemm " + std::string(sgemm_kernel_name());
  s += cpu_has_avx2_fma() ? ", depthwise 3x3 avx2-fma, maxpool avx2"
                          : ", depthwise portable, maxpool portable";
  return s;
}

}  // namespace facetrace::faces::detail
