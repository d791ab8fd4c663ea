/// @file
/// `--version` text and the exit-code footer of `--help` (version.h).
#include "version.h"

#include <string>

#include "exit_codes.h"

#ifndef FT_PROJECT_VERSION
#define FT_PROJECT_VERSION "unknown"
#endif

namespace facetrace::cli {
namespace {

#ifdef FT_CUDA_RUNTIME_VERSION
/// The oldest Linux driver a CUDA major release runs on (the CUDA toolkit release notes' minor-version
/// compatibility table); "" when not known here.
std::string minimum_driver(const std::string& cuda_version) {
  const std::string major = cuda_version.substr(0, cuda_version.find('.'));
  if (major == "13") return "580";
  if (major == "12") return "525";
  if (major == "11") return "450";
  return "";
}
#endif

}  // namespace

std::string version_text() {
  std::string s = std::string("facetrace ") + FT_PROJECT_VERSION + " (git " + build_git_sha() + ")\n";
#ifdef FT_CUDA_RUNTIME_VERSION
  const std::string cuda = FT_CUDA_RUNTIME_VERSION;
  s += "CUDA runtime " + cuda;
  if (const std::string drv = minimum_driver(cuda); !drv.empty()) s += " (needs driver >= " + drv + ")";
#ifdef FT_CUDA_ARCHS
  s += "; architectures: " + std::string(FT_CUDA_ARCHS);
#endif
#else
  s += "CUDA: none (built without CUDA; --device gpu is not available)";
#endif
  return s;
}

std::string exit_code_help() {
  struct Row {
    int code;
    const char* meaning;
  };
  static constexpr Row kRows[] = {
      {kExitOk, "done"},
      {kExitFailure, "failure (I/O, not supported by this build or GPU, a GPU request fell back)"},
      {kExitBadInput, "bad usage or bad input (every command-line error)"},
      {kExitInvalidJob, "invalid job or scene: permanent, do not retry"},
      {kExitGpuUnavailable, "GPU required but unavailable or lost, no fallback: retry elsewhere"},
      {kExitHangup, "interrupted by SIGHUP"},
      {kExitCancelled, "interrupted by SIGINT"},
      {kExitTerminated, "interrupted by SIGTERM (finished work is flushed first)"},
  };
  std::string s = "Exit codes (docs/cli.md):";
  for (const Row& r : kRows) {
    std::string code = std::to_string(r.code);
    code.resize(5, ' ');
    s += "\n  " + code + r.meaning;
  }
  return s;
}

}  // namespace facetrace::cli
