/// @file
/// `facetrace info [--json]`: GPU, versions, executor mode, state and ring stats (runtime.md); the JSON form
/// through nlohmann_json. Exits kExitOk: no GPU is a state to report, not a failure, unless --require-gpu asks
/// for a ready GPU (container health checks, docs/cli.md "info"): then kExitGpuUnavailable when it is not.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "exit_codes.h"
#include "facetrace/runtime/backend.h"

namespace facetrace::cli {
namespace {

std::string version_string(int v, int major_div, int minor_div) {
  if (v <= 0) return "n/a";
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div) +
         (minor_div > 1 ? "." + std::to_string(v % minor_div) : std::string());
}

/// --require-gpu: kExitGpuUnavailable, with the state on stderr, unless the GPU is ready.
int required_gpu_code(bool require_gpu, runtime::BackendState state, const std::string& state_text) {
  if (!require_gpu || state == runtime::BackendState::kReady) return kExitOk;
  std::fprintf(stderr, "facetrace info: --require-gpu: the GPU is not ready (%s)\n", state_text.c_str());
  return kExitGpuUnavailable;
}

int run_info(bool json, bool require_gpu) {
  using namespace facetrace::runtime;
  auto backend = GpuBackend::acquire();
  const auto state = backend->state();
  const auto info = backend->device_info();
  std::string state_text;
  switch (state) {
    case BackendState::kReady: state_text = "ready"; break;
    case BackendState::kLost: state_text = "lost: " + backend->last_lost_reason().value_or("?"); break;
    case BackendState::kNone: state_text = "none: " + backend->unavailable_reason().value_or("?"); break;
  }
  std::optional<RingStats> ring;
  if (state == BackendState::kReady && backend->executor() != nullptr) {
    if (auto s = backend->executor()->ring_stats()) ring = *s;
  }
  const std::string mode(executor_mode_name(executor_mode_from_env()));
  if (json) {
    nlohmann::json j;
    j["executor"] = mode;
    j["state"] = state == BackendState::kReady ? "ready" : state == BackendState::kLost ? "lost" : "none";
    j["reason"] = state == BackendState::kReady ? "" : state_text.substr(state_text.find(": ") + 2);
    if (info) {
      j["gpu"] = {
          {"name", info->name},
          {"compute_capability", std::to_string(info->cc_major) + "." + std::to_string(info->cc_minor)},
          {"total_memory_bytes", info->total_memory},
          {"free_memory_bytes", info->free_memory},
          {"multiprocessors", info->multiprocessors},
          {"async_engines", info->async_engines}};
      j["versions"] = {{"driver", version_string(info->driver_version, 1000, 10)},
                       {"runtime", version_string(info->runtime_version, 1000, 10)},
                       {"cudnn", version_string(info->cudnn_version, 10000, 100)},
                       {"cublas", version_string(info->cublas_version, 10000, 100)}};
    }
    if (ring) {
      j["ring"] = {{"dispatches", ring->dispatches},
                   {"stalls", ring->stalls},
                   {"peak_in_flight", ring->peak_in_flight},
                   {"slots", ring->slots},
                   {"pinned_bytes", ring->pinned_bytes},
                   {"budget_bytes", ring->budget_bytes},
                   {"max_slots_per_class", ring->max_slots_per_class}};
    }
    std::printf("%s\n", j.dump(2).c_str());
    return required_gpu_code(require_gpu, state, state_text);
  }
  std::printf("executor:  %s\n", mode.c_str());
  std::printf("state:     %s\n", state_text.c_str());
  if (info) {
    std::printf("gpu:       %s (compute %d.%d, %d SMs, %d copy engines)\n", info->name.c_str(),
                info->cc_major, info->cc_minor, info->multiprocessors, info->async_engines);
    std::printf("memory:    %.1f GiB total, %.1f GiB free\n", info->total_memory / 1073741824.0,
                info->free_memory / 1073741824.0);
    std::printf("driver:    %s   runtime: %s   cuDNN: %s   cuBLAS: %s\n",
                version_string(info->driver_version, 1000, 10).c_str(),
                version_string(info->runtime_version, 1000, 10).c_str(),
                version_string(info->cudnn_version, 10000, 100).c_str(),
                version_string(info->cublas_version, 10000, 100).c_str());
  }
  if (ring) {
    std::printf(
        "ring:      %llu dispatches, %llu stalls, peak %llu in flight, %llu slots, %llu/%llu pinned bytes\n",
        static_cast<unsigned long long>(ring->dispatches), static_cast<unsigned long long>(ring->stalls),
        static_cast<unsigned long long>(ring->peak_in_flight), static_cast<unsigned long long>(ring->slots),
        static_cast<unsigned long long>(ring->pinned_bytes),
        static_cast<unsigned long long>(ring->budget_bytes));
  }
  return required_gpu_code(require_gpu, state, state_text);
}

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("info", "GPU, driver/runtime/cuDNN/cuBLAS versions, executor mode and state");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, std::string("print JSON"));
  auto require_gpu = std::make_shared<bool>(false);
  cmd->add_flag("--require-gpu", *require_gpu,
                std::string("exit 43 unless the GPU is ready (for container health checks)"));
  cmd->callback([&exit_code, json, require_gpu] { exit_code = run_info(*json, *require_gpu); });
}

}  // namespace facetrace::cli
