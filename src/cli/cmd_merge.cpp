/// @file
/// `facetrace merge`: adds partial files in canonical unit order (docs/design/farm.md §1) and writes the EXR of the sums,
/// the tone-mapped PNG and the raw f64 sums. Any grouping of the units into workers gives identical bits.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/farm.h"
#include "facetrace/tracer/output.h"

namespace facetrace::cli {
namespace {

struct MergeArgs {
  std::vector<std::string> parts;
  std::string exr, png, sums;
  bool allow_missing = false;
  bool quiet = false;
};

int fail(int code, const std::string& what) {
  std::fprintf(stderr, "facetrace merge: %s\n", what.c_str());
  return code;
}

int run_merge(const MergeArgs& a) {
  std::vector<core::NamedPath> inputs, outputs;
  for (const std::string& p : a.parts) inputs.push_back({"partial", p});
  if (!a.exr.empty()) outputs.push_back({"--exr", a.exr});
  if (!a.png.empty()) outputs.push_back({"--png", a.png});
  if (!a.sums.empty()) outputs.push_back({"--sums", a.sums});
  if (Status st = core::check_outputs(inputs, outputs); !st.ok()) return fail(kExitBadInput, st.what());

  const auto t0 = std::chrono::steady_clock::now();
  farm::MergeOptions options;
  options.allow_missing = a.allow_missing;
  auto merged = farm::merge_partials(a.parts, options);
  // Every refusal (mismatched, duplicated, missing, corrupt or truncated partials) is bad input.
  if (!merged.ok()) return fail(kExitBadInput, merged.status().what());
  const double merge_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const tracer::Film film = farm::to_film(*merged);
  if (!a.exr.empty()) {
    tracer::ExrInfo info;
    info.first_sample = 0;
    info.samples = merged->samples;
    info.nonfinite = merged->nonfinite;
    info.scene_json = merged->scene_json;
    info.render_seconds = merged->unit_seconds;
    info.build = merged->build_id;
    if (Status st = tracer::write_exr(a.exr, film, info); !st.ok()) return fail(kExitFailure, st.what());
  }
  if (!a.png.empty())
    if (Status st = tracer::write_png(a.png, tracer::tonemap_film(film)); !st.ok())
      return fail(kExitFailure, st.what());
  if (!a.sums.empty())
    if (Status st = farm::write_ftsum(a.sums, *merged); !st.ok()) return fail(kExitFailure, st.what());

  if (!merged->missing.empty())
    std::fprintf(stderr, "facetrace merge: %zu of %llu units missing (merged without them): %s\n",
                 merged->missing.size(), static_cast<unsigned long long>(merged->units_total),
                 farm::format_unit_list(merged->missing).c_str());
  if (!a.quiet) {
    std::string mix;
    if (merged->cpu_units) mix += std::to_string(merged->cpu_units) + " cpu";
    if (merged->gpu_units) mix += (mix.empty() ? "" : ", ") + std::to_string(merged->gpu_units) + " gpu";
    if (merged->mixed_units) mix += (mix.empty() ? "" : ", ") + std::to_string(merged->mixed_units) + " gpu+cpu";
    std::printf(
        "merged %llu of %llu units of %s (%ux%u, N = %llu samples per pixel; %s; %llu non-finite) in %.2f s; "
        "the units rendered in %.2f s\n",
        static_cast<unsigned long long>(merged->units_merged),
        static_cast<unsigned long long>(merged->units_total), core::printable(merged->job_name).c_str(),
        merged->width, merged->height, static_cast<unsigned long long>(merged->samples), mix.c_str(),
        static_cast<unsigned long long>(merged->nonfinite), merge_s, merged->unit_seconds);
    for (const auto& o : outputs) std::printf("wrote %s\n", core::printable(o.path).c_str());
  }
  return kExitOk;
}

}  // namespace

void register_merge(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<MergeArgs>();
  auto* cmd = app.add_subcommand(
      "merge", "Add partial files (.ftp) in canonical unit order into the EXR of the sums, a PNG and raw f64 sums");
  cmd->add_option("parts", args->parts, "partial files, or directories of them")->type_name("PART")->required();
  cmd->add_option("--exr", args->exr, "write the EXR (beauty + sums parts)")->type_name("FILE");
  cmd->add_option("--png", args->png, "write the tone-mapped PNG")->type_name("FILE");
  cmd->add_option("--sums", args->sums, "write the raw f64 sums (.ftsum)")->type_name("FILE");
  cmd->add_flag("--allow-missing", args->allow_missing,
                "merge even when units are missing (N then counts only the units present)");
  cmd->add_flag("-q,--quiet", args->quiet, "no summary");
  cmd->callback([args, &exit_code] { exit_code = run_merge(*args); });
}

}  // namespace facetrace::cli
