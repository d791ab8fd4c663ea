/// @file
/// `facetrace info [--json] [--list-devices] [--require-gpu]`: GPU, versions, executor mode, state and ring
/// stats (docs/runtime.md); the JSON form through nlohmann_json. Exits kExitOk: no GPU is a state to report, not
/// a failure, unless --require-gpu asks for a ready GPU (container health checks, docs/cli.md "info"): then
/// kExitGpuUnavailable when it is not. `--list-devices` lists every visible device (index, UUID, PCI bus,
/// whether this build runs on it).
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
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
    case BackendState::kUnsupported:
      state_text = backend->unavailable_reason().value_or("not supported");
      break;
  }
  std::optional<RingStats> ring;
  if (state == BackendState::kReady && backend->executor() != nullptr) {
    if (auto s = backend->executor()->ring_stats()) ring = *s;
  }
  const std::string mode(executor_mode_name(executor_mode_from_env()));
  if (json) {
    nlohmann::json j;
    j["executor"] = mode;
    j["state"] = state == BackendState::kReady         ? "ready"
                 : state == BackendState::kLost        ? "lost"
                 : state == BackendState::kUnsupported ? "not supported"
                                                       : "none";
    j["reason"] = state == BackendState::kReady ? "" : state_text.substr(state_text.find(": ") + 2);
    j["built_for"] = built_cuda_architectures();
    if (info) {
      j["gpu"] = {
          {"name", info->name},
          {"compute_capability", std::to_string(info->cc_major) + "." + std::to_string(info->cc_minor)},
          {"total_memory_bytes", info->total_memory},
          {"free_memory_bytes", info->free_memory},
          {"multiprocessors", info->multiprocessors},
          {"async_engines", info->async_engines},
          {"index", info->ordinal},
          {"uuid", info->uuid},
          {"cuda_visible_devices", info->visible_devices}};
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
  std::printf("built for: %s\n", built_cuda_architectures().c_str());
  if (info) {
    std::printf("gpu:       %s (compute %d.%d, %d SMs, %d copy engines)\n", info->name.c_str(),
                info->cc_major, info->cc_minor, info->multiprocessors, info->async_engines);
    if (!info->uuid.empty())
      std::printf("device:    %d of CUDA_VISIBLE_DEVICES=%s, %s\n", info->ordinal,
                  info->visible_devices.empty() ? "(unset)" : info->visible_devices.c_str(),
                  info->uuid.c_str());
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

/// `info --list-devices`: every device the GPU child would see, through the child (never CUDA here).
int run_list_devices(bool json) {
  using namespace facetrace::runtime;
  auto devices = list_devices();
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (json) {
    nlohmann::json j;
    j["cuda_visible_devices"] = visible ? visible : "";
    j["built_for"] = built_cuda_architectures();
    j["devices"] = nlohmann::json::array();
    if (devices) {
      for (const auto& d : *devices)
        j["devices"].push_back(
            {{"index", d.index},
             {"uuid", d.uuid},
             {"pci_bus_id", d.pci_bus_id},
             {"name", d.name},
             {"compute_capability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
             {"total_memory_bytes", d.total_memory},
             {"status", d.status}});
    } else {
      j["error"] = devices.status().what();
    }
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  std::printf("CUDA_VISIBLE_DEVICES: %s   built for: %s\n", visible ? visible : "(unset)",
              built_cuda_architectures().c_str());
  if (!devices) {
    std::printf("no devices: %s\n", devices.status().what().c_str());
    return kExitOk;
  }
  if (devices->empty()) std::printf("no devices visible\n");
  for (const auto& d : *devices)
    std::printf("%d  %s  %s  %s (compute %d.%d, %.1f GiB)  %s\n", d.index, d.uuid.c_str(),
                d.pci_bus_id.c_str(), d.name.c_str(), d.cc_major, d.cc_minor, d.total_memory / 1073741824.0,
                d.status.c_str());
  return kExitOk;
}

}  // namespace

void register_info(CLI::App& app, int& exit_code) {
  auto* cmd =
      app.add_subcommand("info", "GPU, driver/runtime/cuDNN/cuBLAS versions, executor mode and state");
  auto json = std::make_shared<bool>(false);
  auto list = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, std::string("print JSON"));
  cmd->add_flag(
      "--list-devices", *list,
      std::string("list every visible GPU (index for --gpu-device, UUID, PCI bus, usable or why not)"));
  auto require_gpu = std::make_shared<bool>(false);
  cmd->add_flag("--require-gpu", *require_gpu,
                std::string("exit 43 unless the GPU is ready (for container health checks)"));
  cmd->callback([&exit_code, json, list, require_gpu] {
    exit_code = *list ? run_list_devices(*json) : run_info(*json, *require_gpu);
  });
}

}  // namespace facetrace::cli
