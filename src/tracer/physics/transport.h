/// @file
/// trace_sample: one hero-wavelength spectral path (docs/design/tracer.md §7) turned into CIE XYZ (§8). The single entry
/// point shared by the CPU tracer and the CUDA megakernel; a pure function of (params, planes, x, y, s).
#pragma once

#include <cmath>
#include <cstdint>

#include "absorption.h"
#include "camera.h"
#include "dispersion.h"
#include "edge_rounding.h"
#include "environment.h"
#include "fresnel.h"
#include "geometry.h"
#include "hdr_environment.h"
#include "host_device.h"
#include "preset_environment.h"
#include "chunk.h"
#include "rng.h"
#include "spectrum.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr float kProbMin = 0.02f;     // docs/design/tracer.md §7.2 step 7: p clamped to [0.02, 0.98]
inline constexpr float kProbMax = 0.98f;     // docs/design/tracer.md §7.2 step 7
inline constexpr float kPdfClampLo = 1e-4f;  // docs/design/tracer.md §7.2 step 7: path_pdf factors clamped
inline constexpr float kPdfClampHi = 1.0f - 1e-4f;     // docs/design/tracer.md §7.2 step 7
inline constexpr float kSameDirection = 1.0f - 1e-6f;  // docs/design/tracer.md §7.4: divergence threshold
inline constexpr std::uint32_t kRouletteAfter = 4;     // docs/design/tracer.md §7.2 step 10: only when b > 4
inline constexpr float kRouletteMin = 0.05f;  // docs/design/tracer.md §7.2 step 10: q clamped to [0.05, 1]
inline constexpr float kMisEpsilon = 1e-12f;  // docs/design/tracer.md §8: MIS fallback threshold
inline constexpr float kXyzScale = kChannelStepNm / kCmfYIntegral;  // docs/design/tracer.md §8: 50/106.856
inline constexpr float kPi = 3.14159265358979323846f;

namespace detail {

/// max/min by selection: inlined on the host (libm's fmaxf/fminf are calls without fast math).
FT_HD float maxf(float a, float b) { return a > b ? a : b; }
FT_HD float minf(float a, float b) { return a < b ? a : b; }
FT_HD float clampf(float v, float lo, float hi) { return minf(maxf(v, lo), hi); }

/// True when a Stokes vector is exactly zero — a channel terminated at an earlier refraction (§7.4). A Mueller
/// matrix or an attenuation maps it to zero again, so that work is skipped (most non-hero channels of a
/// dispersive stone die at the first refraction).
FT_HD bool stokes_zero(const float* s) {
  return s[0] == 0.0f && s[1] == 0.0f && s[2] == 0.0f && s[3] == 0.0f;
}

/// Any unit vector perpendicular to unit v (branchless ONB, Duff et al. 2017).
FT_HD void orthonormal_basis(Vec3 n, Vec3& t, Vec3& b) {
  const float sign = n.z >= 0.0f ? 1.0f : -1.0f;
  const float a = -1.0f / (sign + n.z);
  const float c = n.x * n.y * a;
  t = Vec3{1.0f + sign * n.x * n.x * a, sign * c, -sign * n.x};
  b = Vec3{c, sign + n.y * n.y * a, -n.y};
}

/// Cosine-weighted direction about unit n (docs/design/tracer.md §7.5 frosted facet).
FT_HD Vec3 cosine_direction(Vec3 n, float u1, float u2) {
  Vec3 t, b;
  orthonormal_basis(n, t, b);
  const float r = sqrtf(u1);
  const float phi = 2.0f * kPi * u2;
  const float z = sqrtf(detail::maxf(0.0f, 1.0f - u1));
  return normalize(t * (r * cosf(phi)) + b * (r * sinf(phi)) + n * z);
}

}  // namespace detail

/// Channel k's illuminant S(λ_k) (docs/design/tracer.md §7.1), recomputed where used instead of held in the path state.
FT_HD float channel_illum(const TraceParams& p, float hero, int k) {
  return illuminant(p.illuminant_kind, p.planck_kelvin, channel_lambda(hero, k));
}

/// Channel k's absorption coefficient α(λ_k)·path_scale (docs/design/tracer.md §7.1; 0 without bands), recomputed where
/// used.
FT_HD float channel_alpha(const TraceParams& p, float hero, int k) {
  if (p.band_count == 0) return 0.0f;
  return absorption_coefficient(p.bands, p.band_count, channel_lambda(hero, k)) * p.path_scale;
}

/// The analytic environments (docs/design/tracer.md §6: Studio rig, uniform): L(ω, λ) = shape(ω)·S(λ), no NEE.
/// The environment policy of path_step_env for every Tier 1 scene; its expressions are the ones path_step always
/// had, term for term, so Tier 1 results keep their bits.
struct AnalyticEnv {
  static constexpr bool kNee = false;
  struct Lookup {
    float shape;
  };
  FT_HD Lookup at(const TraceParams& p, Vec3 w) const { return Lookup{environment_shape(p, w)}; }
  /// A miss at bounce b: the backdrop for a camera ray (§7.2 step 2), else the environment.
  FT_HD Lookup miss(const TraceParams& p, Vec3 w, std::uint32_t b) const {
    return Lookup{b == 0 ? bounce0_miss_shape(p) : environment_shape(p, w)};
  }
  FT_HD static void scale(Lookup&, float) {}
  /// Channel k's contribution ik·shape·S(λ_k), in that order of products.
  FT_HD float radiance(const TraceParams& p, const Lookup& l, float ik, float hero, int k) const {
    return ik * l.shape * channel_illum(p, hero, k);
  }
};

/// What next-event estimation adds to a path (docs/design/tracer.md §6.1), kept beside PathState by the callers of
/// path_step_env with an NEE environment: the XYZ already committed by NEE, and the BSDF density of the last
/// frosted bounce towards the outside (0 after any other event), which weighs the escape that follows it.
struct EnvPathState {
  float xyz[3];
  float bsdf_pdf;
};

/// The state of one path between bounces (docs/design/tracer.md §7.1 table). Of the per-channel constants only n(λ_k)
/// is held: λ_k, S(λ_k) and α(λ_k) are pure functions of the hero, recomputed where used (the same bits).
/// `split` doubles as the radiance: a path adds radiance only at the miss that ends it, so when path_step
/// returns false `split[k]` holds radiance[k] (0 for a path cut by roulette or max_bounces).
struct alignas(16) PathState {
  float st[kChannels][4];
  float pdf[kChannels], split[kChannels];
  float n_k[kChannels];
  std::uint64_t compat;  // byte k = compat[k] (§7.1: 0xFF), packed into one word
  Vec3 org, dir, s_prev;
  float hero;
  std::uint32_t seed, b;
  std::uint32_t live;  // bit k clear: channel k's Stokes vector is known to be exactly zero (it stays zero)
  std::uint8_t split_bits;  // bit k set: split[k] was written by an exit split (a superset of split[k] ≠ 0)
  bool inside;
};

/// The power heuristic (Veach 1997, β = 2) of a technique with density p_this against one with p_other
/// (docs/design/tracer.md §6.1); p_this > 0.
FT_HD float env_mis_weight(float p_this, float p_other) {
  const float a = p_this * p_this;
  return a / (a + p_other * p_other);
}

namespace detail {

/// §8's hero-wavelength weight of channel k now: 8·pdf[0] / Σ_{j ∈ compat[k]} pdf[j], 1 when the sum is ≤ 1e-12
/// (path_finish's arithmetic, for radiance committed before the path ends).
FT_HD float spectral_weight(const PathState& ps, int k) {
  float denom = 0.0f;
  FT_UNROLL for (int j = 0; j < kChannels; ++j) {
    if ((ps.compat >> (8 * k + j)) & 1u) denom += ps.pdf[j];
  }
  return denom > kMisEpsilon ? static_cast<float>(kChannels) * ps.pdf[0] / denom : 1.0f;
}

}  // namespace detail

/// Next-event estimation at a frosted bounce that leaves through the side with normal n_out towards the outside
/// (docs/design/tracer.md §6.1, §6.2): one direction ω drawn from the environment's light-sampling technique
/// (env.nee_sample: the map's importance sampling, or the DaylightSun disc; streams kStreamNee,
/// kStreamNeeColumn), kept when it lies on that side and leaves the stone unblocked; each live channel adds
/// I_k·L_e(ω, λ_k)·(p_b/p_e)·w_nee, with L_e the light-sampled radiance (env.nee_at), p_b = cos/π the frosted
/// lobe's density, p_e = env.nee_pdf and w_nee the power heuristic, straight into es.xyz with the channel's
/// current §8 weight (the same weight the BSDF-sampled escape of this bounce gets, since nothing happens to
/// the path in between). I_k already holds the bounce's Fresnel factor over its choice probability.
template <class Env>
FT_HD void env_next_event(const PathState& ps, const TraceParams& p, const FacetPlane* planes, const Env& env,
                          EnvPathState& es, Vec3 pos, Vec3 n_out, unsigned live) {
  const Vec3 w = env.nee_sample(p, stream_uniform(ps.seed, ps.b, kStreamNee),
                                stream_uniform(ps.seed, ps.b, kStreamNeeColumn));
  const float cos_o = dot(w, n_out);
  if (!(cos_o > 0.0f)) return;
  const float pe = env.nee_pdf(p, w);
  if (!(pe > 0.0f)) return;
  const Vec3 o = pos + w * kRayOffset;
  if (!misses_bound(p.bound_radius2, o, w) && intersect_polyhedron(planes, p.plane_count, o, w).plane >= 0)
    return;
  const float pb = cos_o * kInvPiF;
  typename Env::Lookup look = env.nee_at(p, w);
  Env::scale_nee(look, pb / pe * env_mis_weight(pe, pb));
  for (unsigned m = live; m != 0u; m &= m - 1u) {
    const int k = FT_LOWEST_BIT(m);
    const float ik = detail::maxf(ps.st[k][0], 0.0f);
    if (ik == 0.0f) continue;
    const float v = env.radiance(p, look, ik, ps.hero, k) * detail::spectral_weight(ps, k) * kXyzScale;
    const Vec3 cmf = cmf_xyz(channel_lambda(ps.hero, k));
    es.xyz[0] += cmf.x * v;
    es.xyz[1] += cmf.y * v;
    es.xyz[2] += cmf.z * v;
  }
}

/// The way out of a frosted facet for a path leaving towards the environment on the side of outward normal n_out
/// (docs/design/tracer.md §7.5), all channels along it: a cosine-weighted direction from the frosted streams;
/// under a policy with NEE, next-event estimation there while a BSDF-sampled escape could still be traced
/// (b + 1 < max_bounces), the direction's density kept as that escape's BSDF pdf (§6.1). s_prev becomes an axis
/// ⊥ the direction (the depolarised path's frame).
template <class Env>
FT_HD Vec3 frosted_direction(const PathState& ps, const TraceParams& p, const FacetPlane* planes,
                             const Env& env, EnvPathState& es, Vec3 pos, Vec3 n_out, unsigned live,
                             Vec3& s_prev) {
  const Vec3 dir = detail::cosine_direction(n_out, stream_uniform(ps.seed, ps.b, kStreamFrostedDir1),
                                            stream_uniform(ps.seed, ps.b, kStreamFrostedDir2));
  if constexpr (Env::kNee) {
    if (env.nee_enabled() && ps.b + 1 < p.max_bounces) {
      es.bsdf_pdf = detail::maxf(dot(dir, n_out), 0.0f) * kInvPiF;
      env_next_event(ps, p, planes, env, es, pos, n_out, live);
    }
  }
  Vec3 t_axis, b_axis;
  detail::orthonormal_basis(dir, t_axis, b_axis);
  s_prev = t_axis;
  return dir;
}

/// Starts sample s of pixel (x, y): wavelengths, per-channel constants, camera ray (docs/design/tracer.md §7.1).
FT_HD void path_begin(PathState& ps, const TraceParams& p, std::uint32_t x, std::uint32_t y,
                      std::uint32_t s) {
  constexpr int K = kChannels;
  const std::uint32_t pixel = y * p.width + x;  // docs/design/tracer.md §9: global pixel p = y·W + x
  ps.seed = sample_seed(pixel, s);
  const PixelSample smp = pixel_sample(pixel, s);
  ps.hero = kLambdaMinNm + kLambdaSpanNm * smp.u_hero;
  ps.compat = ~std::uint64_t{0};
  FT_CHANNELS for (int k = 0; k < K; ++k) {
    ps.n_k[k] = refractive_index(p.dispersion, channel_lambda(ps.hero, k));
    ps.st[k][0] = 1.0f;
    ps.st[k][1] = ps.st[k][2] = ps.st[k][3] = 0.0f;
    ps.pdf[k] = 1.0f;
    ps.split[k] = 0.0f;
  }
  ps.org = p.eye;
  ps.dir = camera_direction(p, x, y, smp.jx, smp.jy);
  ps.s_prev = normalize(cross(ps.dir, p.up));  // reference s axis; the camera ray is unpolarised
  ps.inside = false;
  ps.live = (1u << K) - 1u;
  ps.split_bits = 0;
  ps.b = 0;
}

namespace detail {

/// §7.2 step 2, a miss: each live channel adds max(I_k, 0)·L(dir, λ_k) (the backdrop for a camera ray) to its
/// staged split radiance, which `split` then holds; under NEE an escape sampled by a frosted bounce carries the
/// power-heuristic weight against NEE (§6.1). The path ends.
template <class Env>
FT_HD void path_escape(PathState& ps, const TraceParams& p, const Env& env, Vec3 dir, std::uint32_t b,
                       float escape_bsdf_pdf) {
  // radiance[k] = 0 + this; `split` holds it from here (the ±0 difference cannot matter: §8 skips zeros).
  typename Env::Lookup look = env.miss(p, dir, b);
  if constexpr (Env::kNee) {
    if (escape_bsdf_pdf > 0.0f) Env::scale_nee(look, env_mis_weight(escape_bsdf_pdf, env.nee_pdf(p, dir)));
  }
  // A zero channel would add +0 (max(±0, 0)·shape·S = +0): its split value stands as it is.
  FT_CHANNELS for (int k = 0; k < kChannels; ++k) {
    if (!((ps.live >> k) & 1u)) continue;
    ps.split[k] = env.radiance(p, look, maxf(ps.st[k][0], 0.0f), ps.hero, k) + ps.split[k];
  }
}

/// §7.2 steps 9–10 and the bounce count: stores the new ray (origin pos + 1e-4·dir), plays Russian roulette
/// for b > 4 and cuts the path at max_bounces. Returns path_step's answer (true: the path goes on).
FT_HD bool end_bounce(PathState& ps, const TraceParams& p, unsigned live, Vec3 pos, Vec3 dir, Vec3 s_prev,
                      bool inside) {
  constexpr int K = kChannels;
  auto& st = ps.st;
  auto& split = ps.split;
  const std::uint32_t b = ps.b;
  ps.live = live;

  // 9. Advance.
  ps.org = pos + dir * kRayOffset;
  ps.dir = dir;
  ps.s_prev = s_prev;
  ps.inside = inside;

  // 10. Russian roulette (only when b > 4).
  if (b > kRouletteAfter) {
    float imax = st[0][0];
    // A zero channel (±0) can only raise imax when every other is negative, and then q is 0.05 either way.
    FT_CHANNELS for (int k = 1; k < K; ++k) {
      if ((live >> k) & 1u) imax = maxf(imax, st[k][0]);
    }
    const float q = clampf(imax, kRouletteMin, 1.0f);
    if (stream_uniform(ps.seed, b, kStreamRoulette) > q) {
      FT_CHANNELS for (int k = 0; k < K; ++k) split[k] = 0.0f;  // staged split radiance is discarded
      return false;
    }
    const float inv_q = 1.0f / q;
    FT_CHANNELS for (int k = 0; k < K; ++k) {
      if ((live >> k) & 1u) {
        st[k][0] *= inv_q;
        st[k][1] *= inv_q;
        st[k][2] *= inv_q;
        st[k][3] *= inv_q;
      }
      split[k] *= inv_q;
    }
  }
  ps.b = b + 1;
  if (ps.b < p.max_bounces) return true;
  FT_CHANNELS for (int k = 0; k < K; ++k) split[k] = 0.0f;  // cut at max_bounces: no radiance
  return false;
}

/// Henyey–Greenstein direction about unit w with asymmetry g (docs/design/tracer.md §7.7): cos θ by inversion of
/// the HG distribution, cos θ = (1 + g² − ((1 − g²)/(1 − g + 2g·u1))²)/(2g) (isotropic for |g| < 1e-3), φ = 2π·u2.
/// The phase function equals its density, so the scattering weight is 1.
FT_HD Vec3 hg_direction(Vec3 w, float g, float u1, float u2) {
  float cos_t;
  if (fabsf(g) < 1e-3f) {
    cos_t = 1.0f - 2.0f * u1;
  } else {
    const float sq = (1.0f - g * g) / (1.0f - g + 2.0f * g * u1);
    cos_t = (1.0f + g * g - sq * sq) / (2.0f * g);
  }
  cos_t = clampf(cos_t, -1.0f, 1.0f);
  const float sin_t = sqrtf(maxf(0.0f, 1.0f - cos_t * cos_t));
  const float phi = 2.0f * kPi * u2;
  Vec3 t, bb;
  orthonormal_basis(w, t, bb);
  return normalize(t * (sin_t * cosf(phi)) + bb * (sin_t * sinf(phi)) + w * cos_t);
}

/// Inclusions on a segment of length t_hit inside the stone (docs/design/tracer.md §7.7, tracer.md §7.5): the free
/// path is drawn from the hero's extinction σ_t = α_hero + σ_s (stream kStreamHgDistance). On a scatter
/// (t_free < t_hit) every live channel's Stokes vector becomes (I_k·σ_s·e^(−σ_t,k·t)/(σ_t,0·(1 − u)), 0, 0, 0)
/// and pdf[k] gains σ_t,k·e^(−σ_t,k·t); otherwise S_k gains e^(−σ_t,k·t_hit)/e^(−σ_t,0·t_hit) and pdf[k]
/// e^(−σ_t,k·t_hit) — the hero's Beer–Lambert factor then lives in its sampling probability, so the caller
/// applies no absorption to this segment. alpha(k) is channel k's α·path_scale for the path's mode. Returns
/// t_free on a scatter, −1 otherwise. Follows the reference renderer's estimator (suitable-name/indicatrix,
/// crates/indicatrix/src/optics/raytracer/scattering/hg.rs), written anew.
template <class Alpha>
FT_HD float inclusion_segment(PathState& ps, const MediumParams& m, float t_hit, unsigned live,
                              const Alpha& alpha) {
  const float sig0 = alpha(0) + m.sigma_s;
  const float one_minus_u = maxf(1.0f - stream_uniform(ps.seed, ps.b, kStreamHgDistance), 1e-7f);
  const float t_free = -logf(one_minus_u) / sig0;
  const bool scatter = t_free < t_hit;
  const float t = scatter ? t_free : t_hit;
  const float hero_den = scatter ? sig0 * one_minus_u : maxf(expf(-sig0 * t_hit), 1e-30f);
  FT_CHANNELS for (int k = 0; k < kChannels; ++k) {
    const float sig = k == 0 ? sig0 : alpha(k) + m.sigma_s;
    const float tr = expf(-sig * t);
    ps.pdf[k] *= scatter ? sig * tr : tr;
    if (!((live >> k) & 1u)) continue;
    float* sk = ps.st[k];
    if (scatter) {
      sk[0] *= tr * m.sigma_s / hero_den;
      sk[1] = sk[2] = sk[3] = 0.0f;  // depolarised
    } else {
      const float w = tr / hero_den;
      sk[0] *= w;
      sk[1] *= w;
      sk[2] *= w;
      sk[3] *= w;
    }
  }
  return scatter ? t_free : -1.0f;
}

}  // namespace detail

/// One bounce of the path (docs/design/tracer.md §7.2 steps 1–10). Returns true when the path goes on; false when it
/// ended (miss, roulette, or max_bounces reached), with ps.split then holding the radiance. Requires
/// ps.b < p.max_bounces.
///
/// Channels are independent within a bounce once the hero has made the choice, so after the hero's Fresnel
/// decision one loop runs each channel's steps 3–8 in the order of §7.2 (rotation, absorption, η and
/// cos t, pdf factor, Mueller update, refracted direction, exit split): the same arithmetic per channel as
/// step-by-step loops, with no per-channel temporaries but the refracted directions an entry compares
/// pairwise.
///
/// Long (≈ 240 lines) on purpose: this is the megakernel's hot loop body, one straight-line function so the
/// compiler keeps a bounce's state in registers; splitting the path state's steps into calls raised the
/// spills (benchmarks/NOTES.md), and CPU and GPU share it bit for bit.
///
/// kMedium (with `medium`): HG inclusions inside the stone (docs/design/tracer.md §7.7) before the facet and edge
/// rounding's surface normal (§4.1); the instantiation without them is the Tier 1 code unchanged.
template <class Env, bool kMedium = false>
FT_HD bool path_step_env(PathState& ps, const TraceParams& p, const FacetPlane* planes, const Env& env,
                         EnvPathState& es, const MediumParams* medium = nullptr) {
  constexpr int K = kChannels;
  auto& st = ps.st;
  auto& pdf = ps.pdf;
  auto& split = ps.split;
  const auto& n_k = ps.n_k;
  const std::uint32_t b = ps.b;
  const std::uint32_t seed = ps.seed;
  Vec3 dir = ps.dir;
  bool inside = ps.inside;
  Vec3 s_prev = ps.s_prev;
  const Vec3 org = ps.org;
  float escape_bsdf_pdf = 0.0f;  // NEE only: the density of the frosted bounce that sent this ray out
  if constexpr (Env::kNee) {
    escape_bsdf_pdf = es.bsdf_pdf;
    es.bsdf_pdf = 0.0f;
  }
  // 1. Intersect (§4). A ray inside the stone tries the branch-free exit test first (the same result).
  Hit hit{-1, 0.0f};
  if (!misses_bound(p.bound_radius2, org, dir) &&
      !(inside && exit_from_inside(planes, p.plane_count, p.bound_radius2, org, dir, hit)))
    hit = intersect_polyhedron(planes, p.plane_count, org, dir);
  bool absorbed = false;  // kMedium: the segment's extinction is already applied
  if constexpr (kMedium) {
    if (inside && hit.plane >= 0 && medium->sigma_s > 0.0f) {
      const float t_free = detail::inclusion_segment(ps, *medium, hit.t, ps.live,
                                                     [&](int k) { return channel_alpha(p, ps.hero, k); });
      if (t_free >= 0.0f) {
        // A scatter: one HG direction for every channel (nothing diverges), depolarised (§7.7).
        const Vec3 new_dir =
            detail::hg_direction(dir, medium->hg_g, stream_uniform(seed, b, kStreamHgDirection),
                                 stream_uniform(seed, b, kStreamHgDirection2));
        Vec3 t_axis, b_axis;
        detail::orthonormal_basis(new_dir, t_axis, b_axis);
        return detail::end_bounce(ps, p, ps.live, org + dir * t_free, new_dir, t_axis, true);
      }
      absorbed = true;
    }
  }
  // 2. Miss: add the environment, commit the staged split radiance, stop.
  if (hit.plane < 0) {
    detail::path_escape(ps, p, env, dir, b, escape_bsdf_pdf);
    return false;
  }
  const FacetPlane pl = planes[hit.plane];
  Vec3 nrm{pl.nx, pl.ny, pl.nz};
  const Vec3 pos = org + dir * hit.t;
  if constexpr (kMedium) {
    nrm = surface_normal(planes, p.plane_count, static_cast<std::uint32_t>(hit.plane), pos, dir,
                         medium->edge_radius);
  }

  // 3. Frame rotation into the new plane of incidence (applied per channel in the loop below).
  Vec3 s_curr = cross(dir, nrm);
  const float s_len2 = dot(s_curr, s_curr);
  const bool rotate = s_len2 > 1e-12f;
  float c2 = 1.0f, s2 = 0.0f;
  if (rotate) {
    s_curr = s_curr * (1.0f / sqrtf(s_len2));
    const float c = dot(s_prev, s_curr);
    const float sn = dot(cross(s_prev, s_curr), dir);
    const float inv = 1.0f / (c * c + sn * sn);
    c2 = (c * c - sn * sn) * inv;  // cos 2ψ, ψ = atan2(sn, c)
    s2 = 2.0f * c * sn * inv;      // sin 2ψ
    s_prev = s_curr;
  }
  // 4. Absorption inside (Beer–Lambert; path_scale folded into α), per channel below.
  const bool absorb = inside && p.band_count && !absorbed;

  // 5. Boundary: orient the normal against the ray.
  float cos_i = -dot(dir, nrm);
  if (cos_i < 0.0f) {
    nrm = -nrm;
    cos_i = -cos_i;
  }
  cos_i = detail::minf(cos_i, 1.0f);
  // η_k = n₁/n₂: n_k inside (n_k/1 is exact, so no division), 1/n_k outside — the same bits as n₁/n₂.
  const float eta0 = inside ? n_k[0] : 1.0f / n_k[0];
  const float cos_t0 = cos_transmitted(eta0, cos_i);
  const float u_fresnel = stream_uniform(seed, b, kStreamFresnel);
  const bool hero_tir = cos_t0 < 0.0f;
  bool reflect;
  float prob = 1.0f;
  if (hero_tir) {
    reflect = true;  // 6. Hero TIR: reflect with probability 1, no division.
  } else {
    // 7. Fresnel choice on the hero.
    const float r0 = fresnel_reflectance(inside ? n_k[0] : 1.0f, inside ? 1.0f : n_k[0], cos_i, cos_t0);
    const float pr = detail::clampf(r0, kProbMin, kProbMax);
    reflect = u_fresnel < pr;
    prob = reflect ? pr : 1.0f - pr;
  }
  const float inv_prob = 1.0f / prob;
  const float glare = (b == 0 && !inside && reflect) ? p.glare : 1.0f;  // bounce-0 glare (§7.2)
  const bool frosted = any_frosted(p) && ((p.frosted_mask[hit.plane >> 5] >> (hit.plane & 31)) & 1u);
  const bool refract = !frosted && !reflect;  // 8. transmission through a polished facet (§7.4)
  const bool entering = refract && !inside;

  Vec3 t_dir0 = dir;       // the hero's refracted direction (channel 0 runs first)
  Vec3 entry_dir[K];       // entry only: each channel's refracted direction, compared pairwise below
  unsigned entry_ok = 0u;  // entry only: bit k = cos t_k ≥ 0
  // A channel known to be zero (ps.live) skips everything but its pdf factor and, at an entry, its
  // refracted direction: rotation, absorption, Mueller matrices and exit splits all map a zero Stokes vector
  // to zero (up to the sign of zero, which nothing reads), so its local-memory state is not touched.
  //
  // Nor is every pdf factor needed: §8 reads pdf[j] only for j in compat[k] of a channel k that ends with
  // radiance, which is live at the miss or was split. Live and split channels only become fewer and compat
  // rows only lose bits, so a channel outside every such row now is never read again, and its pdf is left
  // as it is. The loop runs over a worklist of the channels with work, in ascending order (channel 0 first:
  // the exit split compares with its direction): all 8 at an entry (each one's refracted direction), else
  // the live ones and, unless the hero was past its critical angle, the pdfs still needed. A lane in the
  // stone usually carries 1–3 live channels, so lanes of a warp run their own short lists in step instead of
  // 8 iterations with divergent skips.
  unsigned live = ps.live;
  unsigned todo = (1u << K) - 1u;
  if (!entering) {
    unsigned needed = 1u;  // pdf[0] is every MIS weight's numerator
    for (unsigned m = live | ps.split_bits; m != 0u; m &= m - 1u)
      needed |= static_cast<unsigned>(ps.compat >> (8 * FT_LOWEST_BIT(m))) & 0xFFu;
    todo = live | (hero_tir ? 0u : needed) | 1u;
  }
  for (; todo != 0u; todo &= todo - 1u) {
    const int k = FT_LOWEST_BIT(todo);
    float* sk = st[k];
    const bool dead = !((live >> k) & 1u);
    if (!dead) {
      if (rotate) apply_rotation(sk, c2, s2);
      if (absorb) {
        const float att = expf(-channel_alpha(p, ps.hero, k) * hit.t);
        sk[0] *= att;
        sk[1] *= att;
        sk[2] *= att;
        sk[3] *= att;
      }
    }
    const float n1 = inside ? n_k[k] : 1.0f;
    const float n2 = inside ? 1.0f : n_k[k];
    const float eta = inside ? n_k[k] : 1.0f / n_k[k];
    const float cos_t = cos_transmitted(eta, cos_i);  // < 0: channel past its critical angle
    if (!hero_tir) {
      const float rk = cos_t < 0.0f ? 1.0f : fresnel_reflectance(n1, n2, cos_i, cos_t);
      pdf[k] *= detail::clampf(reflect ? rk : 1.0f - rk, kPdfClampLo, kPdfClampHi);
    }
    // Mueller update: one copy of the code for polished and frosted facets (§7.5: a frosted facet makes the
    // same choice and the same Mueller product, then depolarises). A polished facet leaves a zero channel
    // alone; a frosted one applies the matrices to it too (zero in, zero out).
    if (!dead && (frosted || !detail::stokes_zero(sk))) {
      if (reflect) {
        if (cos_t < 0.0f) {
          apply_tir_retarder(sk, eta, cos_i, inv_prob * glare);
        } else {
          apply_reflection(sk, fresnel_amps(n1, n2, cos_i, cos_t), inv_prob * glare);
        }
      } else if (cos_t < 0.0f) {
        sk[0] = sk[1] = sk[2] = sk[3] = 0.0f;  // T_k = 0
      } else {
        apply_transmission(sk, n1, n2, cos_i, cos_t, inv_prob);
      }
      if (frosted) sk[1] = sk[2] = sk[3] = 0.0f;  // depolarised
    }
    if (refract && (!dead || entering || k == 0)) {
      // Each channel refracts at its own index (§7.4).
      const Vec3 tk = cos_t < 0.0f ? dir : normalize(dir * eta + nrm * (eta * cos_i - cos_t));
      if (k == 0) t_dir0 = tk;
      if (entering) {
        entry_dir[k] = tk;
        entry_ok |= cos_t >= 0.0f ? 1u << k : 0u;
      } else if (k > 0 && !dead && cos_t >= 0.0f && !(dot(tk, t_dir0) >= kSameDirection)) {
        // Exit splitting: channels that diverge here follow their own exit direction once. The escape ends
        // the path in a convex stone, so compat keeps the classes of the shared interior path. §7.4's
        // re-entry probe can only hit a concave cut (Tier 3, never traced here): every scene is a validated
        // convex polyhedron, and a ray leaving it through the exit facet never meets it again, so it is
        // skipped (tests pin that results are unchanged).
        const float ik = detail::maxf(sk[0], 0.0f);
        sk[0] = sk[1] = sk[2] = sk[3] = 0.0f;
        if (ik > 0.0f) {
          split[k] = env.radiance(p, env.at(p, tk), ik, ps.hero, k);
          ps.split_bits = static_cast<std::uint8_t>(ps.split_bits | (1u << k));
        }
      }
    }
    if (!dead && detail::stokes_zero(sk)) live &= ~(1u << k);
  }

  if (frosted) {
    // §7.5 frosted facet: cosine-weighted direction about the chosen side's normal; all channels share it. The
    // steps of frosted_direction, written out, with NEE only on the side that leaves towards the environment: the
    // Tier 1 megakernel is 1.4 % slower with the call (benchmarks/NOTES.md, issue 14 session 11).
    const float u1 = stream_uniform(seed, b, kStreamFrostedDir1);
    const float u2 = stream_uniform(seed, b, kStreamFrostedDir2);
    const Vec3 n_out = reflect ? nrm : -nrm;  // the normal of the side the path leaves on
    dir = detail::cosine_direction(n_out, u1, u2);
    if constexpr (Env::kNee) {
      // §6.1: NEE where the bounce leaves towards the outside (a reflection outside, a transmission from inside)
      // and its BSDF-sampled escape could still be traced (b + 1 < max_bounces).
      if (reflect != inside && env.nee_enabled() && b + 1 < p.max_bounces) {
        es.bsdf_pdf = detail::maxf(dot(dir, n_out), 0.0f) * kInvPiF;
        env_next_event(ps, p, planes, env, es, pos, n_out, live);
      }
    }
    if (!reflect) inside = !inside;
    Vec3 t_axis, b_axis;
    detail::orthonormal_basis(dir, t_axis, b_axis);
    s_prev = t_axis;
  } else if (reflect) {
    dir = dir + nrm * (2.0f * cos_i);
  } else {
    if (entering) {
      // Entry: compat ∩= current equivalence classes; diverged channels terminate (S_k = 0).
      std::uint8_t cls[K];
      FT_UNROLL for (int k = 0; k < K; ++k) cls[k] = static_cast<std::uint8_t>(1u << k);
      FT_CHANNELS for (int j = 0; j < K; ++j) {
        FT_CHANNELS for (int k = j + 1; k < K; ++k) {
          if (((entry_ok >> j) & (entry_ok >> k) & 1u) && dot(entry_dir[j], entry_dir[k]) >= kSameDirection) {
            cls[j] = static_cast<std::uint8_t>(cls[j] | (1u << k));
            cls[k] = static_cast<std::uint8_t>(cls[k] | (1u << j));
          }
        }
      }
      FT_CHANNELS for (int k = 0; k < K; ++k) {
        ps.compat &= ~(static_cast<std::uint64_t>(0xFFu & ~static_cast<unsigned>(cls[k])) << (8 * k));
        if (k > 0 && !(cls[0] & (1u << k))) {
          st[k][0] = st[k][1] = st[k][2] = st[k][3] = 0.0f;
          live &= ~(1u << k);
        }
      }
    }
    dir = t_dir0;
    inside = !inside;
  }

  return detail::end_bounce(ps, p, live, pos, dir, s_prev, inside);
}

/// path_step_env with the analytic environments (Tier 1): the function the megakernel runs.
FT_HD bool path_step(PathState& ps, const TraceParams& p, const FacetPlane* planes) {
  EnvPathState unused{};
  return path_step_env(ps, p, planes, AnalyticEnv{}, unused);
}

namespace detail {

/// §8 with `extra` (NEE's committed XYZ, docs/design/tracer.md §6.1) added before white balance when kExtra.
template <bool kExtra>
FT_HD SampleXyz finish_xyz(const PathState& ps, const TraceParams& p, const float* extra) {
  constexpr int K = kChannels;
  const auto& radiance = ps.split;
  const auto& pdf = ps.pdf;
  const std::uint64_t compat = ps.compat;
  float sx = 0.0f, sy = 0.0f, sz = 0.0f;
  FT_CHANNELS for (int k = 0; k < K; ++k) {
    if (radiance[k] == 0.0f) continue;
    float denom = 0.0f;
    FT_UNROLL for (int j = 0; j < K; ++j) {
      if ((compat >> (8 * k + j)) & 1u) denom += pdf[j];
    }
    const float w = denom > kMisEpsilon ? static_cast<float>(K) * pdf[0] / denom : 1.0f;
    const Vec3 cmf = cmf_xyz(channel_lambda(ps.hero, k));
    const float v = radiance[k] * w * kXyzScale;
    sx += cmf.x * v;
    sy += cmf.y * v;
    sz += cmf.z * v;
  }
  if constexpr (kExtra) {
    sx += extra[0];
    sy += extra[1];
    sz += extra[2];
  }
  if (p.white_balance) {
    const float* m = p.wb;
    const float wx = m[0] * sx + m[1] * sy + m[2] * sz;
    const float wy = m[3] * sx + m[4] * sy + m[5] * sz;
    const float wz = m[6] * sx + m[7] * sy + m[8] * sz;
    sx = wx;
    sy = wy;
    sz = wz;
  }
  SampleXyz out;
  // x − x is 0 for finite x and NaN for ±inf / NaN (no fast-math on tracer targets).
  if (sx - sx == 0.0f && sy - sy == 0.0f && sz - sz == 0.0f) {
    out.x = detail::maxf(sx, 0.0f);
    out.y = detail::maxf(sy, 0.0f);
    out.z = detail::maxf(sz, 0.0f);
    out.finite = 1u;
  } else {
    out.x = out.y = out.z = 0.0f;
    out.finite = 0u;
  }
  return out;
}

}  // namespace detail

/// §8: the ended path's spectrum → XYZ with the MIS weights (ps.split holds the radiance, see path_step).
FT_HD SampleXyz path_finish(const PathState& ps, const TraceParams& p) {
  return detail::finish_xyz<false>(ps, p, nullptr);
}

/// path_finish plus what NEE committed (docs/design/tracer.md §6.1).
FT_HD SampleXyz path_finish_env(const PathState& ps, const TraceParams& p, const EnvPathState& es) {
  return detail::finish_xyz<true>(ps, p, es.xyz);
}

/// Traces sample s of pixel (x, y) (docs/design/tracer.md §7) and returns its XYZ (§8). planes holds p.plane_count
/// entries (may be null when 0). Deterministic: bit-identical for the same inputs on one backend (§9 G1), and
/// the same function as path_begin → path_step until false → path_finish, in any interleaving of paths.
FT_HD SampleXyz trace_sample(const TraceParams& p, const FacetPlane* planes, std::uint32_t x, std::uint32_t y,
                             std::uint32_t s) {
  PathState ps;
  path_begin(ps, p, x, y, s);
  if (p.max_bounces > 0) {
    while (path_step(ps, p, planes)) {
    }
  }
  return path_finish(ps, p);
}

/// trace_sample under an environment policy with NEE (HdrEnv, docs/design/tracer.md §6.1; PresetEnv, §6.2): the
/// CPU tracer's entry for HDR maps and the lit lighting models. Deterministic like trace_sample.
template <class Env>
FT_HD SampleXyz trace_sample_env(const TraceParams& p, const FacetPlane* planes, const Env& env,
                                 std::uint32_t x, std::uint32_t y, std::uint32_t s) {
  PathState ps;
  EnvPathState es{{0.0f, 0.0f, 0.0f}, 0.0f};
  path_begin(ps, p, x, y, s);
  if (p.max_bounces > 0) {
    while (path_step_env(ps, p, planes, env, es)) {
    }
  }
  return path_finish_env(ps, p, es);
}

}  // namespace facetrace::tracer::physics
