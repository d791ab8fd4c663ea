/// @file
/// The render loop with GPU requests and CPU fallback (docs/design/tracer.md §10.4, §10.7).
#include "facetrace/tracer/renderer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>

#include "log.h"
#include "facetrace/tracer/cpu_tracer.h"
#ifdef FT_HAVE_CUDA_TRACER
#include "gpu/ops.h"
#endif

namespace facetrace::tracer {
namespace {

constexpr double kTargetRequestMs = 100.0;          // docs/design/tracer.md §10.7
constexpr std::uint32_t kMaxRequestSamples = 2048;  // docs/design/tracer.md §10.7
constexpr double kMaxGrowth = 4.0;                  // docs/design/tracer.md §10.7

/// Next request size from the last one's duration: aim at 100 ms, grow at most 4×, cap 2048.
std::uint32_t next_request_samples(std::uint32_t last, double last_ms, std::uint32_t remaining) {
  double n = last;
  if (last_ms > 0.0) n = last * std::min(kMaxGrowth, kTargetRequestMs / last_ms);
  const auto v = static_cast<std::uint32_t>(std::clamp(n, 1.0, static_cast<double>(kMaxRequestSamples)));
  return std::min(v, remaining);
}

}  // namespace

Expected<RenderDevice> parse_render_device(const std::string& name) {
  if (name == "auto") return RenderDevice::kAuto;
  if (name == "cpu") return RenderDevice::kCpu;
  if (name == "gpu") return RenderDevice::kGpu;
  return invalid_argument("--device: unknown device \"" + name + "\"; expected auto, cpu or gpu");
}

runtime::GpuBackend& shared_gpu_backend() {
#ifdef FT_HAVE_CUDA_TRACER
  // In-process executors dispatch through this process's registry (idempotent; the child has it linked in).
  runtime::OpRegistry::global().add_provider(&register_tracer_ops);
#endif
  return runtime::shared_backend();  // one backend per process, shared with the face networks
}

Expected<RenderReport> render(const Scene& scene, std::uint64_t first_sample, std::uint32_t samples,
                              Film& film, const RenderOptions& options) {
  FT_TRY(validate_scene(scene));
  if (film.width != scene.width || film.height != scene.height || film.xyz.size() != film.pixels() * 3 ||
      film.samples.size() != film.pixels())
    return invalid_argument("film does not match the scene's " + std::to_string(scene.width) + "x" +
                            std::to_string(scene.height));
  if (first_sample + samples > 0xFFFFFFFFull) return invalid_argument("sample range exceeds 2^32");
  const auto t0 = std::chrono::steady_clock::now();
  RenderReport report;

  runtime::GpuBackend* gpu = nullptr;
  if (options.device != RenderDevice::kCpu) {
    gpu = options.backend ? options.backend : &shared_gpu_backend();
    if (auto why = gpu->unavailable_reason()) {
      if (options.device == RenderDevice::kGpu) return not_supported("--device gpu: no usable GPU: " + *why);
      FT_LOG_INFO("no usable GPU ({}); rendering on the CPU", *why);
      gpu = nullptr;
    } else if (Status tier = tier_features(scene).status(); !tier.ok()) {
      if (options.device == RenderDevice::kGpu)
        return not_supported("--device gpu: the GPU tracer does not render this scene: " + tier.what());
      FT_LOG_INFO("GPU tracer declines this scene ({}); rendering on the CPU", tier.what());
      gpu = nullptr;
    }
  }

  CpuOptions cpu;
  cpu.threads = options.threads;
  cpu.cancel = options.cancel;
  std::uint64_t done = 0;
  std::uint32_t n = options.samples_per_request ? options.samples_per_request : 1;
  double last_ms = 0.0;
  auto cancelled = [&] { return options.cancel && options.cancel->load(std::memory_order_acquire); };
  while (done < samples) {
    if (cancelled()) return Status(Code::kCancelled, "render cancelled");
    const auto remaining = static_cast<std::uint32_t>(samples - done);
    n = options.samples_per_request ? std::min(options.samples_per_request, remaining)
                                    : next_request_samples(n, last_ms, remaining);
    const std::uint32_t first = static_cast<std::uint32_t>(first_sample + done);
    const auto r0 = std::chrono::steady_clock::now();
    bool rendered = false;
    if (gpu) {
      TraceWorkload work(scene, first, n, film, options.chunk);
      Status why;
      const runtime::Outcome o = gpu->accumulate(work, options.cancel, &why);
      report.outcomes.push_back(o);
      if (o == runtime::Outcome::kCancelled) return Status(Code::kCancelled, "render cancelled");
      if (o == runtime::Outcome::kDone) {
        report.gpu_samples += n;
        rendered = true;
      } else {
        ++report.declined;
        const std::string where =
            "samples [" + std::to_string(first) + ", " + std::to_string(first + n) + ")";
        report.decline_reasons.push_back(where + ": " + why.what());
        // Only a device loss (the runtime replaces the child, docs/design/runtime.md §6) may fall back under
        // --device gpu; any other decline would be a silent 100x slowdown, so it fails the render.
        if (why.code() == Code::kDeviceLost) {
          ++report.declined_by_loss;
        } else if (options.device == RenderDevice::kGpu) {
          return Status(Code::kDeclined, "--device gpu: the GPU declined " + where + " (" + why.what() +
                                             "); not rendering it on the CPU");
        } else {
          static std::once_flag warned;
          std::call_once(warned, [&] {
            FT_LOG_WARN("GPU declined {} ({}); rendering on the CPU (said once)", where, why.what());
          });
        }
        FT_LOG_DEBUG("GPU declined samples [{}, {}); the CPU renders them", first, first + n);
      }
    }
    if (!rendered) {
      cpu.progress = options.progress ? std::function<void(double)>([&](double f) {
        options.progress((static_cast<double>(done) + f * n) / samples);
      })
                                      : std::function<void(double)>();
      FT_TRY(cpu_accumulate(scene, first, n, film, cpu));
      report.cpu_samples += n;
    }
    report.request_samples.push_back(n);
    last_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count();
    done += n;
    if (options.progress) options.progress(static_cast<double>(done) / samples);
  }
  if (report.gpu_samples && report.cpu_samples)
    report.device = "gpu+cpu";
  else if (report.gpu_samples)
    report.device = "gpu: " + gpu->adapter_label().value_or("GPU");
  else
    report.device = "cpu";
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace facetrace::tracer
