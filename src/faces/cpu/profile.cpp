/// @file
/// The interpreter's profiler: per step group, the summed wall time and conv MACs, printed at process exit.
#include "cpu/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace facetrace::faces::detail {
namespace {

struct Profile {
  struct Entry {
    std::string what;
    double ms = 0;
    std::int64_t macs = 0, calls = 0;
  };
  std::mutex mu;
  std::map<std::pair<const Program*, std::size_t>, Entry> entries;
  static Profile& get() {
    static Profile pr;
    return pr;
  }
  void add(std::size_t i, const Program& prog, std::size_t n, double ms) {
    std::lock_guard<std::mutex> lock(mu);
    Entry& e = entries[{&prog, i}];
    if (e.calls++ == 0) {
      for (std::size_t d = 0; d < n; ++d) {
        const Step& st = prog.steps[i + d];
        if (const auto* c = std::get_if<ConvJob>(&st.op)) {
          e.macs += c->macs();
          e.what += "conv" + std::to_string(c->kh) + "x" + std::to_string(c->kw) +
                    (c->groups > 1 ? "dw" : "") + "/" + std::to_string(c->sh) + " " + std::to_string(c->cin) +
                    "->" + std::to_string(c->cout) + "@" + std::to_string(c->h) + "x" + std::to_string(c->w) +
                    " ";
        } else {
          e.what += "op" + std::to_string(st.op.index()) + " ";
        }
      }
    }
    e.ms += ms;
  }
  ~Profile() {
    std::vector<Entry> v;
    double total = 0;
    for (auto& [k, e] : entries) v.push_back(e), total += e.ms;
    std::sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.ms > b.ms; });
    std::fprintf(stderr, "faces profile: %.1f ms in %zu step groups\n", total, v.size());
    for (const auto& e : v)
      std::fprintf(stderr, "%9.3f ms %5.1f%% %6lld calls %7.1f GFLOP/s  %s\n", e.ms, 100 * e.ms / total,
                   static_cast<long long>(e.calls),
                   e.macs ? 2e-6 * static_cast<double>(e.macs) * static_cast<double>(e.calls) / e.ms : 0.0,
                   e.what.c_str());
  }
};

}  // namespace

bool profile_on() {
  static const bool v = [] {
    const char* e = std::getenv("FACETRACE_FACES_PROFILE");
    return e && *e && std::strcmp(e, "0") != 0;
  }();
  return v;
}

void profile_add(const Program& prog, std::size_t i, std::size_t n, double ms) {
  Profile::get().add(i, prog, n, ms);
}

}  // namespace facetrace::faces::detail
