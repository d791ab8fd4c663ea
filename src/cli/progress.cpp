/// @file
/// The progress reporter (progress.h): a bar, a line per percent, or JSON lines.
#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "facetrace/core/text.h"

namespace facetrace::cli {
namespace {

constexpr double kJsonHeartbeatS = 1.0;  // a JSON line at least this often, even without a new percent
constexpr int kBarWidth = 30;

int percent_of(std::uint64_t done, std::uint64_t total) {
  if (total == 0) return 100;
  return static_cast<int>(
      std::min<std::uint64_t>(100, static_cast<std::uint64_t>(static_cast<long double>(done) * 100 / total)));
}

}  // namespace

Expected<ProgressMode> parse_progress_mode(std::string_view text) {
  if (text == "auto") return ProgressMode::kAuto;
  if (text == "bar") return ProgressMode::kBar;
  if (text == "lines") return ProgressMode::kLines;
  if (text == "json") return ProgressMode::kJson;
  if (text == "none") return ProgressMode::kNone;
  return invalid_argument("--progress: expected auto, bar, lines, json or none, got \"" +
                          core::printable(text) + "\"");
}

ProgressMode resolve_progress_mode(ProgressMode mode, bool is_terminal) {
  if (mode != ProgressMode::kAuto) return mode;
  return is_terminal ? ProgressMode::kBar : ProgressMode::kLines;
}

ProgressReporter::ProgressReporter(ProgressMode mode, std::string label, std::uint64_t total, std::FILE* out)
    : mode_(resolve_progress_mode(mode, out != nullptr && ::isatty(::fileno(out)) == 1)),
      label_(std::move(label)),
      total_(total),
      out_(out) {
  if (out_ == nullptr) mode_ = ProgressMode::kNone;
}

ProgressReporter::~ProgressReporter() {
  if (bar_drawn_ && !finished_) std::fputc('\n', out_);  // never leave the shell prompt after a bar
}

void ProgressReporter::update(std::uint64_t done, double elapsed_s) {
  if (mode_ == ProgressMode::kNone || finished_) return;
  done = std::max(done_, std::min(done, total_));
  done_ = done;
  const int pct = percent_of(done, total_);
  switch (mode_) {
    case ProgressMode::kBar: emit(done, elapsed_s, false); break;
    case ProgressMode::kLines:
      if (pct > last_percent_) emit(done, elapsed_s, false);
      break;
    case ProgressMode::kJson:
      if (pct > last_percent_ || elapsed_s - last_emit_s_ >= kJsonHeartbeatS) emit(done, elapsed_s, false);
      break;
    default: break;
  }
}

void ProgressReporter::finish(std::uint64_t done, double elapsed_s) {
  if (mode_ == ProgressMode::kNone || finished_) return;
  done_ = std::min(done, total_);
  emit(done_, elapsed_s, true);
  if (bar_drawn_) std::fputc('\n', out_);
  finished_ = true;
  std::fflush(out_);
}

void ProgressReporter::emit(std::uint64_t done, double elapsed_s, bool final) {
  const int pct = percent_of(done, total_);
  const double fraction = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  const bool have_eta = done > 0 && elapsed_s > 0 && !final;
  const double eta = have_eta ? elapsed_s * (1 - fraction) / fraction : 0.0;
  last_percent_ = pct;
  last_emit_s_ = elapsed_s;
  switch (mode_) {
    case ProgressMode::kBar: {
      const int filled = static_cast<int>(fraction * kBarWidth);
      std::string bar(static_cast<std::size_t>(filled), '#');
      bar.resize(kBarWidth, '-');
      char eta_text[32] = "";
      if (have_eta && fraction > 0.02) std::snprintf(eta_text, sizeof eta_text, "  ETA %.0f s", eta);
      std::fprintf(out_, "\r[%s] %3d%%  %.1f s%s   ", bar.c_str(), pct, elapsed_s, eta_text);
      bar_drawn_ = true;
      break;
    }
    case ProgressMode::kLines:
      if (have_eta)
        std::fprintf(out_, "%s: %d%% (%.1f s, ETA %.1f s, %.2f M paths/s)\n", label_.c_str(), pct, elapsed_s,
                     eta, rate / 1e6);
      else
        std::fprintf(out_, "%s: %d%% (%.1f s, %.2f M paths/s)\n", label_.c_str(), pct, elapsed_s, rate / 1e6);
      break;
    case ProgressMode::kJson:
      // done/total count items (paths for a render); eta is null until something is done, 0 at the end.
      std::fprintf(
          out_, "{\"progress\":\"%s\",\"done\":%llu,\"total\":%llu,\"elapsed\":%.3f,\"eta\":", label_.c_str(),
          static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_), elapsed_s);
      if (final)
        std::fputs("0", out_);
      else if (have_eta)
        std::fprintf(out_, "%.3f", eta);
      else
        std::fputs("null", out_);
      std::fprintf(out_, ",\"paths_per_s\":%.1f}\n", rate);
      break;
    default: break;
  }
  std::fflush(out_);
}

}  // namespace facetrace::cli
