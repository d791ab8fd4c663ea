/// @file
/// The render loop with GPU requests and CPU fallback (docs/design/tracer.md §10.4, §10.7).
#include "facetrace/tracer/renderer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "log.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/cpu_tracer.h"
#ifdef FT_HAVE_CUDA_TRACER
#include "gpu/ops.h"
#endif

namespace facetrace::tracer {
namespace {

constexpr double kTargetRequestMs = 100.0;          // docs/design/tracer.md §10.7
constexpr std::uint32_t kMaxRequestSamples = 2048;  // docs/design/tracer.md §10.7
constexpr double kMaxGrowth = 4.0;                  // docs/design/tracer.md §10.7
constexpr double kTargetBatchMs = 1000.0;      // docs/design/tracer.md §10.7: chained requests per batch
constexpr std::size_t kMaxBatchRequests = 16;  // docs/design/tracer.md §10.7

/// Next request size from the last one's duration: aim at 100 ms, grow at most 4×, cap 2048.
std::uint32_t next_request_samples(std::uint32_t last, double last_ms, std::uint32_t remaining) {
  double n = last;
  if (last_ms > 0.0) n = last * std::min(kMaxGrowth, kTargetRequestMs / last_ms);
  const auto v = static_cast<std::uint32_t>(std::clamp(n, 1.0, static_cast<double>(kMaxRequestSamples)));
  return std::min(v, remaining);
}

/// What sizes a scene's GPU requests: the request size that met the target in an earlier render() of this
/// process (a worker renders many units of one scene), so a later render starts there instead of at 1 sample.
struct SizeHint {
  std::uint32_t width = 0, height = 0, max_bounces = 0;
  std::string material;
  double ms_per_sample = 0;  ///< GPU time per sample (all pixels) of the largest batch of the last render
  double ns_per_tuple = 0;   ///< the chunk-sizing estimate of that batch's last request
};
std::mutex hint_mu;
SizeHint size_hint;

bool same_shape(const SizeHint& h, const Scene& s) {
  return h.width == s.width && h.height == s.height && h.max_bounces == s.max_bounces &&
         h.material == s.material.name;
}

}  // namespace

Expected<RenderDevice> parse_render_device(const std::string& name) {
  if (name == "auto") return RenderDevice::kAuto;
  if (name == "cpu") return RenderDevice::kCpu;
  if (name == "gpu") return RenderDevice::kGpu;
  return invalid_argument("--device: unknown device \"" + core::printable(name) +
                          "\"; expected auto, cpu or gpu");
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
    gpu = options.backend ? options.backend : &shared_gpu_backend();  // the first use starts the GPU child
    report.gpu_start_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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
  auto cancelled = [&] { return options.cancel && options.cancel->load(std::memory_order_acquire); };
  auto cpu_request = [&](std::uint32_t first, std::uint32_t n) -> Status {
    cpu.progress = options.progress ? std::function<void(double)>([&, n](double f) {
      options.progress((static_cast<double>(done) + f * n) / samples);
    })
                                    : std::function<void(double)>();
    FT_TRY(cpu_accumulate(scene, first, n, film, cpu));
    report.cpu_samples += n;
    report.request_samples.push_back(n);
    return {};
  };

  const std::uint32_t fixed = options.samples_per_request;
  std::uint32_t n = fixed ? fixed : 1;
  double last_ms = 0.0;        // duration of the last request (the mean over the last batch)
  bool sized = fixed != 0;     // requests are at their size: chain them (docs/design/tracer.md §10.7)
  double ns_per_tuple = 0.0;   // the GPU's chunk-sizing estimate, passed from batch to batch
  double ms_per_sample = 0.0;  // of this render's largest GPU batch, for the next render of this scene
  std::uint64_t largest_batch = 0;
  if (gpu && !fixed) {
    std::lock_guard lock(hint_mu);
    if (size_hint.ms_per_sample > 0.0 && same_shape(size_hint, scene)) {
      n = static_cast<std::uint32_t>(std::clamp(kTargetRequestMs / size_hint.ms_per_sample, 1.0,
                                                static_cast<double>(kMaxRequestSamples)));
      ns_per_tuple = size_hint.ns_per_tuple;
      sized = true;
    }
  }
  bool first_request = true;
  while (done < samples) {
    if (cancelled()) return Status(Code::kCancelled, "render cancelled");
    const auto remaining = static_cast<std::uint32_t>(samples - done);
    if (fixed)
      n = std::min(fixed, remaining);
    else if (!first_request || !sized)
      n = next_request_samples(n, last_ms, remaining);
    n = std::min(n, remaining);
    first_request = false;
    const auto first = static_cast<std::uint32_t>(first_sample + done);
    const auto r0 = std::chrono::steady_clock::now();
    if (!gpu) {
      FT_TRY(cpu_request(first, n));
      done += n;
      last_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count();
      if (options.progress) options.progress(static_cast<double>(done) / samples);
      continue;
    }
    // Once sized, consecutive requests run as one batch of chained requests (TraceWorkload::follow), about a
    // second of them, so that the device never drains between them; until then, one request at a time.
    std::size_t k = 1;
    if (sized) {
      const double per = last_ms > 0.0 ? last_ms : kTargetRequestMs;
      k = static_cast<std::size_t>(
          std::clamp(kTargetBatchMs / per, 1.0, static_cast<double>(kMaxBatchRequests)));
      k = std::min<std::size_t>(k, (remaining + n - 1) / n);
    }
    GpuChunkOptions chunk = options.chunk;
    if (chunk.ns_per_tuple_hint <= 0.0) chunk.ns_per_tuple_hint = ns_per_tuple;
    std::vector<std::unique_ptr<TraceWorkload>> work;
    std::vector<runtime::Workload*> items;
    std::vector<std::uint32_t> sizes;
    std::uint32_t queued = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint32_t m = std::min(n, remaining - queued);
      work.push_back(std::make_unique<TraceWorkload>(scene, first + queued, m, film, chunk));
      if (i > 0) work[i]->follow(*work[i - 1]);
      items.push_back(work.back().get());
      sizes.push_back(m);
      queued += m;
    }
    std::vector<runtime::Outcome> outcomes(k, runtime::Outcome::kDeclined);
    std::vector<Status> why(k);
    std::uint64_t committed = 0;
    gpu->accumulate_batch(
        items, options.cancel,
        [&](std::size_t i, runtime::Outcome o) {
          outcomes[i] = o;
          if (o != runtime::Outcome::kDone) return;
          committed += sizes[i];
          if (options.progress) options.progress(static_cast<double>(done + committed) / samples);
        },
        why);
    const double batch_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0).count();
    // A batch commits a prefix of its requests; the first one that did not finish ends it.
    std::size_t ok = 0;
    for (; ok < k && outcomes[ok] == runtime::Outcome::kDone; ++ok) {
      report.outcomes.push_back(runtime::Outcome::kDone);
      report.gpu_samples += sizes[ok];
      report.request_samples.push_back(sizes[ok]);
      done += sizes[ok];
    }
    if (ok > 0) {
      last_ms = batch_ms / static_cast<double>(ok);
      ns_per_tuple = work[ok - 1]->ns_per_tuple();
      if (const std::uint64_t got = done - (first - first_sample); got >= largest_batch) {
        largest_batch = got;
        ms_per_sample = batch_ms / static_cast<double>(got);
      }
      FT_LOG_DEBUG("GPU batch: {} request(s) of {} spp in {:.1f} ms", ok, n, batch_ms);
    }
    if (ok < k) {
      report.outcomes.push_back(outcomes[ok]);
      if (outcomes[ok] == runtime::Outcome::kCancelled) return Status(Code::kCancelled, "render cancelled");
      // Declined: the CPU renders this request; the requests after it go round the loop again (a chained
      // request after a declined one declines without a reason of its own: only this one counts).
      ++report.declined;
      const std::uint32_t m = sizes[ok];
      const auto first_cpu = static_cast<std::uint32_t>(first_sample + done);
      const std::string where =
          "samples [" + std::to_string(first_cpu) + ", " + std::to_string(first_cpu + m) + ")";
      report.decline_reasons.push_back(where + ": " + why[ok].what());
      // Only a device loss (the runtime replaces the child, docs/design/runtime.md §6) may fall back under
      // --device gpu; any other decline would be a silent 100x slowdown, so it fails the render.
      if (why[ok].code() == Code::kDeviceLost) {
        ++report.declined_by_loss;
      } else if (options.device == RenderDevice::kGpu) {
        return Status(Code::kDeclined, "--device gpu: the GPU declined " + where + " (" + why[ok].what() +
                                           "); not rendering it on the CPU");
      } else {
        static std::once_flag warned;
        std::call_once(warned, [&] {
          FT_LOG_WARN("GPU declined {} ({}); rendering on the CPU (said once)", where, why[ok].what());
        });
      }
      FT_LOG_DEBUG("GPU declined samples [{}, {}); the CPU renders them", first_cpu, first_cpu + m);
      const auto c0 = std::chrono::steady_clock::now();
      FT_TRY(cpu_request(first_cpu, m));
      done += m;
      last_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
      sized = fixed != 0;
      n = m;
    } else if (!fixed && !sized && last_ms >= kTargetRequestMs / 2) {
      sized = true;  // the next size is within 2× of this one
    }
    if (options.progress) options.progress(static_cast<double>(done) / samples);
  }
  if (gpu && ms_per_sample > 0.0) {
    std::lock_guard lock(hint_mu);
    size_hint = SizeHint{scene.width,         scene.height,  scene.max_bounces,
                         scene.material.name, ms_per_sample, ns_per_tuple};
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
