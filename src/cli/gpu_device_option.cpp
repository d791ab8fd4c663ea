/// @file
/// `--gpu-device`: validated by the runtime's selector rules, exported as FACETRACE_GPU_DEVICE.
#include "commands.h"

#include <cstdlib>
#include <string>

#include "facetrace/runtime/executor.h"

namespace facetrace::cli {
namespace {

void add_to(CLI::App& app) {
  app.add_option_function<std::string>(
         "--gpu-device", [](const std::string& v) { ::setenv("FACETRACE_GPU_DEVICE", v.c_str(), 1); },
         "GPU to use: an index into the visible devices (an inherited CUDA_VISIBLE_DEVICES is indexed into, "
         "not replaced) or a GPU-/MIG- UUID (facetrace info --list-devices); also FACETRACE_GPU_DEVICE")
      ->type_name("INDEX|UUID")
      ->check(
          [](const std::string& v) {
            const Status st = runtime::validate_gpu_selector(v);
            return st.ok() ? std::string() : st.what();
          },
          "INDEX|UUID")
      ->trigger_on_parse();
}

}  // namespace

void add_gpu_device_option(CLI::App& app) {
  add_to(app);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add_to(*sub);
}

}  // namespace facetrace::cli
