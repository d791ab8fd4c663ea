/// @file
/// The tracer megakernel `transport_main_kernel`, its Tier 2 forms (HDR map, lit model, media) and the per-pixel
/// reduction `reduce_xyz_kernel`
/// (docs/design/tracer.md §10.1), built from the same physics headers as the CPU tracer (src/tracer/physics).
#include <cuda_runtime.h>

#include <string>

#include "common/cuda_check.cuh"
#include "physics/medium.h"
#include "physics/transport.h"
#include "tracer/transport_launch.h"

namespace facetrace::tracer {
namespace {

constexpr unsigned kReduceBlock = 128;
// The medium kernels' minimum resident blocks (≤ 128 registers): faster than 1 block for uniaxial stones, within
// 2 % for inclusions (benchmarks/NOTES.md, issue 14 session 7).
constexpr unsigned kMediumMinBlocks = 2;
/// A clear uniaxial stone's warp in the first kernel queues its paths still going for the persistent kernel once
/// fewer than this many of its lanes go on (benchmarks/NOTES.md, issue 14 session 13; session 12's fixed split
/// after 6 bounces was the best of 2 / 4 / 6 / 8 / 10).
constexpr unsigned kMediumSplitAlive = 24;
constexpr unsigned kFullWarp = 0xFFFFFFFFu;

/// A path handed from the first launch to the second: its state after `split` bounces and its tuple index.
struct alignas(16) SavedPath {
  physics::PathState ps;
  std::uint64_t tuple;
};

/// Copies a path state field by field (the handoff: thread state ↔ global memory). The size check makes a new
/// PathState field a build error until it is copied here too.
static_assert(sizeof(physics::PathState) == 288, "copy_path must copy every PathState field");
__device__ __forceinline__ void copy_path(physics::PathState& dst, const physics::PathState& src) {
  for (int k = 0; k < physics::kChannels; ++k) {
    for (int c = 0; c < 4; ++c) dst.st[k][c] = src.st[k][c];
    dst.pdf[k] = src.pdf[k];
    dst.split[k] = src.split[k];
    dst.n_k[k] = src.n_k[k];
  }
  dst.compat = src.compat;
  dst.org = src.org;
  dst.dir = src.dir;
  dst.s_prev = src.s_prev;
  dst.hero = src.hero;
  dst.seed = src.seed;
  dst.b = src.b;
  dst.live = src.live;
  dst.split_bits = src.split_bits;
  dst.inside = src.inside;
}

/// The handoff buffer: a counter of saved paths, then the saved paths.
struct HandoffHeader {
  alignas(16) std::uint32_t count;
};
constexpr std::uint64_t kHandoffHeaderBytes = 16;
/// The handoff buffer holds the paths of 1/kHandoffShare of a chunk's tuples; paths past that finish in the
/// first launch.
constexpr std::uint64_t kHandoffShare = 4;
static_assert(sizeof(HandoffHeader) == kHandoffHeaderBytes, "HandoffHeader layout");

/// Copies the planes from the by-value parameter into shared memory (once per block).
__device__ void load_planes(physics::FacetPlane* planes, const physics::ChunkScene& scene) {
  const std::uint32_t n = scene.params.plane_count;
  for (std::uint32_t j = threadIdx.x; j < n; j += blockDim.x) planes[j] = scene.planes[j];
  __syncthreads();
}

/// Writes tuple i's XYZ (12 B) and counts a non-finite sample.
__device__ void store_tuple(float* __restrict__ tuples, std::uint32_t* __restrict__ nonfinite,
                            std::uint64_t i, const physics::SampleXyz& r) {
  if (!r.finite) atomicAdd(nonfinite, 1u);
  tuples[3 * i + 0] = r.x;
  tuples[3 * i + 1] = r.y;
  tuples[3 * i + 2] = r.z;
}

/// Where tuple i of a chunk lies: thread i = pixel_local·spp + sample_local (docs/design/tracer.md §10.1), so pixel
/// (x, y) of an image `width` wide and sample s.
struct TupleCoord {
  std::uint32_t x, y, s;
};
__device__ __forceinline__ TupleCoord tuple_coord(const ChunkRange& range, std::uint32_t width,
                                                  std::uint64_t i) {
  const std::uint32_t pixel_local = static_cast<std::uint32_t>(i / range.spp);
  const std::uint32_t sample_local = static_cast<std::uint32_t>(i - std::uint64_t{pixel_local} * range.spp);
  const std::uint32_t pixel = range.pixel_offset + pixel_local;
  return TupleCoord{pixel % width, pixel / width, range.first_sample + sample_local};
}

/// Thread ↔ data: thread i = pixel_local·spp + sample_local (docs/design/tracer.md §10.1). The planes are copied from the
/// by-value parameter into shared memory once per block; the trace parameters stay in parameter (constant)
/// space. Each thread writes its tuple's XYZ (12 B) to global `tuples`. Deterministic per tuple (G1): the
/// path is path_begin, path_step until it ends, path_finish — trace_sample's steps — and a path still going
/// after `split` bounces (split > 0) is saved to `saved` while there is room (`capacity`) and finished by
/// transport_rest_kernel, with the same result.
template <unsigned Block, unsigned MinBlocks, bool Split>
__global__ void __launch_bounds__(Block, MinBlocks)
    transport_main_kernel(const physics::ChunkScene scene, const ChunkRange range, float* __restrict__ tuples,
                          std::uint32_t* __restrict__ nonfinite, std::uint32_t split,
                          HandoffHeader* __restrict__ handoff, SavedPath* __restrict__ saved,
                          std::uint32_t capacity) {
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t count = std::uint64_t{range.pixel_count} * range.spp;
  if (i >= count) return;
  const TupleCoord c = tuple_coord(range, scene.params.width, i);
  const physics::TraceParams& p = scene.params;
  if constexpr (!Split) {
    // No handoff: trace_sample itself (this form needs fewer registers than the split loop below; the counts
    // are in benchmarks/NOTES.md).
    store_tuple(tuples, nonfinite, i, physics::trace_sample(p, planes, c.x, c.y, c.s));
    return;
  }
  physics::PathState ps;
  physics::path_begin(ps, p, c.x, c.y, c.s);
  // trace_sample's loop, left at the split bounce; one path_step call site (the kernel stays one copy of the
  // physics) and the handoff copy outside the hot loop.
  bool going = p.max_bounces > 0;
  for (;;) {
    while (going) {
      going = physics::path_step(ps, p, planes);
      if (going && ps.b == split) break;  // never for split 0: b ≥ 1 after a step
    }
    if (!going) break;
    const std::uint32_t slot = atomicAdd(&handoff->count, 1u);
    if (slot < capacity) {
      copy_path(saved[slot].ps, ps);
      saved[slot].tuple = i;
      return;
    }
    split = 0;  // no room: finish it here
  }
  store_tuple(tuples, nonfinite, i, physics::path_finish(ps, p));
}

/// The second launch of a split chunk: thread j finishes saved path j (j < min(count, capacity)), packed so
/// a warp holds 32 paths still going instead of the few left among 32 neighbours.
template <unsigned Block, unsigned MinBlocks>
__global__ void __launch_bounds__(Block, MinBlocks)
    transport_rest_kernel(const physics::ChunkScene scene, float* __restrict__ tuples,
                          std::uint32_t* __restrict__ nonfinite, const HandoffHeader* __restrict__ handoff,
                          const SavedPath* __restrict__ saved, std::uint32_t capacity) {
  const std::uint32_t n = min(handoff->count, capacity);
  if (blockIdx.x * blockDim.x >= n) return;  // whole block past the saved paths (uniform: before the barrier)
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const std::uint32_t j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  physics::PathState ps;
  copy_path(ps, saved[j].ps);
  const std::uint64_t i = saved[j].tuple;
  while (physics::path_step(ps, scene.params, planes)) {
  }
  store_tuple(tuples, nonfinite, i, physics::path_finish(ps, scene.params));
}

/// The megakernel under an environment with NEE (docs/design/tracer.md §6.1, §6.2): thread i = pixel_local·spp +
/// sample_local as in transport_main_kernel, each tuple trace_sample_env with `env` — an HDR map's HdrEnv or a lit
/// model's PresetEnv (NEE at frosted facets of the map or the DaylightSun disc) — one launch.
template <unsigned Block, unsigned MinBlocks, class Env>
__global__ void __launch_bounds__(Block, MinBlocks)
    transport_env_kernel(const physics::ChunkScene scene, const Env env, const ChunkRange range,
                         float* __restrict__ tuples, std::uint32_t* __restrict__ nonfinite) {
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t count = std::uint64_t{range.pixel_count} * range.spp;
  if (i >= count) return;
  const TupleCoord c = tuple_coord(range, scene.params.width, i);
  store_tuple(tuples, nonfinite, i, physics::trace_sample_env(scene.params, planes, env, c.x, c.y, c.s));
}

/// The environment of a medium kernel: the analytic environments, an HDR map, or a lit model.
constexpr std::uint32_t kMediumEnvAnalytic = 0;
constexpr std::uint32_t kMediumEnvHdr = 1;
constexpr std::uint32_t kMediumEnvPreset = 2;

/// The environment policy of a medium kernel's kEnv.
template <std::uint32_t kEnv>
__device__ __forceinline__ auto medium_env(const physics::ChunkScene& scene, const physics::EnvMapView& map) {
  if constexpr (kEnv == kMediumEnvHdr) {
    return physics::HdrEnv{map};
  } else if constexpr (kEnv == kMediumEnvPreset) {
    return physics::PresetEnv{scene.params.preset_model == physics::kPresetSun ? 1u : 0u};
  } else {
    return physics::AnalyticEnv{};
  }
}

/// The megakernel for a Tier 2 medium (docs/design/tracer.md §7.7, §10.1): one instantiation per material class
/// (kKind: uniaxial, or isotropic with inclusions) and environment (kEnv: the map's HdrEnv, a lit model's
/// PresetEnv, else the analytic environments); thread i = pixel_local·spp + sample_local as in
/// transport_main_kernel, each tuple trace_sample_medium, one launch. Uniaxial stones with inclusions run the
/// phased kernels below when the launch has their queues.
template <unsigned Block, unsigned MinBlocks, std::uint32_t kKind, std::uint32_t kEnv>
__global__ void __launch_bounds__(Block, MinBlocks)
    transport_medium_kernel(const physics::ChunkScene scene, const physics::EnvMapView map,
                            const ChunkRange range, float* __restrict__ tuples,
                            std::uint32_t* __restrict__ nonfinite) {
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const std::uint64_t i = std::uint64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const std::uint64_t count = std::uint64_t{range.pixel_count} * range.spp;
  if (i >= count) return;
  const TupleCoord c = tuple_coord(range, scene.params.width, i);
  store_tuple(tuples, nonfinite, i,
              physics::trace_sample_medium<kKind>(scene.params, scene.medium, planes,
                                                  medium_env<kEnv>(scene, map), c.x, c.y, c.s));
}

/// A uniaxial path between the phased medium kernels: its states and its tuple index.
struct alignas(16) SavedMediumPath {
  physics::PathState ps;
  physics::MediumPathState ms;
  physics::EnvPathState es;
  std::uint64_t tuple;
};
static_assert(sizeof(physics::MediumPathState) == 112 && sizeof(physics::EnvPathState) == 16,
              "save_medium_path must copy every MediumPathState and EnvPathState field");
__device__ __forceinline__ void save_medium_path(SavedMediumPath& dst, const physics::PathState& ps,
                                                 const physics::MediumPathState& ms,
                                                 const physics::EnvPathState& es, std::uint64_t tuple) {
  copy_path(dst.ps, ps);
  dst.ms.k = ms.k;
  dst.ms.mode = ms.mode;
  for (int k = 0; k < physics::kChannels; ++k) {
    dst.ms.ne_k[k] = ms.ne_k[k];
    dst.ms.ao_k[k] = ms.ao_k[k];
    dst.ms.ae_k[k] = ms.ae_k[k];
  }
  for (int c = 0; c < 3; ++c) dst.es.xyz[c] = es.xyz[c];
  dst.es.bsdf_pdf = es.bsdf_pdf;
  dst.tuple = tuple;
}
__device__ __forceinline__ std::uint64_t load_medium_path(physics::PathState& ps,
                                                          physics::MediumPathState& ms,
                                                          physics::EnvPathState& es,
                                                          const SavedMediumPath& src) {
  copy_path(ps, src.ps);
  ms.k = src.ms.k;
  ms.mode = src.ms.mode;
  for (int k = 0; k < physics::kChannels; ++k) {
    ms.ne_k[k] = src.ms.ne_k[k];
    ms.ao_k[k] = src.ms.ao_k[k];
    ms.ae_k[k] = src.ms.ae_k[k];
  }
  for (int c = 0; c < 3; ++c) es.xyz[c] = src.es.xyz[c];
  es.bsdf_pdf = src.es.bsdf_pdf;
  return src.tuple;
}

/// The phased medium kernels' queues (docs/design/tracer.md §10.1), in the handoff scratch: the counts, the
/// paths that entered the stone (written by the outside phase, read and rewritten in place by the inside phase),
/// and the indices of those the inside phase handed on (a path outside that meets the stone again).
struct MediumQueueHeader {
  alignas(16) std::uint32_t inside_count;
  std::uint32_t back_count;
  std::uint32_t next;  ///< the next queued path the persistent kernel hands out
};
static_assert(sizeof(MediumQueueHeader) == kHandoffHeaderBytes, "MediumQueueHeader layout");
/// A phased launch takes at most this many tuples at a time (the queue capacity: 2^21 × 436 B ≈ 0.91 GB).
constexpr std::uint64_t kMediumQueueTuples = std::uint64_t{1} << 21;

/// Whether a medium chunk runs the phased kernels: a uniaxial stone (with inclusions: outside, inside and rest
/// phases; clear: the first kernel while most of a warp goes on, then the persistent inside phase and the rest;
/// benchmarks/NOTES.md, issue 14 sessions 10, 12 and 14).
bool phased_medium(const physics::MediumParams& m) { return m.kind == physics::kMediumUniaxial; }

/// Whether a clear uniaxial stone's kernels may be the plain ones (kPlain: no frosted facet, no edge rounding, no
/// inclusions), whose hot loop holds none of that code (benchmarks/NOTES.md, issue 14 session 16).
bool plain_medium(const physics::ChunkScene& scene) {
  return !physics::any_frosted(scene.params) && !(scene.medium.edge_radius > 0.0f) &&
         !(scene.medium.sigma_s > 0.0f);
}

std::uint64_t medium_queue_capacity(std::uint64_t tuples) {
  return tuples < kMediumQueueTuples ? tuples : kMediumQueueTuples;
}

struct MediumQueues {
  MediumQueueHeader* header;
  SavedMediumPath* paths;
  std::uint32_t* back;
};

MediumQueues medium_queues(void* handoff, std::uint64_t capacity) {
  auto* base = static_cast<std::byte*>(handoff);
  auto* paths = reinterpret_cast<SavedMediumPath*>(base + kHandoffHeaderBytes);
  return MediumQueues{static_cast<MediumQueueHeader*>(handoff), paths,
                      reinterpret_cast<std::uint32_t*>(paths + capacity)};
}

/// Phase 1 of a uniaxial stone: tuples [first, first + n) of the chunk (thread ↔ tuple as in
/// transport_medium_kernel) from path_begin through their first bounces; a path that ends there is finished, one
/// still going is queued with its states for medium_inside_kernel. With inclusions (kClear false) the first bounces
/// are those outside the stone (kPhaseOutside, the entry's solution only), so that the inside phase runs a loop
/// without it. A clear stone's warp (kClear true) takes the first bounce (kPhaseOutside: every path starts outside)
/// and then its bounces inside (kPhaseInside: no entry code in the loop) while kMediumSplitAlive of its lanes go on,
/// so that the long paths finish packed instead of holding their warps; a path that meets the stone again from
/// outside is queued like one still going, and the inside phase hands it on (benchmarks/NOTES.md, issue 14
/// sessions 10, 12, 13 and 14).
template <unsigned Block, unsigned MinBlocks, std::uint32_t kEnv, bool kClear, bool kPlain = false>
__global__ void __launch_bounds__(Block, MinBlocks)
    medium_first_kernel(const physics::ChunkScene scene, const physics::EnvMapView map,
                        const ChunkRange range, std::uint64_t first, std::uint32_t n,
                        float* __restrict__ tuples, std::uint32_t* __restrict__ nonfinite, MediumQueues q) {
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  [[maybe_unused]] const unsigned warp = __ballot_sync(kFullWarp, t < n);  // the lanes with a tuple
  if (t >= n) return;
  const std::uint64_t i = first + t;
  const TupleCoord c = tuple_coord(range, scene.params.width, i);
  const physics::TraceParams& p = scene.params;
  const auto env = medium_env<kEnv>(scene, map);
  physics::PathState ps;
  physics::EnvPathState es{{0.0f, 0.0f, 0.0f}, 0.0f};
  physics::path_begin(ps, p, c.x, c.y, c.s);
  physics::MediumPathState ms;
  physics::medium_begin(ms, ps, p, scene.medium);
  bool going = p.max_bounces > 0;
  if constexpr (kClear) {
    if (going)
      going = physics::path_step_uniaxial<decltype(env), physics::kPhaseOutside, kPlain>(
          ps, ms, p, scene.medium, planes, env, es);
    // The warp's lanes step together (each bounce one step): it stops once fewer than kMediumSplitAlive of them
    // go on, and its paths still going or handed on are queued.
    bool handoff = false;
    for (;;) {
      const unsigned alive = __ballot_sync(warp, going && !handoff);
      if (alive == 0u || static_cast<unsigned>(__popc(alive)) < kMediumSplitAlive) break;
      if (going && !handoff)
        going = physics::path_step_uniaxial<decltype(env), physics::kPhaseInside, kPlain>(
            ps, ms, p, scene.medium, planes, env, es, &handoff);
    }
    going = going || handoff;
  } else {
    while (going && !ps.inside)
      going = physics::path_step_uniaxial<decltype(env), physics::kPhaseOutside>(ps, ms, p, scene.medium,
                                                                                 planes, env, es);
  }
  if (going) {  // n ≤ the capacity: every path has a slot
    save_medium_path(q.paths[atomicAdd(&q.header->inside_count, 1u)], ps, ms, es, i);
    return;
  }
  store_tuple(tuples, nonfinite, i, physics::path_finish_env(ps, p, es));
}

/// The lanes of a warp waiting at their facets that start the facet solution while others still scatter
/// (benchmarks/NOTES.md, issue 14 session 13: 16 / 20 / 24 / 32 lanes → ruby 324 / 333 / 335 / 287 M paths/s.)
constexpr int kFacetQuorum = 24;

/// The next queued path for a lane without one: one atomicAdd per group of lanes asking together (a warp's
/// converged lanes), each lane taking its own index from it.
__device__ __forceinline__ std::uint32_t next_queued(std::uint32_t* counter) {
  const unsigned mask = __activemask();
  const unsigned lane = threadIdx.x & 31u;
  const int leader = __ffs(static_cast<int>(mask)) - 1;
  std::uint32_t base = 0;
  if (static_cast<int>(lane) == leader) base = atomicAdd(counter, static_cast<std::uint32_t>(__popc(mask)));
  base = __shfl_sync(mask, base, leader);
  return base + static_cast<std::uint32_t>(__popc(mask & ((1u << lane) - 1u)));
}

/// Phase 2: the queued paths through their bounces inside and their miss after the exit (kPhaseInside; a clear
/// stone's after medium_first_kernel<…, true>, without gathering: kGather false), on a grid that stays resident
/// (resident_grid): a lane takes the next queued path (next_queued) as soon as its path ends, so a warp's lanes
/// keep tracing while the queue lasts instead of idling behind the longest path (benchmarks/NOTES.md, issue 14
/// session 12). A path that meets the stone again from outside is left in its slot, its index queued for phase 3.
/// Which lane takes a path does not change its result (its streams are its tuple's, its result goes to its
/// tuple's slot).
template <unsigned Block, unsigned MinBlocks, std::uint32_t kEnv, bool kGather = true, bool kPlain = false>
__global__ void __launch_bounds__(Block, MinBlocks)
    medium_inside_kernel(const physics::ChunkScene scene, const physics::EnvMapView map,
                         float* __restrict__ tuples, std::uint32_t* __restrict__ nonfinite, MediumQueues q) {
  constexpr std::uint32_t kPhase = physics::kPhaseInside;
  const std::uint32_t n = q.header->inside_count;
  if (blockIdx.x * blockDim.x >= n) return;  // whole block past the queue (uniform: before the barrier)
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const physics::TraceParams& p = scene.params;
  const auto env = medium_env<kEnv>(scene, map);
  physics::PathState ps;
  physics::MediumPathState ms;
  physics::EnvPathState es;
  std::uint32_t j = 0;
  std::uint64_t i = 0;
  bool tracing = false;
  bool drained = false;   // the queue is empty for this lane (kGather)
  bool at_facet = false;  // the lane's bounce waits at its facet (kGather)
  physics::UniaxialSegment seg{};
  for (;;) {
    if constexpr (kGather) {
      if (!tracing && !drained) {
        j = next_queued(&q.header->next);
        drained = j >= n;
        if (!drained) {
          i = load_medium_path(ps, ms, es, q.paths[j]);
          tracing = true;
        }
      }
      if (__all_sync(kFullWarp, !tracing)) break;  // every lane drained (the whole warp is in the loop)
    } else {
      if (!tracing) {
        j = next_queued(&q.header->next);
        if (j >= n) break;
        i = load_medium_path(ps, ms, es, q.paths[j]);
        tracing = true;
      }
    }
    bool handoff = false;
    if constexpr (kGather) {
      // A lane whose segment scattered takes its next segment at once; a lane whose segment reached a facet
      // waits there, and the warp solves its facets together once kFacetQuorum lanes wait or none scatters on
      // (benchmarks/NOTES.md, issue 14 session 13). The bounce is the same two calls either way.
      bool going = true, stepped = false;
      if (tracing && !at_facet) {
        at_facet = physics::uniaxial_segment<decltype(env), kPhase>(ps, ms, p, scene.medium, planes, env, es,
                                                                    seg, going, &handoff);
        stepped = !at_facet;
      }
      // Both votes by every lane of the warp (none inside a branch).
      const int waiting = __popc(__ballot_sync(kFullWarp, at_facet));
      const bool scatters_on = __any_sync(kFullWarp, stepped && going);
      if (at_facet && (waiting >= kFacetQuorum || !scatters_on)) {
        going = physics::uniaxial_facet<decltype(env), kPhase>(ps, ms, p, scene.medium, planes, env, es, seg);
        at_facet = false;
        stepped = true;
      }
      if (!stepped || going) continue;
    } else if (physics::path_step_uniaxial<decltype(env), kPhase, kPlain>(ps, ms, p, scene.medium, planes,
                                                                          env, es, &handoff)) {
      continue;
    }
    if (handoff) {
      save_medium_path(q.paths[j], ps, ms, es, i);
      q.back[atomicAdd(&q.header->back_count, 1u)] = j;
    } else {
      store_tuple(tuples, nonfinite, i, physics::path_finish_env(ps, p, es));
    }
    tracing = false;
  }
}

/// Phase 3: the few paths phase 2 handed on (a re-entry, which edge rounding's normals or a frosted facet's
/// directions allow), each finished with every bounce.
template <unsigned Block, unsigned MinBlocks, std::uint32_t kEnv>
__global__ void __launch_bounds__(Block, MinBlocks)
    medium_rest_kernel(const physics::ChunkScene scene, const physics::EnvMapView map,
                       float* __restrict__ tuples, std::uint32_t* __restrict__ nonfinite, MediumQueues q) {
  const std::uint32_t n = q.header->back_count;
  if (blockIdx.x * blockDim.x >= n) return;  // whole block past the queue (uniform: before the barrier)
  __shared__ physics::FacetPlane planes[physics::kMaxPlanes];
  load_planes(planes, scene);
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const physics::TraceParams& p = scene.params;
  const auto env = medium_env<kEnv>(scene, map);
  physics::PathState ps;
  physics::MediumPathState ms;
  physics::EnvPathState es;
  const std::uint64_t i = load_medium_path(ps, ms, es, q.paths[q.back[t]]);
  while (physics::path_step_uniaxial(ps, ms, p, scene.medium, planes, env, es)) {
  }
  store_tuple(tuples, nonfinite, i, physics::path_finish_env(ps, p, es));
}

/// A persistent kernel's grid: as many blocks of `block` threads as stay resident at once on the current device
/// (at most `blocks`, the blocks one thread per item would take).
template <class Kernel>
Status resident_grid(Kernel kernel, unsigned block, unsigned blocks, unsigned& grid) {
  int device = 0, sms = 0, per_sm = 0;
  FT_CUDA_TRY(cudaGetDevice(&device));
  FT_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  FT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(block), 0));
  const auto resident = static_cast<unsigned>(sms > 0 && per_sm > 0 ? sms * per_sm : 1);
  grid = resident < blocks ? resident : blocks;
  return {};
}

template <class Env>
void launch_env(const physics::ChunkScene& scene, const Env& env, const ChunkRange& range, float* tuples,
                std::uint32_t* nonfinite, CUstream_st* stream) {
  constexpr unsigned kBlock = 256;
  const std::uint64_t tuple_count = std::uint64_t{range.pixel_count} * range.spp;
  const unsigned grid = static_cast<unsigned>((tuple_count + kBlock - 1) / kBlock);
  transport_env_kernel<kBlock, 2><<<grid, kBlock, 0, stream>>>(scene, env, range, tuples, nonfinite);
}

/// A clear uniaxial stone's first two phases over one run of n tuples: the first kernel's bounces, then the
/// persistent inside phase without gathering (nothing scatters); kPlain: the kernels without the code a plain
/// stone cannot reach (plain_medium).
template <std::uint32_t kEnv, bool kPlain>
Status launch_clear_phases(const physics::ChunkScene& scene, const physics::EnvMapView& map,
                           const ChunkRange& range, std::uint64_t first, std::uint32_t n, float* tuples,
                           std::uint32_t* nonfinite, const MediumQueues& q, CUstream_st* stream) {
  constexpr unsigned kBlock = 256;
  const unsigned grid = (n + kBlock - 1) / kBlock;
  unsigned inside_grid = 0;
  FT_TRY(resident_grid(medium_inside_kernel<kBlock, kMediumMinBlocks, kEnv, false, kPlain>, kBlock, grid,
                       inside_grid));
  medium_first_kernel<kBlock, kMediumMinBlocks, kEnv, true, kPlain>
      <<<grid, kBlock, 0, stream>>>(scene, map, range, first, n, tuples, nonfinite, q);
  FT_CUDA_LAUNCH_CHECK(kPlain ? "medium_first_kernel<plain><<<>>>" : "medium_first_kernel<clear><<<>>>",
                       stream);
  medium_inside_kernel<kBlock, kMediumMinBlocks, kEnv, false, kPlain>
      <<<inside_grid, kBlock, 0, stream>>>(scene, map, tuples, nonfinite, q);
  FT_CUDA_LAUNCH_CHECK(kPlain ? "medium_inside_kernel<plain><<<>>>" : "medium_inside_kernel<clear><<<>>>",
                       stream);
  return {};
}

/// A medium chunk: for a uniaxial stone and queues (`handoff`), over each run of at most kMediumQueueTuples
/// tuples, the three phases (with inclusions; a clear stone's first phase is the split of medium_first_kernel<…,
/// true>, its inside phase does not gather); else the one-launch kernel.
template <std::uint32_t kKind, std::uint32_t kEnv>
Status launch_medium(const physics::ChunkScene& scene, const physics::EnvMapView& map,
                     const ChunkRange& range, float* tuples, std::uint32_t* nonfinite, void* handoff,
                     CUstream_st* stream) {
  constexpr unsigned kBlock = 256;
  const std::uint64_t tuple_count = std::uint64_t{range.pixel_count} * range.spp;
  if (kKind != physics::kMediumUniaxial || !phased_medium(scene.medium) || handoff == nullptr) {
    const unsigned grid = static_cast<unsigned>((tuple_count + kBlock - 1) / kBlock);
    transport_medium_kernel<kBlock, kMediumMinBlocks, kKind, kEnv>
        <<<grid, kBlock, 0, stream>>>(scene, map, range, tuples, nonfinite);
    FT_CUDA_LAUNCH_CHECK("transport_medium_kernel<<<>>>", stream);
    return {};
  }
  const std::uint64_t capacity = medium_queue_capacity(tuple_count);
  const MediumQueues q = medium_queues(handoff, capacity);
  for (std::uint64_t first = 0; first < tuple_count; first += capacity) {
    const auto n =
        static_cast<std::uint32_t>(tuple_count - first < capacity ? tuple_count - first : capacity);
    const unsigned grid = (n + kBlock - 1) / kBlock;
    FT_CUDA_TRY(cudaMemsetAsync(q.header, 0, sizeof(MediumQueueHeader), stream));
    if (!(scene.medium.sigma_s > 0.0f)) {
      // A clear stone: the first kernel's bounces, then the persistent inside phase without gathering (nothing
      // scatters) and the re-entries; a plain one's kernels without the code it cannot reach.
      const auto clear_phases =
          plain_medium(scene) ? launch_clear_phases<kEnv, true> : launch_clear_phases<kEnv, false>;
      FT_TRY(clear_phases(scene, map, range, first, n, tuples, nonfinite, q, stream));
      medium_rest_kernel<kBlock, kMediumMinBlocks, kEnv>
          <<<grid, kBlock, 0, stream>>>(scene, map, tuples, nonfinite, q);
      FT_CUDA_LAUNCH_CHECK("medium_rest_kernel<<<>>>", stream);
      continue;
    }
    // The gathering inside phase's grid (a clear stone's is launch_clear_phases's own).
    unsigned inside_grid = 0;
    FT_TRY(resident_grid(medium_inside_kernel<kBlock, kMediumMinBlocks, kEnv>, kBlock, grid, inside_grid));
    medium_first_kernel<kBlock, kMediumMinBlocks, kEnv, false>
        <<<grid, kBlock, 0, stream>>>(scene, map, range, first, n, tuples, nonfinite, q);
    FT_CUDA_LAUNCH_CHECK("medium_first_kernel<outside><<<>>>", stream);
    medium_inside_kernel<kBlock, kMediumMinBlocks, kEnv>
        <<<inside_grid, kBlock, 0, stream>>>(scene, map, tuples, nonfinite, q);
    FT_CUDA_LAUNCH_CHECK("medium_inside_kernel<<<>>>", stream);
    medium_rest_kernel<kBlock, kMediumMinBlocks, kEnv>
        <<<grid, kBlock, 0, stream>>>(scene, map, tuples, nonfinite, q);
    FT_CUDA_LAUNCH_CHECK("medium_rest_kernel<<<>>>", stream);
  }
  return {};
}

/// Thread ↔ pixel: sums[p] (global, seeded with the caller's running sums) += that pixel's tuples in
/// ascending sample order, one float add at a time — the same order as the CPU tracer (docs/design/tracer.md §9 G2/G3).
__global__ void reduce_xyz_kernel(const float* __restrict__ tuples, float* __restrict__ sums,
                                  std::uint32_t pixel_count, std::uint32_t spp) {
  const std::uint32_t p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pixel_count) return;
  float x = sums[3 * p + 0], y = sums[3 * p + 1], z = sums[3 * p + 2];
  const float* t = tuples + std::uint64_t{p} * spp * 3;
  for (std::uint32_t s = 0; s < spp; ++s) {
    x = __fadd_rn(x, t[3 * s + 0]);
    y = __fadd_rn(y, t[3 * s + 1]);
    z = __fadd_rn(z, t[3 * s + 2]);
  }
  sums[3 * p + 0] = x;
  sums[3 * p + 1] = y;
  sums[3 * p + 2] = z;
}

}  // namespace

Status can_implement_chunk(const ChunkArgs& args) {
  const auto& p = args.scene.params;
  const ChunkRange& range = args.range;
  if (p.plane_count > physics::kMaxPlanes)
    return Status(Code::kDeclined, "scene has " + std::to_string(p.plane_count) +
                                       " planes; the GPU keeps at most " +
                                       std::to_string(physics::kMaxPlanes) + " in shared memory");
  if (range.pixel_count == 0 || range.spp == 0) return invalid_argument("trace chunk: empty range");
  const std::uint64_t tuples = std::uint64_t{range.pixel_count} * range.spp;
  if (tuples > kMaxTuplesPerLaunch)
    return invalid_argument("trace chunk: " + std::to_string(tuples) +
                            " tuples exceed the per-launch limit " + std::to_string(kMaxTuplesPerLaunch));
  const std::uint64_t pixels = std::uint64_t{p.width} * p.height;
  if (std::uint64_t{range.pixel_offset} + range.pixel_count > pixels)
    return invalid_argument("trace chunk: pixels [" + std::to_string(range.pixel_offset) + ", +" +
                            std::to_string(range.pixel_count) + ") exceed the image's " +
                            std::to_string(pixels));
  if (std::uint64_t{range.first_sample} + range.spp > 0xFFFFFFFFull)
    return invalid_argument("trace chunk: sample range exceeds 2^32");
  bool known = false;
  for (const NamedKernelConfig& c : kKernelConfigs)
    known = known || same_kernel_config(c.config, args.kernel);
  if (!known)
    return invalid_argument("trace chunk: kernel configuration {block " + std::to_string(args.kernel.block) +
                            ", min_blocks " + std::to_string(args.kernel.min_blocks) + ", split " +
                            std::to_string(args.kernel.split) + "} is not one transport.cu instantiates");
  return {};
}

std::uint64_t handoff_bytes(const ChunkArgs& args) {
  const std::uint64_t tuples = std::uint64_t{args.range.pixel_count} * args.range.spp;
  const physics::MediumParams& md = args.scene.medium;
  if (physics::needs_medium_transport(md)) {
    if (!phased_medium(md)) return 0;
    const std::uint64_t capacity = medium_queue_capacity(tuples);
    return kHandoffHeaderBytes + capacity * (sizeof(SavedMediumPath) + sizeof(std::uint32_t));
  }
  const std::uint32_t env = args.scene.params.env_kind;
  if (args.kernel.split == 0 || env == physics::kEnvHdr || env == physics::kEnvPreset) return 0;
  return kHandoffHeaderBytes + tuples / kHandoffShare * sizeof(SavedPath);
}

namespace {

template <unsigned Block, unsigned MinBlocks, bool Split>
Status launch_transport(const physics::ChunkScene& scene, const ChunkRange& range, float* tuples,
                        std::uint32_t* nonfinite, unsigned split, void* handoff, CUstream_st* stream) {
  const std::uint64_t tuple_count = std::uint64_t{range.pixel_count} * range.spp;
  const unsigned grid = static_cast<unsigned>((tuple_count + Block - 1) / Block);
  auto* header = static_cast<HandoffHeader*>(handoff);
  SavedPath* saved =
      handoff ? reinterpret_cast<SavedPath*>(static_cast<std::byte*>(handoff) + kHandoffHeaderBytes)
              : nullptr;
  const auto capacity = static_cast<std::uint32_t>(tuple_count / kHandoffShare);
  if (!Split || handoff == nullptr || capacity == 0) split = 0;
  if (split > 0) FT_CUDA_TRY(cudaMemsetAsync(header, 0, sizeof(HandoffHeader), stream));
  bool one_launch = true;  // no handoff (not a split configuration, or a chunk of one tuple)
  if constexpr (Split) {
    if (split > 0) {
      transport_main_kernel<Block, MinBlocks, true>
          <<<grid, Block, 0, stream>>>(scene, range, tuples, nonfinite, split, header, saved, capacity);
      one_launch = false;
    }
  }
  if (one_launch) {
    transport_main_kernel<Block, MinBlocks, false>
        <<<grid, Block, 0, stream>>>(scene, range, tuples, nonfinite, 0, header, saved, capacity);
  }
  FT_CUDA_LAUNCH_CHECK("transport_main_kernel<<<>>>", stream);
  if constexpr (Split) {
    if (split == 0) return {};
    const unsigned rest_grid = (capacity + Block - 1) / Block;
    transport_rest_kernel<Block, MinBlocks>
        <<<rest_grid, Block, 0, stream>>>(scene, tuples, nonfinite, header, saved, capacity);
    FT_CUDA_LAUNCH_CHECK("transport_rest_kernel<<<>>>", stream);
  }
  return {};
}

}  // namespace

Status launch_trace_chunk(const ChunkArgs& args, float* tuples, float* sums, std::uint32_t* nonfinite,
                          void* handoff, CUstream_st* stream, const physics::EnvMapView* hdr) {
  FT_TRY(can_implement_chunk(args));
  const physics::ChunkScene& scene = args.scene;
  const ChunkRange& range = args.range;
  // Every configuration of kKernelConfigs (checked above) maps to one instantiation.
  const KernelConfig& cfg = args.kernel;
  const physics::MediumParams& md = scene.medium;
  if (physics::needs_medium_transport(md)) {
    const physics::EnvMapView map = hdr != nullptr ? *hdr : physics::EnvMapView{};
    const bool preset = hdr == nullptr && scene.params.env_kind == physics::kEnvPreset;
    if (md.kind == physics::kMediumUniaxial) {
      if (hdr != nullptr)
        FT_TRY((launch_medium<physics::kMediumUniaxial, kMediumEnvHdr>(scene, map, range, tuples, nonfinite,
                                                                       handoff, stream)));
      else if (preset)
        FT_TRY((launch_medium<physics::kMediumUniaxial, kMediumEnvPreset>(scene, map, range, tuples,
                                                                          nonfinite, handoff, stream)));
      else
        FT_TRY((launch_medium<physics::kMediumUniaxial, kMediumEnvAnalytic>(scene, map, range, tuples,
                                                                            nonfinite, handoff, stream)));
    } else {
      if (hdr != nullptr)
        FT_TRY((launch_medium<physics::kMediumIsotropic, kMediumEnvHdr>(scene, map, range, tuples, nonfinite,
                                                                        nullptr, stream)));
      else if (preset)
        FT_TRY((launch_medium<physics::kMediumIsotropic, kMediumEnvPreset>(scene, map, range, tuples,
                                                                           nonfinite, nullptr, stream)));
      else
        FT_TRY((launch_medium<physics::kMediumIsotropic, kMediumEnvAnalytic>(scene, map, range, tuples,
                                                                             nonfinite, nullptr, stream)));
    }
  } else if (hdr != nullptr) {
    launch_env(scene, physics::HdrEnv{*hdr}, range, tuples, nonfinite, stream);
    FT_CUDA_LAUNCH_CHECK("transport_env_kernel<HdrEnv><<<>>>", stream);
  } else if (scene.params.env_kind == physics::kEnvPreset) {
    launch_env(scene, physics::PresetEnv{scene.params.preset_model == physics::kPresetSun ? 1u : 0u}, range,
               tuples, nonfinite, stream);
    FT_CUDA_LAUNCH_CHECK("transport_env_kernel<PresetEnv><<<>>>", stream);
  } else if (cfg.split > 0) {
    FT_TRY((launch_transport<256, 4, true>(scene, range, tuples, nonfinite, cfg.split, handoff, stream)));
  } else if (cfg.block == 128) {
    FT_TRY((launch_transport<128, 4, false>(scene, range, tuples, nonfinite, 0, nullptr, stream)));
  } else if (cfg.block == 64) {
    FT_TRY((launch_transport<64, 1, false>(scene, range, tuples, nonfinite, 0, nullptr, stream)));
  } else if (cfg.min_blocks == 5) {
    FT_TRY((launch_transport<256, 5, false>(scene, range, tuples, nonfinite, 0, nullptr, stream)));
  } else {
    FT_TRY((launch_transport<256, 2, false>(scene, range, tuples, nonfinite, 0, nullptr, stream)));
  }
  const unsigned rgrid = (range.pixel_count + kReduceBlock - 1) / kReduceBlock;
  reduce_xyz_kernel<<<rgrid, kReduceBlock, 0, stream>>>(tuples, sums, range.pixel_count, range.spp);
  FT_CUDA_LAUNCH_CHECK("reduce_xyz_kernel<<<>>>", stream);
  return {};
}

}  // namespace facetrace::tracer
