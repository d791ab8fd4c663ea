/// @file
/// TraceWorkload: the tracer's chunk logic on the runtime's Workload seam (docs/design/tracer.md §10.2–10.4).
#include "facetrace/tracer/gpu_tracer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "cpu/trace_params.h"
#include "facetrace/core/env.h"
#include "gpu/ops.h"
#include "log.h"

namespace facetrace::tracer {

namespace {
constexpr std::uint64_t kMinTuples = 65536 / 12;           // docs/design/tracer.md §10.2: 64 KiB/12 = 5 461
constexpr double kEmaAlpha = 0.3;                          // docs/design/tracer.md §10.2
constexpr std::uint64_t kTrailer = sizeof(std::uint64_t);  // scratch: the request's non-finite count
constexpr std::size_t kPooledSums = 2;                     // film-sized sum buffers kept for reuse
}  // namespace

namespace {

/// Device buffer pair index for the next chunk on `ex`: alternates per executor across requests, so a batch's
/// next picture never reuses the buffer of the previous picture's chunk still in flight (docs/design/tracer.md §10.6).
std::uint32_t next_buffer(const runtime::Executor& ex) {
  static std::mutex mu;
  static std::map<const runtime::Executor*, std::uint32_t> sequence;
  std::lock_guard lock(mu);
  return sequence[&ex]++ & 1u;
}

/// The megakernel configuration for `name`, or FACETRACE_TRACER_KERNEL's (read once: the environment enters the
/// launch arguments here, never inside the launcher) when `name` is empty. An unknown variable value gives the
/// default; an unknown `name` gives null.
const KernelConfig* kernel_config(const std::string& name) {
  static const KernelConfig from_env = [] {
    const std::optional<std::string> v = core::env_string("FACETRACE_TRACER_KERNEL");
    const KernelConfig* c = v ? find_kernel_config(*v) : nullptr;
    return c ? *c : KernelConfig{};
  }();
  return name.empty() ? &from_env : find_kernel_config(name);
}

}  // namespace

namespace {

/// Film-sized sum buffers reused across requests. A request collects its sums into one and, on Done, swaps it
/// into the caller's film (commit), so the film's previous buffer comes back here: no 12-byte-per-pixel copy
/// between the last chunk and the next request, and no allocation per request.
std::mutex sums_mu;
std::vector<std::vector<float>> sums_pool;

std::vector<float> take_sums(std::size_t floats) {
  {
    std::lock_guard lock(sums_mu);
    for (auto it = sums_pool.begin(); it != sums_pool.end(); ++it) {
      if (it->size() != floats) continue;
      std::vector<float> v = std::move(*it);
      sums_pool.erase(it);
      return v;
    }
  }
  return std::vector<float>(floats);
}

void give_sums(std::vector<float> v) {
  if (v.empty()) return;
  std::lock_guard lock(sums_mu);
  if (sums_pool.size() >= kPooledSums) sums_pool.erase(sums_pool.begin());
  sums_pool.push_back(std::move(v));
}

}  // namespace

struct TraceWorkload::InFlight {
  runtime::RingTicket sums;
  std::optional<runtime::RingTicket> tuples;
  runtime::ArenaBlock block;
  std::uint32_t pixel_offset = 0;
  std::uint32_t pixel_count = 0;
  std::chrono::steady_clock::time_point issued;
};

TraceWorkload::TraceWorkload(const Scene& scene, std::uint32_t first_sample, std::uint32_t samples,
                             Film& film, GpuChunkOptions options)
    : scene_(scene),
      first_sample_(first_sample),
      samples_(samples),
      film_(film),
      options_(options),
      peak_ns_per_tuple_(std::max(0.0, options.hang_ns_per_tuple_hint)) {
  tier_ = validate_scene(scene_);
  if (tier_.ok()) tier_ = tier_features(scene_).gpu_status();       // Tier 1, also under an HDR map (§6.1)
  if (tier_.ok() && scene_.environment == EnvironmentKind::kHdr) {  // validate_scene checked the light
    const EnvLight& light = *scene_.environment_light;
    const std::uint64_t bytes = hdr_resident_floats(light.map.width, light.map.height) * 4;
    const std::uint64_t limit_mb =
        static_cast<std::uint64_t>(core::env_int_clamped("FACETRACE_GPU_ENV_MAX_MB", 192, 0, 65536));
    if (bytes > limit_mb << 20)
      tier_ = Status(Code::kDeclined, "the HDR map " + std::to_string(light.map.width) + "x" +
                                          std::to_string(light.map.height) + " needs " +
                                          std::to_string((bytes + (1u << 20) - 1) >> 20) +
                                          " MB on the GPU, over FACETRACE_GPU_ENV_MAX_MB=" +
                                          std::to_string(limit_mb) + " (the CPU renders it)");
  }
  if (tier_.ok() && (film.width != scene.width || film.height != scene.height))
    tier_ =
        invalid_argument("film is " + std::to_string(film.width) + "x" + std::to_string(film.height) +
                         ", scene is " + std::to_string(scene.width) + "x" + std::to_string(scene.height));
  if (tier_.ok() && std::uint64_t{first_sample} + samples > 0xFFFFFFFFull)
    tier_ = invalid_argument("sample range exceeds 2^32");
  if (tier_.ok() && samples > kMaxTuplesPerLaunch)
    tier_ = Status(Code::kDeclined, "more samples per request than one launch holds");
  const KernelConfig* kernel = kernel_config(options_.kernel);
  if (tier_.ok() && kernel == nullptr)
    tier_ = invalid_argument("unknown megakernel configuration \"" + options_.kernel + "\"");
  if (tier_.ok()) {
    TraceChunkArgs a{};  // zeroed: the planes past plane_count travel as zeros, not stack bytes
    a.chunk.scene.params = make_trace_params(scene_);
    a.chunk.scene.medium = make_medium_params(scene_);
    const auto planes = make_facet_planes(scene_);
    std::copy(planes.begin(), planes.end(), a.chunk.scene.planes);
    a.chunk.range.first_sample = first_sample_;
    a.chunk.range.spp = samples_;
    a.chunk.kernel = *kernel;
    if (options_.return_tuples) a.flags |= TraceChunkArgs::kReturnTuples;
    if (scene_.environment == EnvironmentKind::kHdr) {
      const EnvLight& light = *scene_.environment_light;
      std::uint64_t key =
          1469598103934665603ull;  // FNV-1a of the map's sha256: the same map, the same resident
      for (const char c : scene_.environment_map_sha256)
        key = (key ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      a.flags |= TraceChunkArgs::kHdrEnv;
      a.env_key = key;
      a.env_width = light.map.width;
      a.env_height = light.map.height;
      a.env_exposure = scene_.exposure;
      a.env_nee = 1;
      env_resident_ = hdr_resident_name(key);
    }
    args_.resize(sizeof(a));
    std::memcpy(args_.data(), &a, sizeof(a));
  }
}

TraceWorkload::~TraceWorkload() { give_sums(std::move(sums_)); }

Status TraceWorkload::can_run(const runtime::DeviceInfo& device) {
  (void)device;
  if (samples_ == 0) return Status(Code::kDeclined, "empty request");
  if (!tier_.ok()) return Status(Code::kDeclined, "GPU tracer declines: " + tier_.what());
  return {};
}

Status TraceWorkload::begin_turn(runtime::Executor& ex) {
  if (env_resident_.empty()) return {};
  for (const std::string& n : ex.resident_names())
    if (n == env_resident_) return {};
  // Once per map and GPU child (restart() uploads it again by itself), in EnvLight's order.
  const EnvLight& light = *scene_.environment_light;
  std::vector<float> packed;
  packed.reserve(hdr_resident_floats(light.map.width, light.map.height));
  packed.insert(packed.end(), light.map.rgb.begin(), light.map.rgb.end());
  packed.insert(packed.end(), light.row_cdf.begin(), light.row_cdf.end());
  packed.insert(packed.end(), light.col_cdf.begin(), light.col_cdf.end());
  packed.insert(packed.end(), light.row_cos.begin(), light.row_cos.end());
  if (packed.size() != hdr_resident_floats(light.map.width, light.map.height))
    return internal_error("HDR map tables do not match the map's size");
  Status st = ex.put_resident(env_resident_, std::as_bytes(std::span<const float>(packed)));
  if (!st.ok() && st.code() != Code::kDeviceLost)
    return Status(Code::kDeclined, "HDR map upload to the GPU failed: " + st.what());
  return st;
}

std::size_t TraceWorkload::scratch_bytes() const { return kTrailer; }

void TraceWorkload::seed_scratch(std::span<std::byte> scratch) {
  // The seed of each pixel is read from the caller's film (or from a pending previous request's sums, follow())
  // when its chunk is issued (every pixel belongs to exactly one chunk, and the film is not written before
  // commit), so the request's sums buffer needs no copy here: each chunk's result overwrites its pixels.
  std::memset(scratch.data(), 0, kTrailer);
  scratch_ = scratch;
  phase_ = Phase::kRunning;
  if (sums_.size() != film_.pixels() * 3) {
    give_sums(std::move(sums_));
    sums_ = take_sums(film_.pixels() * 3);
  }
  if (options_.return_tuples) tuples_.assign(film_.pixels() * std::size_t{samples_} * 3, 0.0f);
}

std::uint32_t TraceWorkload::next_chunk_pixels() const {
  std::uint64_t tuples = options_.first_chunk_tuples;
  // Before this request's first chunk is back: the previous request's estimate, else the caller's hint.
  double ns = ema_ns_per_tuple_;
  if (ns <= 0.0 && previous_) ns = previous_->ema_ns_per_tuple_;
  if (ns <= 0.0) ns = options_.ns_per_tuple_hint;
  if (ns > 0.0) tuples = static_cast<std::uint64_t>(options_.target_ms * 1e6 / ns);
  tuples =
      std::clamp<std::uint64_t>(tuples, std::max<std::uint64_t>(kMinTuples, samples_), kMaxTuplesPerLaunch);
  std::uint64_t pixels = std::max<std::uint64_t>(1, tuples / samples_);
  if (options_.max_chunk_pixels > 0) pixels = std::min<std::uint64_t>(pixels, options_.max_chunk_pixels);
  return static_cast<std::uint32_t>(std::min<std::uint64_t>(pixels, film_.pixels() - next_pixel_));
}

Status TraceWorkload::collect(runtime::Executor& ex, std::span<std::byte> scratch, bool discard) {
  if (!in_flight_) return {};
  std::unique_ptr<InFlight> f = std::move(in_flight_);
  const double tuples = static_cast<double>(f->pixel_count) * samples_;
  // The hang deadline (docs/design/tracer.md §10.2): from the slowest time per tuple measured over a whole earlier
  // request of this render on this child (the hint, or the request this one follows), so a chunk over the costly
  // middle of the picture is never taken for a hang; without one, the generous start-up deadline.
  const double peak_ns = std::max(peak_ns_per_tuple_, previous_ ? previous_->peak_ns_per_tuple_ : 0.0);
  const bool measured = options_.hang_ns_per_tuple_hint > 0.0 || previous_ != nullptr;
  const auto deadline =
      measured && peak_ns > 0.0
          ? runtime::hang_deadline(std::chrono::duration<double, std::milli>(peak_ns * tuples * 1e-6))
          : std::chrono::milliseconds(static_cast<std::int64_t>(
                std::max(10000.0, 50.0 * ema_ns_per_tuple_ * tuples * 1e-6)));  // docs/design/runtime.md §6
  const std::size_t bytes = std::size_t{f->pixel_count} * 12;
  bool short_slot = false;
  Status st = ex.collect(f->sums, deadline, [&](std::span<const std::byte> b) {
    if (discard) return;
    if (b.size() < bytes + 4) {
      short_slot = true;
      return;
    }
    std::memcpy(sums_.data() + std::size_t{f->pixel_offset} * 3, b.data(), bytes);
    std::uint32_t nonfinite = 0;
    std::memcpy(&nonfinite, b.data() + bytes, 4);
    std::uint64_t total = 0;
    std::memcpy(&total, scratch.data(), kTrailer);
    total += nonfinite;
    std::memcpy(scratch.data(), &total, kTrailer);
  });
  if (f->tuples) {
    Status tst = ex.collect(*f->tuples, deadline, [&](std::span<const std::byte> b) {
      if (discard) return;
      std::memcpy(tuples_.data() + std::size_t{f->pixel_offset} * samples_ * 3, b.data(),
                  std::min<std::size_t>(b.size(), std::size_t{f->pixel_count} * samples_ * 12));
    });
    if (st.ok()) st = tst;
  }
  if (!st.ok()) return st;
  if (short_slot) return internal_error("trace chunk readback is shorter than its pixels' sums");
  // Device time of this chunk ≈ from when it could start (issued, or the previous chunk done) to now.
  const auto now = std::chrono::steady_clock::now();
  // A follower's first chunk waited behind its previous request's last one.
  const auto ready =
      last_done_ == std::chrono::steady_clock::time_point{} && previous_ ? previous_->last_done_ : last_done_;
  const auto start = std::max(f->issued, ready);
  const double ns = std::chrono::duration<double, std::nano>(now - start).count() /
                    (static_cast<double>(f->pixel_count) * samples_);
  ema_ns_per_tuple_ = ema_ns_per_tuple_ == 0.0 ? ns : kEmaAlpha * ns + (1.0 - kEmaAlpha) * ema_ns_per_tuple_;
  peak_ns_per_tuple_ = std::max(peak_ns_per_tuple_, ns);
  last_done_ = now;
  FT_LOG_DEBUG("trace chunk: {} px x {} spp, {:.3f} ns/tuple (ema {:.3f})", f->pixel_count, samples_, ns,
               ema_ns_per_tuple_);
  return {};
}

Status TraceWorkload::check_previous() const {
  if (seeded_from_previous_ && previous_->phase_ != Phase::kCommitted)
    return Status(Code::kDeclined,
                  "the previous request of this render ended without Done; its samples are "
                  "missing from this request's seeds");
  return {};
}

Expected<const float*> TraceWorkload::seeds(runtime::Executor& ex, std::uint32_t& pixels) {
  if (!previous_ || previous_->phase_ == Phase::kCommitted) return film_.xyz.data();
  if (previous_->phase_ != Phase::kIssued)
    return Status(Code::kDeclined, "the previous request of this render ended without Done");
  // Pending: every pixel of `previous` is in its sums except those of its chunk still in flight.
  if (const InFlight* f = previous_->in_flight_.get()) {
    const std::uint32_t end = f->pixel_offset + f->pixel_count;
    if (next_pixel_ < end && next_pixel_ + pixels > f->pixel_offset) {
      if (f->pixel_offset > next_pixel_) {
        pixels = f->pixel_offset - next_pixel_;  // stop short of it
      } else if (Status st = previous_->collect(ex, previous_->scratch_, false); !st.ok()) {
        previous_->collect_error_ = st;  // previous's drain reports it: it ends without Done
        return st;
      }
    }
  }
  seeded_from_previous_ = true;
  return previous_->sums_.data();
}

Expected<bool> TraceWorkload::run_chunk(runtime::Executor& ex, std::span<std::byte> scratch) {
  FT_TRY(check_previous());
  if (next_pixel_ >= film_.pixels()) {
    FT_TRY(collect(ex, scratch, false));
    phase_ = Phase::kIssued;
    return false;
  }
  if (options_.fault_after_chunks >= 0 && chunks_ == options_.fault_after_chunks) {
    options_.fault_after_chunks = -1;
    FT_TRY(ex.inject_fault(runtime::FaultKind::kIllegalAddress));
  }
  std::uint32_t pixels = next_chunk_pixels();
  auto seed = seeds(ex, pixels);
  if (!seed) return seed.status();
  auto block = ex.arena().allocate(chunk_io_bytes(pixels));
  if (!block) return block.status();
  std::memcpy(block->bytes().data(), *seed + std::size_t{next_pixel_} * 3, std::size_t{pixels} * 12);
  std::memset(block->bytes().data() + std::size_t{pixels} * 12, 0, 4);

  auto* a = reinterpret_cast<TraceChunkArgs*>(args_.data());
  a->chunk.range.pixel_offset = next_pixel_;
  a->chunk.range.pixel_count = pixels;
  a->buffer = next_buffer(ex);
  runtime::OpCall call;
  call.op = kOpTraceChunk;
  call.args = args_;
  call.in = block->range();
  call.deadline = std::chrono::milliseconds(10000);
  const auto issued = std::chrono::steady_clock::now();
  auto reply = ex.invoke(call);
  if (!reply) return reply.status();
  if (reply->tickets.empty() || (options_.return_tuples && reply->tickets.size() < 2))
    return internal_error("trace_chunk returned no ring ticket");
  // At most one chunk in flight: collect the previous one while this one runs (docs/design/tracer.md §10.2).
  FT_TRY(collect(ex, scratch, false));
  auto f = std::make_unique<InFlight>();
  f->sums = reply->tickets[0];
  if (options_.return_tuples) f->tuples = reply->tickets[1];
  f->block = std::move(*block);
  f->pixel_offset = next_pixel_;
  f->pixel_count = pixels;
  f->issued = issued;
  in_flight_ = std::move(f);
  next_pixel_ += pixels;
  ++chunks_;
  if (next_pixel_ < film_.pixels()) return true;
  phase_ = Phase::kIssued;  // the last chunk is in flight; drain() collects it
  return false;
}

Status TraceWorkload::drain(runtime::Executor& ex, std::span<std::byte> scratch, bool discard) {
  Status st = collect(ex, scratch, discard);
  if (st.ok()) st = collect_error_;
  if (st.ok() && !discard) st = check_previous();
  if (!st.ok() || discard) phase_ = Phase::kEnded;
  return st;
}

void TraceWorkload::commit(std::span<const std::byte> scratch) {
  // Every pixel was written by its chunk: the sums become the film's buffer, and the film's old buffer goes back
  // to the pool (a film whose buffer is not pixels × 3 floats gets a copy instead).
  if (film_.xyz.size() == sums_.size()) {
    film_.xyz.swap(sums_);
  } else {
    std::copy_n(sums_.begin(), std::min(sums_.size(), film_.xyz.size()), film_.xyz.begin());
  }
  give_sums(
      std::move(sums_));  // at once: a batch of requests keeps no film-sized buffer per finished request
  sums_.clear();
  phase_ = Phase::kCommitted;
  std::uint64_t nonfinite = 0;
  std::memcpy(&nonfinite, scratch.data(), kTrailer);
  film_.nonfinite += nonfinite;
  for (auto& n : film_.samples) n += samples_;
}

}  // namespace facetrace::tracer
