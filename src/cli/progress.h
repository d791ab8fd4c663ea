/// @file
/// Private: `--progress auto|bar|lines|json|none` on stderr (docs/cli.md "Progress"), shared by the commands
/// that run for a while (render; worker and merge may use it too). The reporter is handed the time, never
/// reads a clock, so that tests drive it line by line.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "facetrace/core/status.h"

namespace facetrace::cli {

enum class ProgressMode : std::uint8_t {
  kAuto,   ///< kBar on a terminal, kLines otherwise
  kBar,    ///< one line redrawn in place (at most 10 times a second: the caller's polling rate)
  kLines,  ///< a line per whole percent reached
  kJson,   ///< one JSON object per line: done, total, elapsed, eta, paths_per_s (per percent, ≥ 1 a second)
  kNone,
};

/// "auto", "bar", "lines", "json", "none"; kInvalidArgument naming the value and the choices otherwise.
Expected<ProgressMode> parse_progress_mode(std::string_view text);

/// kAuto resolved for an output that is (or is not) a terminal; any other mode unchanged.
ProgressMode resolve_progress_mode(ProgressMode mode, bool is_terminal);

/// Draws the progress of one piece of work of `total` items (paths for a render) into `out`.
class ProgressReporter {
 public:
  /// `label` starts every line ("render"); kAuto is resolved against isatty(fileno(out)).
  ProgressReporter(ProgressMode mode, std::string label, std::uint64_t total, std::FILE* out = stderr);
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// `done` of `total` items after `elapsed_s` seconds (done is clamped to total and never goes back).
  void update(std::uint64_t done, double elapsed_s);
  /// The final state: a last bar, line or object at `done` (whatever it is), then a newline after a bar.
  void finish(std::uint64_t done, double elapsed_s);

  [[nodiscard]] ProgressMode mode() const { return mode_; }

 private:
  void emit(std::uint64_t done, double elapsed_s, bool final);

  ProgressMode mode_;
  std::string label_;
  std::uint64_t total_;
  std::FILE* out_;
  std::uint64_t done_ = 0;
  int last_percent_ = -1;
  double last_emit_s_ = -1;
  bool bar_drawn_ = false;
  bool finished_ = false;
};

}  // namespace facetrace::cli
