/// @file
/// The render loop: a GPU lane and a CPU lane over one sample cursor (docs/design/tracer.md §10.4, §10.7).
#include "facetrace/tracer/renderer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <thread>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "log.h"
#include "facetrace/core/env.h"
#include "facetrace/core/parallel.h"
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
constexpr double kCpuSliceMs = 50.0;  // docs/design/tracer.md §10.7: CPU lane slices while the GPU is down
// docs/design/tracer.md §10.7, hybrid mode: the CPU lane's share of a batch's time, and the memory its per-sample
// films may hold.
constexpr double kHybridShare = 0.8;
constexpr std::uint64_t kHybridBytes = 256ull << 20;

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// Next request size from the last one's duration: aim at `target_ms`, grow at most 4×, cap 2048.
std::uint32_t next_request_samples(std::uint32_t last, double last_ms, std::uint32_t remaining,
                                   double target_ms = kTargetRequestMs) {
  double n = last;
  if (last_ms > 0.0) n = last * std::min(kMaxGrowth, target_ms / last_ms);
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
  /// The slowest chunk's time per tuple on `backend`'s child of generation `generation` (its recoveries()), so
  /// the next render's first requests on that same child get the measured hang deadline too.
  double hang_ns_per_tuple = 0;
  const runtime::GpuBackend* backend = nullptr;
  std::uint64_t generation = 0;
};
std::mutex hint_mu;
SizeHint size_hint;

bool same_shape(const SizeHint& h, const Scene& s) {
  return h.width == s.width && h.height == s.height && h.max_bounces == s.max_bounces &&
         h.material == s.material.name;
}

/// Test seam (docs/design/tracer.md §10.7): FACETRACE_RENDER_TEST_FAULT_SAMPLE=S makes the GPU request that holds
/// sample S fault for real in the GPU child (an illegal-address kernel before its first chunk), once per process.
bool take_test_fault(std::uint64_t first, std::uint32_t n) {
  static const std::int64_t at =
      core::env_int_clamped("FACETRACE_RENDER_TEST_FAULT_SAMPLE", -1, -1, 0xFFFFFFFFll);
  static std::once_flag fired;
  if (at < 0 || static_cast<std::uint64_t>(at) < first || static_cast<std::uint64_t>(at) >= first + n)
    return false;
  bool mine = false;
  std::call_once(fired, [&] { mine = true; });
  return mine;
}

/// One render: the sample cursor (samples [first_sample, first_sample + done_) are in the film, in ascending
/// order) and the two lanes that take work from it. The GPU lane runs batches of chained requests from the
/// cursor; a request it loses with the device goes back to the cursor, and while the GPU is down (a replacement
/// child starting in the background) the CPU lane takes small slices, so the replacement takes over again as
/// soon as it is up. Every slice starts where the film ends, so the film never depends on which lane took what
/// (docs/design/tracer.md §9 G3: both add a pixel's samples in ascending order onto its running sum).
class RenderLoop {
 public:
  RenderLoop(const Scene& scene, std::uint64_t first_sample, std::uint32_t samples, Film& film,
             const RenderOptions& options, RenderReport& report, runtime::GpuBackend* gpu)
      : scene_(scene),
        first_sample_(first_sample),
        samples_(samples),
        film_(film),
        options_(options),
        report_(report),
        gpu_(gpu),
        fixed_(options.samples_per_request) {
    cpu_.threads = options.threads;
    cpu_.cancel = options.cancel;
  }

  Status run() {
    start_sizing();
    while (done_ < samples_) {
      if (cancelled()) return Status(Code::kCancelled, "render cancelled");
      if (!gpu_) {
        FT_TRY(cpu_request_sized());
      } else if (gpu_down()) {
        FT_TRY(cpu_slice());
      } else {
        FT_TRY(gpu_batch());
      }
      report_progress();
    }
    keep_size_hint();
    return {};
  }

 private:
  bool cancelled() const { return options_.cancel && options_.cancel->load(std::memory_order_acquire); }
  std::uint32_t remaining() const { return static_cast<std::uint32_t>(samples_ - done_); }
  std::uint32_t cursor() const { return static_cast<std::uint32_t>(first_sample_ + done_); }
  void report_progress() const {
    if (options_.progress) options_.progress(static_cast<double>(done_) / samples_);
  }

  /// Samples [first, first + n) on the CPU, onto the film (continuing its running sums).
  Status cpu_request(std::uint32_t first, std::uint32_t n) {
    cpu_.progress = options_.progress ? std::function<void(double)>([this, n](double f) {
      options_.progress((static_cast<double>(done_) + f * n) / samples_);
    })
                                      : std::function<void(double)>();
    FT_TRY(cpu_accumulate(scene_, first, n, film_, cpu_));
    report_.cpu_samples += n;
    report_.request_samples.push_back(n);
    report_.request_on_gpu.push_back(false);
    done_ += n;
    return {};
  }

  /// No GPU: requests sized as the GPU's would be (100 ms, or samples_per_request).
  Status cpu_request_sized() {
    n_ = fixed_ ? std::min(fixed_, remaining()) : next_request_samples(n_, last_ms_, remaining());
    const auto t0 = Clock::now();
    FT_TRY(cpu_request(cursor(), n_));
    last_ms_ = ms_since(t0);
    return {};
  }

  /// True when the CPU lane takes the next slice: once right after a loss (so every loss is followed by
  /// progress), then for as long as the device stays lost. Starts the replacement in the background.
  bool gpu_down() {
    if (!gpu_->is_lost() && !slice_due_) return false;
    gpu_->start_recovery();
    const bool due = slice_due_;
    slice_due_ = false;
    return due || gpu_->is_lost();
  }

  /// The CPU lane while the GPU is down: a slice of about kCpuSliceMs (at most samples_per_request).
  Status cpu_slice() {
    std::uint32_t n = next_request_samples(cpu_n_, cpu_last_ms_, remaining(), kCpuSliceMs);
    if (fixed_) n = std::min(n, fixed_);
    const auto t0 = Clock::now();
    FT_TRY(cpu_request(cursor(), n));
    cpu_n_ = n;
    cpu_last_ms_ = ms_since(t0);
    FT_LOG_DEBUG("GPU down: the CPU took samples [{}, {}) in {:.1f} ms", cursor() - n, cursor(),
                 cpu_last_ms_);
    return {};
  }

  /// The first request's size: fixed, or the size hint of an earlier render of this scene's shape.
  void start_sizing() {
    n_ = fixed_ ? fixed_ : 1;
    sized_ = fixed_ != 0;
    if (!gpu_) return;
    generation_ = gpu_->recoveries();
    std::lock_guard lock(hint_mu);
    if (size_hint.ms_per_sample <= 0.0 || !same_shape(size_hint, scene_)) return;
    if (size_hint.backend == gpu_ && size_hint.generation == generation_ && !gpu_->is_lost())
      hang_ns_per_tuple_ = size_hint.hang_ns_per_tuple;  // the same child as the earlier render's
    if (fixed_) return;
    n_ = static_cast<std::uint32_t>(
        std::clamp(kTargetRequestMs / size_hint.ms_per_sample, 1.0, static_cast<double>(kMaxRequestSamples)));
    ns_per_tuple_ = size_hint.ns_per_tuple;
    sized_ = true;
  }

  void keep_size_hint() const {
    if (!gpu_ || ms_per_sample_ <= 0.0) return;
    const bool same_child = gpu_->recoveries() == generation_ && !gpu_->is_lost();
    std::lock_guard lock(hint_mu);
    size_hint = SizeHint{scene_.width,
                         scene_.height,
                         scene_.max_bounces,
                         scene_.material.name,
                         ms_per_sample_,
                         ns_per_tuple_,
                         same_child ? hang_ns_per_tuple_ : 0.0,
                         gpu_,
                         generation_};
  }

  /// Hybrid mode: how many samples the CPU lane takes next to a batch expected to last `batch_ms` (0 until the
  /// GPU is sized, and never more than the per-sample films' memory allows).
  std::uint32_t hybrid_samples(double batch_ms, std::uint32_t batch_samples, std::uint32_t left) const {
    // The first sized batch runs alone: its rate is what the lane is judged against.
    if (!options_.hybrid || !sized_ || left == 0 || baseline_ms_per_sample_ <= 0.0 ||
        !report_.hybrid_stopped.empty())
      return 0;
    const std::uint64_t per_sample = film_.pixels() * (3 * sizeof(float) + sizeof(std::uint32_t));
    // At most as many as the batch beside it: the GPU stays the main lane, and the lane is judged every batch.
    const auto cap = static_cast<std::uint32_t>(
        std::min<std::uint64_t>({kHybridBytes / per_sample, 2048, std::uint64_t{batch_samples}}));
    double n = 1.0;  // one sample to measure the CPU's rate first
    if (hybrid_ms_per_sample_ > 0.0) n = std::floor(kHybridShare * batch_ms / hybrid_ms_per_sample_);
    if (options_.hybrid_min_gain <= 0.0) n = std::max(n, 1.0);  // kept to the end: never judged out
    return static_cast<std::uint32_t>(std::clamp(n, 0.0, static_cast<double>(std::min(cap, left))));
  }

  /// Hybrid mode: samples [first, first + n) on the CPU, each into its own zeroed film (so each holds that
  /// sample's exact value), on a thread of its own while the GPU batch runs.
  std::future<Expected<std::vector<Film>>> start_hybrid(std::uint32_t first, std::uint32_t n) {
    CpuOptions o;
    o.threads = hybrid_threads();
    o.cancel = options_.cancel;
    o.idle_priority = true;  // only cores the GPU lane's host work leaves free
    return std::async(std::launch::async, [this, first, n, o]() -> Expected<std::vector<Film>> {
      core::make_this_thread_idle();  // a thread of its own (std::launch::async)
      std::vector<Film> out;
      out.reserve(n);
      const auto t0 = Clock::now();
      for (std::uint32_t i = 0; i < n; ++i) {
        out.emplace_back(film_.width, film_.height);
        FT_TRY(cpu_accumulate(scene_, first + i, 1, out.back(), o));
      }
      hybrid_last_ms_per_sample_ = ms_since(t0) / n;
      return out;
    });
  }

  /// Hybrid mode: the CPU lane's samples onto the film after the batch before them, in ascending order: the
  /// same float additions, in the same order, as tracing them onto the film directly. Pixel blocks in parallel,
  /// each element summed over the samples in order (one pass over the film), since the GPU lane waits for this.
  void commit_hybrid(const std::vector<Film>& samples) {
    constexpr std::size_t kBlock = 16384;  // pixels per task
    const std::size_t pixels = film_.samples.size();
    const auto blocks = static_cast<std::int64_t>((pixels + kBlock - 1) / kBlock);
    core::parallel_for(blocks, static_cast<int>(hybrid_threads()), [&](std::int64_t b) {
      const std::size_t p0 = static_cast<std::size_t>(b) * kBlock, p1 = std::min(pixels, p0 + kBlock);
      for (std::size_t i = 3 * p0; i < 3 * p1; ++i) {
        float v = film_.xyz[i];
        for (const Film& s : samples) v += s.xyz[i];
        film_.xyz[i] = v;
      }
      for (std::size_t p = p0; p < p1; ++p) {
        std::uint32_t n = film_.samples[p];
        for (const Film& s : samples) n += s.samples[p];
        film_.samples[p] = n;
      }
    });
    for (const Film& s : samples) film_.nonfinite += s.nonfinite;
    const auto n = static_cast<std::uint32_t>(samples.size());
    report_.cpu_samples += n;
    report_.request_samples.push_back(n);
    report_.request_on_gpu.push_back(false);
    done_ += n;
  }

  unsigned hybrid_threads() const {
    if (options_.hybrid_threads) return options_.hybrid_threads;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw > 2 ? hw - 2 : 1u;
  }

  /// Hybrid mode: the CPU's measured sample takes longer than its share of a batch: the lane stops (it would
  /// hold the GPU lane up after every batch).
  void stop_hybrid_too_slow(double batch_ms) {
    char why[200];
    std::snprintf(why, sizeof why,
                  "one CPU sample (%.1f ms) does not fit in the CPU lane's share of a batch (%.0f %% of %.1f ms)",
                  hybrid_ms_per_sample_, kHybridShare * 100.0, batch_ms);
    stop_hybrid(why);
  }

  /// Hybrid mode: the lane stops for the rest of this render, and the report says why.
  void stop_hybrid(const char* why) {
    report_.hybrid_stopped = why;
    FT_LOG_INFO("hybrid: stopping the CPU lane for the rest of this render: {}", why);
  }

  /// Hybrid mode: whether the lane paid for itself next to the last batch: the time the GPU alone would have
  /// taken for the batch's `gpu_n` samples and the lane's `cpu_n` (at its rate in the last batch without a lane)
  /// against what they took (the batch, then waiting for the lane and the commit, `cost_ms`). This counts what
  /// the lane's threads slow the GPU lane's host work down by, too. Two batches in a row that do not pay stop
  /// the lane for the rest of the render (docs/design/tracer.md §10.7).
  void judge_hybrid(std::uint32_t gpu_n, std::uint32_t cpu_n, double batch_ms, double cost_ms) {
    const double alone_ms = baseline_ms_per_sample_ * (gpu_n + cpu_n), took_ms = batch_ms + cost_ms;
    const double gain = options_.hybrid_min_gain;
    hybrid_unpaid_ = gain <= 0.0 || alone_ms > gain * took_ms ? 0 : hybrid_unpaid_ + 1;
    FT_LOG_DEBUG("hybrid: {} GPU + {} CPU samples in {:.1f} + {:.1f} ms; the GPU alone: {:.1f} ms", gpu_n, cpu_n,
                 batch_ms, cost_ms, alone_ms);
    if (hybrid_unpaid_ < 2) return;
    char why[240];
    std::snprintf(why, sizeof why,
                  "the CPU lane did not pay for itself two batches in a row (the last: %u GPU + %u CPU samples in "
                  "%.1f ms, the GPU alone %.1f ms)",
                  gpu_n, cpu_n, took_ms, alone_ms);
    stop_hybrid(why);
  }

  /// One GPU batch from the cursor: chained requests (one until sized), committed as a prefix.
  Status gpu_batch() {
    // A child replaced since the last batch (this render's loss or another thread's) is measured afresh.
    if (const std::uint64_t g = gpu_->recoveries(); g != generation_) {
      generation_ = g;
      hang_ns_per_tuple_ = 0.0;
    }
    if (fixed_)
      n_ = std::min(fixed_, remaining());
    else if (!first_request_ || !sized_)
      n_ = next_request_samples(n_, last_ms_, remaining());
    n_ = std::min(n_, remaining());
    first_request_ = false;
    const std::uint32_t first = cursor();
    const auto r0 = Clock::now();
    // Once sized, consecutive requests run as one batch of chained requests (TraceWorkload::follow), about a
    // second of them, so that the device never drains between them; until then, one request at a time.
    std::size_t k = 1;
    if (sized_) {
      const double per = last_ms_ > 0.0 ? last_ms_ : kTargetRequestMs;
      k = static_cast<std::size_t>(
          std::clamp(kTargetBatchMs / per, 1.0, static_cast<double>(kMaxBatchRequests)));
      k = std::min<std::size_t>(k, (remaining() + n_ - 1) / n_);
    }
    GpuChunkOptions chunk = options_.chunk;
    if (chunk.ns_per_tuple_hint <= 0.0) chunk.ns_per_tuple_hint = ns_per_tuple_;
    if (chunk.hang_ns_per_tuple_hint <= 0.0) chunk.hang_ns_per_tuple_hint = hang_ns_per_tuple_;
    std::vector<std::unique_ptr<TraceWorkload>> work;
    std::vector<runtime::Workload*> items;
    std::vector<std::uint32_t> sizes;
    std::uint32_t queued = 0;
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint32_t m = std::min(n_, remaining() - queued);
      GpuChunkOptions c = chunk;
      if (take_test_fault(first + queued, m)) c.fault_after_chunks = 0;
      work.push_back(std::make_unique<TraceWorkload>(scene_, first + queued, m, film_, c));
      if (i > 0) work[i]->follow(*work[i - 1]);
      items.push_back(work.back().get());
      sizes.push_back(m);
      queued += m;
    }
    // Hybrid mode: the CPU lane takes the samples right after the batch while it runs.
    const double expected_ms = static_cast<double>(k) * (last_ms_ > 0.0 ? last_ms_ : kTargetRequestMs);
    const std::uint32_t cpu_n = hybrid_samples(expected_ms, queued, remaining() - queued);
    std::future<Expected<std::vector<Film>>> hybrid;
    if (cpu_n > 0)
      hybrid = start_hybrid(first + queued, cpu_n);
    else if (options_.hybrid_min_gain > 0.0 && hybrid_ms_per_sample_ > kHybridShare * expected_ms &&
             remaining() > queued && report_.hybrid_stopped.empty())
      stop_hybrid_too_slow(expected_ms);
    std::vector<runtime::Outcome> outcomes(k, runtime::Outcome::kDeclined);
    std::vector<Status> why(k);
    std::uint64_t committed = 0;
    gpu_->accumulate_batch(
        items, options_.cancel,
        [&](std::size_t i, runtime::Outcome o) {
          outcomes[i] = o;
          if (o != runtime::Outcome::kDone) return;
          committed += sizes[i];
          if (options_.progress) options_.progress(static_cast<double>(done_ + committed) / samples_);
        },
        why);
    const double batch_ms = ms_since(r0);
    // A batch commits a prefix of its requests; the first one that did not finish ends it.
    std::size_t ok = 0;
    for (; ok < k && outcomes[ok] == runtime::Outcome::kDone; ++ok) {
      report_.outcomes.push_back(runtime::Outcome::kDone);
      report_.gpu_samples += sizes[ok];
      report_.request_samples.push_back(sizes[ok]);
      report_.request_on_gpu.push_back(true);
      done_ += sizes[ok];
    }
    if (ok > 0) {
      last_ms_ = batch_ms / static_cast<double>(ok);
      ns_per_tuple_ = work[ok - 1]->ns_per_tuple();
      hang_ns_per_tuple_ = std::max(hang_ns_per_tuple_, work[ok - 1]->peak_ns_per_tuple());
      if (const std::uint64_t got = done_ - (first - first_sample_); got >= largest_batch_) {
        largest_batch_ = got;
        ms_per_sample_ = batch_ms / static_cast<double>(got);
      }
      FT_LOG_DEBUG("GPU batch: {} request(s) of {} spp in {:.1f} ms", ok, n_, batch_ms);
    }
    const bool lane = hybrid.valid();  // (get() below invalidates the future)
    if (lane) {
      // Its samples follow the batch: they are committed only after the whole batch (else the cursor is short of
      // them and they are dropped, to be traced again from the cursor: nothing counted twice).
      const auto w0 = Clock::now();
      auto got = hybrid.get();
      if (!got.ok() && got.status().code() == Code::kCancelled) return got.status();
      FT_TRY(got.status());
      hybrid_ms_per_sample_ = hybrid_last_ms_per_sample_;
      if (ok == k) {
        commit_hybrid(*got);
        FT_LOG_DEBUG("hybrid: the CPU lane took samples [{}, {}) next to the batch", first + queued,
                     first + queued + cpu_n);
        judge_hybrid(queued, cpu_n, batch_ms, ms_since(w0));
      }
    }
    if (ok == k && sized_ && !lane)
      baseline_ms_per_sample_ = batch_ms / static_cast<double>(queued);  // the GPU lane alone (judge_hybrid)
    if (ok == k) {
      if (!fixed_ && !sized_ && last_ms_ >= kTargetRequestMs / 2)
        sized_ = true;  // the next size is within 2×
      return {};
    }
    report_.outcomes.push_back(outcomes[ok]);
    if (outcomes[ok] == runtime::Outcome::kCancelled) return Status(Code::kCancelled, "render cancelled");
    return declined(sizes[ok], why[ok]);
  }

  /// The first request of a batch that did not finish (`m` samples from the cursor) was declined for `why`.
  Status declined(std::uint32_t m, const Status& why) {
    ++report_.declined;
    const std::string where =
        "samples [" + std::to_string(cursor()) + ", " + std::to_string(cursor() + m) + ")";
    report_.decline_reasons.push_back(where + ": " + why.what());
    if (why.code() == Code::kDeviceLost) {
      // Lost with the device (docs/design/runtime.md §6): the range stays at the cursor. The replacement child
      // starts in the background and takes it again once up; the CPU lane takes small slices meanwhile. The
      // hang deadline is measured afresh on the new child. Allowed under --device gpu too.
      ++report_.declined_by_loss;
      hang_ns_per_tuple_ = 0.0;
      slice_due_ = true;
      gpu_->start_recovery();
      FT_LOG_DEBUG("GPU lost {}; back to the cursor while a replacement starts", where);
      return {};
    }
    // Any other decline would be a silent 100x slowdown under --device gpu, so it fails the render; under auto
    // the CPU renders this request whole (the GPU would decline it again) and the requests after it go round the
    // loop again (a chained request after a declined one declines without a reason of its own).
    if (options_.device == RenderDevice::kGpu)
      return Status(Code::kDeclined, "--device gpu: the GPU declined " + where + " (" + why.what() +
                                         "); not rendering it on the CPU");
    static std::once_flag warned;
    std::call_once(warned, [&] {
      FT_LOG_WARN("GPU declined {} ({}); rendering on the CPU (said once)", where, why.what());
    });
    FT_LOG_DEBUG("GPU declined {}; the CPU renders them", where);
    const auto c0 = Clock::now();
    FT_TRY(cpu_request(cursor(), m));
    last_ms_ = ms_since(c0);
    sized_ = fixed_ != 0;
    n_ = m;
    return {};
  }

  const Scene& scene_;
  const std::uint64_t first_sample_;
  const std::uint32_t samples_;
  Film& film_;
  const RenderOptions& options_;
  RenderReport& report_;
  runtime::GpuBackend* const gpu_;
  const std::uint32_t fixed_;  // samples_per_request
  CpuOptions cpu_;
  std::uint64_t done_ = 0;  // the cursor, relative to first_sample_
  // GPU lane sizing.
  std::uint32_t n_ = 1;
  double last_ms_ = 0.0;  // duration of the last request (the mean over the last batch)
  bool sized_ = false;    // requests are at their size: chain them (docs/design/tracer.md §10.7)
  bool first_request_ = true;
  double ns_per_tuple_ = 0.0;       // the GPU's chunk-sizing estimate, passed from batch to batch
  double hang_ns_per_tuple_ = 0.0;  // the slowest chunk's ns/tuple on this child (the hang deadline's base)
  std::uint64_t generation_ = 0;    // gpu_->recoveries() when hang_ns_per_tuple_ was measured
  double ms_per_sample_ = 0.0;      // of this render's largest GPU batch, for the next render of this scene
  std::uint64_t largest_batch_ = 0;
  // Hybrid mode: the CPU lane's measured time per sample (the last run's, written by its thread before the
  // future is ready).
  double hybrid_ms_per_sample_ = 0.0;
  double hybrid_last_ms_per_sample_ = 0.0;
  int hybrid_unpaid_ = 0;  // batches in a row whose lane did not pay (judge_hybrid)
  double baseline_ms_per_sample_ = 0.0;  // the GPU lane's rate in its last sized batch without a lane
  // CPU lane sizing while the GPU is down.
  bool slice_due_ = false;
  std::uint32_t cpu_n_ = 1;
  double cpu_last_ms_ = 0.0;
};

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
  const auto t0 = Clock::now();
  RenderReport report;

  runtime::GpuBackend* gpu = nullptr;
  if (options.device != RenderDevice::kCpu) {
    // A scene the GPU tracer cannot trace (an HDR map today, docs/design/tracer.md §6.1) is told before any GPU
    // child starts: --device gpu fails naming why, auto renders on the CPU with one line saying so.
    if (Status tier = tier_features(scene).gpu_status(); !tier.ok()) {
      if (options.device == RenderDevice::kGpu)
        return not_supported("--device gpu: the GPU tracer does not render this scene: " + tier.what());
      FT_LOG_INFO("GPU tracer declines this scene ({}); rendering on the CPU", tier.what());
    } else {
      gpu = options.backend ? options.backend : &shared_gpu_backend();  // the first use starts the GPU child
      report.gpu_start_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (auto why = gpu->unavailable_reason()) {
        if (options.device == RenderDevice::kGpu) return not_supported("--device gpu: no usable GPU: " + *why);
        FT_LOG_INFO("no usable GPU ({}); rendering on the CPU", *why);
        gpu = nullptr;
      }
    }
  }

  FT_TRY(RenderLoop(scene, first_sample, samples, film, options, report, gpu).run());
  if (report.gpu_samples && report.cpu_samples)
    report.device = "gpu+cpu";
  else if (report.gpu_samples)
    report.device = "gpu: " + gpu->adapter_label().value_or("GPU");
  else
    report.device = "cpu";
  report.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return report;
}

}  // namespace facetrace::tracer
