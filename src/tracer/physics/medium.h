/// @file
/// Tier 2 media in the transport (docs/design/tracer.md §7.7): the uniaxial bounce step path_step_uniaxial (the
/// physics of uniaxial.h: Snell and Fresnel on the wave normal k, intersection and path length on the ray S, the
/// mode choice, relabelling at internal reflections, pleochroism) with Henyey–Greenstein inclusions, and
/// trace_sample_medium, the entry the CPU tracer and the GPU's medium kernels share for every scene whose
/// MediumParams is not a clear isotropic stone. Isotropic stones with inclusions run path_step_env<Env, true>.
#pragma once

#include <cmath>
#include <cstdint>

#include "chunk.h"
#include "host_device.h"
#include "transport.h"
#include "uniaxial.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

/// The parts of path_step_uniaxial an instantiation holds (docs/design/tracer.md §10.1).
inline constexpr std::uint32_t kPhaseAll = 0;      ///< every bounce: the CPU tracer and the GPU's last phase
inline constexpr std::uint32_t kPhaseOutside = 1;  ///< a path outside the stone
inline constexpr std::uint32_t kPhaseInside = 2;   ///< a path inside, and the miss of a path outside

/// What a uniaxial path carries beside PathState (docs/design/tracer.md §7.7), like EnvPathState for NEE: the wave
/// normal k (ps.dir is the ray S; the two are equal outside and for the o mode), the mode label inside, and per
/// channel n_e(λ_k) (PathState::n_k holds n_o(λ_k)) and the absorption coefficients α_o(λ_k)·path_scale and
/// α_e(λ_k)·path_scale, which a path's wavelengths fix at its start (each bounce inside reads them for every live
/// channel: computed once, not per bounce).
struct MediumPathState {
  Vec3 k;
  std::uint32_t mode;
  float ne_k[kChannels];
  float ao_k[kChannels];
  float ae_k[kChannels];
};

/// Channel k's extraordinary absorption α_e(λ_k)·path_scale: the e_ray bands, or α_o when there are none.
FT_HD float channel_alpha_e(const TraceParams& p, const MediumParams& m, float hero, int k) {
  if (m.e_band_count == 0) return channel_alpha(p, hero, k);
  return absorption_coefficient(m.e_bands, m.e_band_count, channel_lambda(hero, k)) * p.path_scale;
}

/// The medium's part of path_begin: k = the camera ray, n_e(λ_k) from the e curve or n_o + Δ, α_o and α_e.
FT_HD void medium_begin(MediumPathState& ms, const PathState& ps, const TraceParams& p,
                        const MediumParams& m) {
  ms.k = ps.dir;
  ms.mode = kModeOrdinary;
  FT_CHANNELS for (int k = 0; k < kChannels; ++k) {
    ms.ne_k[k] =
        m.e_dispersion ? refractive_index(m.e_disp, channel_lambda(ps.hero, k)) : ps.n_k[k] + m.delta;
    ms.ao_k[k] = channel_alpha(p, ps.hero, k);
    ms.ae_k[k] = m.e_band_count == 0 ? ms.ao_k[k] : channel_alpha_e(p, m, ps.hero, k);
  }
}

namespace detail {

/// The ray S a channel takes into the crystal in `mode` (docs/design/tracer.md §7.6), without the amplitudes: k has
/// the incident tangential component n1·d_t (Snell on k) and the mode's normal root; false when the mode is
/// evanescent. The cheap test of whether a channel follows the hero into the stone.
FT_HD bool entry_ray(Vec3 d, Vec3 n_out, Vec3 c, float n1, float n_o, float n_e, std::uint32_t mode,
                     Vec3& ray) {
  using namespace uniaxial_detail;  // the fused arithmetic of uniaxial.h
  // z: into the crystal.
  const Vec3 z = -n_out;
  const Vec3 kt = fmadd(z, -fdot(d, z), d) * n1;
  const float kt2 = fdot(kt, kt);
  const float no2 = n_o * n_o;
  if (mode == kModeOrdinary) {
    const float q2 = no2 - kt2;
    if (q2 < 0.0f) return false;
    ray = fnormalize(fmadd(z, sqrtf(q2), kt));
    return true;
  }
  const float de = fmaf(n_e, n_e, -no2);
  const float ga = fdot(c, z), ca = fdot(c, kt);
  const float a = fmaf(de * ga, ga, no2);
  const float bq = de * ca * ga;
  const float cq = fmaf(kt2, no2, fmaf(de * ca, ca, -(no2 * (n_e * n_e))));
  const float disc = fmaf(bq, bq, -(a * cq));
  if (disc < 0.0f) return false;
  const Vec3 k = fnormalize(fmadd(z, (-bq + sqrtf(disc)) / a, kt));
  ray = extraordinary_ray(k, c, n_o, n_e);
  return true;
}

/// Channel k's α·path_scale along the path's mode: α_o for o, eᵀAe along the e wave's E for e (pol, §7.6); α_o
/// without pleochroism (e_band_count 0: α_e = α_o, and eᵀAe = α_o + 0·(e·c)² is α_o exactly).
FT_HD float mode_alpha(const MediumPathState& ms, const MediumParams& m, int k, std::uint32_t mode,
                       Vec3 pol) {
  const float ao = ms.ao_k[k];
  if (mode == kModeOrdinary || m.e_band_count == 0) return ao;
  return pleochroic_absorption(pol, m.c_axis, ao, ms.ae_k[k]);
}

/// compat ∩= the equivalence classes of the channels' new directions (dirs[k], valid where bit k of ok is set);
/// channels outside the hero's class stop (S_k = 0, not live). docs/design/tracer.md §7.4 and §7.7.
FT_HD void intersect_classes(PathState& ps, const Vec3* dirs, unsigned ok, unsigned& live) {
  constexpr int K = kChannels;
  // The classes packed as compat is (byte k = the channels in k's class), so they stay in registers and
  // compat ∩= them is one AND; each channel's direction is loaded once per row.
  std::uint64_t cls = 0x8040201008040201ull;  // byte k = 1 << k
  FT_CHANNELS for (int j = 0; j < K; ++j) {
    if (!((ok >> j) & 1u)) continue;
    const Vec3 dj = dirs[j];
    FT_CHANNELS for (int k = j + 1; k < K; ++k) {
      if (((ok >> k) & 1u) && dot(dj, dirs[k]) >= kSameDirection) {
        cls |= (std::uint64_t{1} << (8 * j + k)) | (std::uint64_t{1} << (8 * k + j));
      }
    }
  }
  ps.compat &= cls;
  FT_CHANNELS for (int k = 0; k < K; ++k) {
    if (k > 0 && !((cls >> k) & 1u)) {
      ps.st[k][0] = ps.st[k][1] = ps.st[k][2] = ps.st[k][3] = 0.0f;
      live &= ~(1u << k);
    }
  }
}

/// The channels whose pdf §8 can still read (pdf[0] and the compat rows of live and split channels), plus the live
/// ones: the worklist of a uniaxial bounce.
FT_HD unsigned uniaxial_todo(const PathState& ps, unsigned live) {
  unsigned needed = 1u;
  for (unsigned mm = live | ps.split_bits; mm != 0u; mm &= mm - 1u)
    needed |= static_cast<unsigned>(ps.compat >> (8 * FT_LOWEST_BIT(mm))) & 0xFFu;
  return needed | live;
}

FT_HD float clamp_pdf(float v) { return clampf(v, kPdfClampLo, kPdfClampHi); }

/// A depolarised wave going on inside the stone along unit wave normal kn (after a frosted facet or a scatter,
/// docs/design/tracer.md §7.7): either mode with probability ½ (u; the half power over the half probability
/// leaves I_k as it is) and the mode's ray S. With `walkoff_check`, an e ray that would leave through the facet
/// of outward normal n_out (grazing walk-off) takes the o mode. Ends the bounce at pos.
FT_HD bool diffuse_into_mode(PathState& ps, MediumPathState& ms, const TraceParams& p, const MediumParams& m,
                             unsigned live, Vec3 pos, Vec3 kn, bool walkoff_check, Vec3 n_out, float u) {
  std::uint32_t mode = u < 0.5f ? kModeOrdinary : kModeExtraordinary;
  Vec3 ray = mode_ray(mode, kn, m.c_axis, ps.n_k[0], ms.ne_k[0]);
  if (walkoff_check && !(dot(ray, n_out) < 0.0f)) {
    mode = kModeOrdinary;
    ray = kn;
  }
  ms.k = kn;
  ms.mode = mode;
  Vec3 t_axis, b_axis;
  orthonormal_basis(kn, t_axis, b_axis);
  return end_bounce(ps, p, live, pos, ray, t_axis, true);
}

}  // namespace detail

/// One bounce of a path through a uniaxial stone (docs/design/tracer.md §7.7): the Tier 1 bounce of path_step_env
/// with the facet physics of uniaxial.h. Outside, channels carry full Stokes vectors as in Tier 1; inside, a path
/// is one eigenmode (its polarisation is the mode's), so S_k holds the mode's intensity (I_k, 0, 0, 0). The hero
/// chooses reflect or transmit with p = clamp(½(R_s + R_p), 0.02, 0.98) at an entry and clamp(R_o + R_e, 0.02,
/// 0.98) inside (probability 1 past the critical angle), then the mode with p_o clamped to [0.02, 0.98] (entry:
/// kStreamBirefringent on the transmitted powers; internal reflection: kStreamModeCoupling on the reflected
/// ones). Channels follow the hero's choices; a channel whose ray S leaves the hero's (1 − 1e-6) stops and
/// compat is intersected at an entry and at an internal reflection (which can change the mode, and with it a
/// channel's direction); at an exit a diverging channel is split along its own direction (§7.4). Inside,
/// non-hero channels of the hero's class use the hero's wave normal. Frosted facets make the same choice with
/// the same powers, depolarise, send every channel along one cosine-weighted direction and, going inside, pick
/// the mode 50/50 (unpolarised light splits equally). With σ_s > 0 inclusions act on each inside segment first;
/// with edge rounding the facet's normal is surface_normal's (§4.1).
///
/// The bounce is two calls, path_step_uniaxial's: uniaxial_segment (the intersection along S, the inclusions'
/// segment and a scatter, the miss) and, when that segment ends at a facet, uniaxial_facet. The GPU's inside
/// phase calls them apart so that a warp's lanes meet the facet solution together (docs/design/tracer.md §10.1).
/// uniaxial_segment returns true when the bounce goes on at the facet seg.hit (the inclusions' absorption, if
/// any, applied), false when it ended there with path_step's answer in `going`. kPhase (the GPU's phased medium
/// kernels) compiles only part of the bounce: kPhaseOutside the bounce of a path outside the stone (never called
/// inside), kPhaseInside the bounce inside and the miss of a path outside; a path outside that hits the stone
/// there returns false with *handoff set and every state as it was, for a kPhaseAll step to take it on. kPlain
/// (the GPU's kernels for a plain stone, plain_medium: no inclusions, no frosted facet, no edge rounding, which
/// the caller checked) compiles that code out, so the hot loop's code is smaller (benchmarks/NOTES.md, issue 14
/// session 16).
struct UniaxialSegment {
  Hit hit;        ///< the facet the segment ends at
  Vec3 pol;       ///< the inside e mode's polarisation in a pleochroic stone (else zero)
  bool absorbed;  ///< the inclusions applied the segment's absorption
};

template <class Env, std::uint32_t kPhase = kPhaseAll, bool kPlain = false>
FT_HD bool uniaxial_segment(PathState& ps, MediumPathState& ms, const TraceParams& p, const MediumParams& m,
                            const FacetPlane* planes, const Env& env, EnvPathState& es, UniaxialSegment& seg,
                            bool& going, bool* handoff = nullptr) {
  const std::uint32_t b = ps.b;
  const std::uint32_t seed = ps.seed;
  const Vec3 org = ps.org;
  const Vec3 dir = ps.dir;
  const bool inside = kPhase != kPhaseOutside && ps.inside;
  const unsigned live = ps.live;
  going = false;
  // 1. Intersect along S.
  Hit hit{-1, 0.0f};
  if (!misses_bound(p.bound_radius2, org, dir) &&
      !(inside && exit_from_inside(planes, p.plane_count, p.bound_radius2, org, dir, hit)))
    hit = intersect_polyhedron(planes, p.plane_count, org, dir);
  if constexpr (kPhase == kPhaseInside) {
    if (!inside && hit.plane >= 0) {  // an entry: not this phase's (nothing has changed yet)
      *handoff = true;
      return false;
    }
  }
  float escape_bsdf_pdf = 0.0f;
  if constexpr (Env::kNee) {
    escape_bsdf_pdf = es.bsdf_pdf;
    es.bsdf_pdf = 0.0f;
  }
  // The e mode's polarisation, which only a pleochroic stone's absorption reads (mode_alpha).
  const Vec3 pol = inside && ms.mode == kModeExtraordinary && m.e_band_count != 0
                       ? mode_polarisation(ms.mode, ms.k, m.c_axis, ps.n_k[0], ms.ne_k[0])
                       : Vec3{0.0f, 0.0f, 0.0f};
  bool absorbed = false;
  if (!kPlain && inside && hit.plane >= 0 && m.sigma_s > 0.0f) {
    const float t_free = detail::inclusion_segment(
        ps, m, hit.t, live, [&](int k) { return detail::mode_alpha(ms, m, k, ms.mode, pol); });
    if (t_free >= 0.0f) {
      // A scatter about S: depolarised, so the new wave normal takes either mode with probability ½.
      const Vec3 kn = detail::hg_direction(dir, m.hg_g, stream_uniform(seed, b, kStreamHgDirection),
                                           stream_uniform(seed, b, kStreamHgDirection2));
      going = detail::diffuse_into_mode(ps, ms, p, m, live, org + dir * t_free, kn, false, kn,
                                        stream_uniform(seed, b, kStreamBirefringent));
      return false;
    }
    absorbed = true;
  }
  // 2. Miss.
  if (hit.plane < 0) {
    detail::path_escape(ps, p, env, dir, b, escape_bsdf_pdf);
    return false;
  }
  seg.hit = hit;
  seg.pol = pol;
  seg.absorbed = absorbed;
  return true;
}

/// The rest of a uniaxial bounce once uniaxial_segment returned true: steps 3–8 at the facet seg.hit (with the
/// inside absorption unless the inclusions applied it). Returns path_step's answer.
template <class Env, std::uint32_t kPhase = kPhaseAll, bool kPlain = false>
FT_HD bool uniaxial_facet(PathState& ps, MediumPathState& ms, const TraceParams& p, const MediumParams& m,
                          const FacetPlane* planes, const Env& env, EnvPathState& es,
                          const UniaxialSegment& seg) {
  constexpr int K = kChannels;
  auto& st = ps.st;
  auto& pdf = ps.pdf;
  const std::uint32_t b = ps.b;
  const std::uint32_t seed = ps.seed;
  const Vec3 c = m.c_axis;
  const Vec3 org = ps.org;
  Vec3 dir = ps.dir;
  Vec3 s_prev = ps.s_prev;
  const bool inside = kPhase != kPhaseOutside && ps.inside;
  unsigned live = ps.live;
  const Hit hit = seg.hit;
  const Vec3 pol = seg.pol;
  const bool absorbed = seg.absorbed;
  const Vec3 pos = org + dir * hit.t;
  const Vec3 n_out = surface_normal(planes, p.plane_count, static_cast<std::uint32_t>(hit.plane), pos, dir,
                                    kPlain ? 0.0f : m.edge_radius);
  const bool frosted = !kPlain && ((p.frosted_mask[hit.plane >> 5] >> (hit.plane & 31)) & 1u) != 0u;
  const float u_fresnel = stream_uniform(seed, b, kStreamFresnel);
  unsigned todo = detail::uniaxial_todo(ps, live);
  // Each branch below runs one loop over the worklist with one call site of the facet solution (the hero's
  // comes from the decision; the others' for the channels still following it, most of them inside: an o wave's
  // internal reflection keeps every channel's direction), so the megakernel holds one copy of each solver.

  if (kPhase != kPhaseInside && !inside) {
    // 3. Frame rotation into the plane of incidence, as in Tier 1 (outside, S_k are full Stokes vectors).
    Vec3 s_curr = cross(dir, n_out);
    const float s_len2 = dot(s_curr, s_curr);
    if (s_len2 > 1e-12f) {
      s_curr = s_curr * (1.0f / sqrtf(s_len2));
      const float cr = dot(s_prev, s_curr);
      const float sn = dot(cross(s_prev, s_curr), dir);
      const float inv = 1.0f / (cr * cr + sn * sn);
      const float c2 = (cr * cr - sn * sn) * inv, s2 = 2.0f * cr * sn * inv;
      for (unsigned mm = live; mm != 0u; mm &= mm - 1u) apply_rotation(st[FT_LOWEST_BIT(mm)], c2, s2);
      s_prev = s_curr;
    }
    // 5–7. Entry (Lekner): the hero's solution makes the choice.
    const FacetFrame ff = facet_frame(dir, n_out, true, c, s_prev);  // every channel's (the hero's k)
    const UniaxialEntry e0 = uniaxial_entry(ff, dir, c, 1.0f, ps.n_k[0], ms.ne_k[0]);
    const float pr = detail::clampf(entry_reflectance_unpolarised(e0), kProbMin, kProbMax);
    const bool reflect = u_fresnel < pr;
    const float inv_t = 1.0f / (1.0f - pr);
    const float scale = (b == 0 ? p.glare : 1.0f) / pr;  // reflection; bounce-0 glare (§7.2)
    // 8. A polished entry: the mode (kStreamBirefringent), p_o from the hero's transmitted powers; a channel
    // whose ray in that mode leaves the hero's stops (compat ∩= the classes, §7.4).
    std::uint32_t mode = kModeOrdinary;
    float pm = 1.0f;
    Vec3 ray0{};  // the hero's ray in the chosen mode (a polished entry)
    if (!reflect && !frosted) {
      const float p_o = mode_split_probability(entry_mode_power(e0, kModeOrdinary, st[0]),
                                               entry_mode_power(e0, kModeExtraordinary, st[0]));
      mode = stream_uniform(seed, b, kStreamBirefringent) < p_o ? kModeOrdinary : kModeExtraordinary;
      pm = mode == kModeOrdinary ? p_o : 1.0f - p_o;
      Vec3 rays[K];
      ray0 = entry_wave_ray(e0, ff, mode, c, ps.n_k[0], ms.ne_k[0]);
      rays[0] = ray0;
      unsigned ok = e0.tir[mode] ? 0u : 1u;
      FT_CHANNELS for (int k = 1; k < K; ++k) {
        if ((todo >> k) & 1u)
          ok |= detail::entry_ray(dir, n_out, c, 1.0f, ps.n_k[k], ms.ne_k[k], mode, rays[k]) ? 1u << k : 0u;
      }
      detail::intersect_classes(ps, rays, ok, live);
      todo = detail::uniaxial_todo(ps, live);  // the channels still following the hero, and readable pdfs
    }
    // Channel k's update from its entry solution (the hero's is e0).
    auto entry_channel = [&](int k, const UniaxialEntry& ek) {
      const float rk = entry_reflectance_unpolarised(ek);
      const bool is_live = ((live >> k) & 1u) != 0u;
      float* sk = st[k];
      if (reflect) {
        pdf[k] *= detail::clamp_pdf(rk);
        if (!is_live) return;
        apply_jones(sk, ek.r, scale);
        if (frosted) sk[1] = sk[2] = sk[3] = 0.0f;
        return;
      }
      const float po_k = entry_mode_power(ek, kModeOrdinary, sk);
      const float pe_k = entry_mode_power(ek, kModeExtraordinary, sk);
      if (frosted) {
        pdf[k] *= detail::clamp_pdf(1.0f - rk);
        sk[0] = (po_k + pe_k) * inv_t;  // depolarised; the mode is chosen 50/50 below
      } else {
        const float pk = mode_split_probability(po_k, pe_k);
        pdf[k] *= detail::clamp_pdf(1.0f - rk) * (mode == kModeOrdinary ? pk : 1.0f - pk);
        // A dead channel's S_k is zero and unread: no division of its zero (IEEE division's slow path on the GPU).
        if (is_live) sk[0] = (mode == kModeOrdinary ? po_k : pe_k) * inv_t / pm;
      }
      sk[1] = sk[2] = sk[3] = 0.0f;
    };
    entry_channel(0, e0);  // todo always holds the hero
    for (unsigned t2 = todo & ~1u; t2 != 0u; t2 &= t2 - 1u) {
      const int k = FT_LOWEST_BIT(t2);
      entry_channel(k, uniaxial_entry(ff, dir, c, 1.0f, ps.n_k[k], ms.ne_k[k]));
    }
    if (reflect) {
      if (frosted) {
        dir = frosted_direction(ps, p, planes, env, es, pos, n_out, live, s_prev);
      } else {
        dir = entry_reflected_k(ff, dir);
        s_prev = ff.f.s;
      }
      ms.k = dir;
      return detail::end_bounce(ps, p, live, pos, dir, s_prev, false);
    }
    if (frosted) {
      // Into the stone along one cosine-weighted wave normal; the mode 50/50 (depolarised light).
      const Vec3 kn = detail::cosine_direction(-n_out, stream_uniform(seed, b, kStreamFrostedDir1),
                                               stream_uniform(seed, b, kStreamFrostedDir2));
      return detail::diffuse_into_mode(ps, ms, p, m, live, pos, kn, true, n_out,
                                       stream_uniform(seed, b, kStreamBirefringent));
    }
    ms.k = entry_wave_k(e0, ff, mode);
    ms.mode = mode;
    return detail::end_bounce(ps, p, live, pos, ray0, ff.f.s, true);
  }

  // Inside: 4. absorption along S with the mode's α (unless the inclusions already applied it).
  if (!absorbed && (p.band_count != 0u || m.e_band_count != 0u)) {
    for (unsigned mm = live; mm != 0u; mm &= mm - 1u) {
      const int k = FT_LOWEST_BIT(mm);
      st[k][0] *= expf(-detail::mode_alpha(ms, m, k, ms.mode, pol) * hit.t);
    }
  }
  // 5–7. The facet from inside: the hero's solution makes the choice.
  const FacetFrame ff = facet_frame(ms.k, n_out, false, c, s_prev);  // every channel's (the hero's k)
  const UniaxialInternal w0 = uniaxial_internal(ff, ms.k, ms.mode, c, ps.n_k[0], ms.ne_k[0], 1.0f);
  const bool hero_tir = w0.tir_out != 0u;
  const float r_o0 = internal_reflected_power(w0, kModeOrdinary);
  const float r_e0 = internal_reflected_power(w0, kModeExtraordinary);
  const float pr = hero_tir ? 1.0f : detail::clampf(r_o0 + r_e0, kProbMin, kProbMax);
  const bool reflect = hero_tir || u_fresnel < pr;
  const float inv_r = 1.0f / pr;
  const float inv_t = reflect ? 0.0f : 1.0f / (1.0f - pr);
  // A polished reflection: the reflected mode (kStreamModeCoupling), p_o from the hero's reflected powers.
  std::uint32_t mode = kModeOrdinary;
  float pm = 1.0f;
  if (reflect && !frosted) {
    const float p_o = mode_split_probability(r_o0, r_e0);
    mode = stream_uniform(seed, b, kStreamModeCoupling) < p_o ? kModeOrdinary : kModeExtraordinary;
    pm = mode == kModeOrdinary ? p_o : 1.0f - p_o;
  }
  // An o wave reflected as o leaves along the mirror direction at every wavelength (k_t and q both scale with n_o)
  // and is never evanescent: every channel keeps the hero's direction, no class can change, and the followers form
  // no direction and the class test is skipped.
  const bool mirror_all = mode == kModeOrdinary && ms.mode == kModeOrdinary;
  Vec3 dirs[K];  // per channel: the reflected ray (polished reflection) or the exit wave normal (exit)
  unsigned ok = 0u;
  // Channel k's update from its facet solution (the hero's is w0).
  auto internal_channel = [&](int k, const UniaxialInternal& wk) {
    const float rok = internal_reflected_power(wk, kModeOrdinary);
    const float rek = internal_reflected_power(wk, kModeExtraordinary);
    const bool is_live = ((live >> k) & 1u) != 0u;
    float* sk = st[k];
    if (reflect) {
      const float fresnel = hero_tir ? 1.0f : detail::clamp_pdf(wk.tir_out ? 1.0f : rok + rek);
      if (frosted) {
        pdf[k] *= fresnel;
        if (is_live) sk[0] *= (rok + rek) * inv_r;
        return;
      }
      const float pk = mode_split_probability(rok, rek);
      pdf[k] *= fresnel * (mode == kModeOrdinary ? pk : 1.0f - pk);
      if (k == 0 || !mirror_all) dirs[k] = internal_reflected_ray(wk, ff, mode, c, ps.n_k[k], ms.ne_k[k]);
      ok |= wk.tir_reflected[mode] ? 0u : 1u << k;
      if (is_live) sk[0] *= (mode == kModeOrdinary ? rok : rek) * inv_r / pm;
      return;
    }
    // 8. Out of the stone (the hero is not past its critical angle).
    const float tk = wk.tir_out ? 0.0f : internal_transmitted_power(wk);
    pdf[k] *= detail::clamp_pdf(tk);
    if (!is_live) return;
    dirs[k] = wk.tir_out ? n_out : internal_exit_k(wk, ff, ms.k, ps.n_k[k], 1.0f);
    const float ik = wk.tir_out ? 0.0f : sk[0] * inv_t;
    if (frosted) {
      sk[0] = tk * ik;
      sk[1] = sk[2] = sk[3] = 0.0f;
    } else {
      internal_transmitted_stokes(wk, ik, sk);
      if (wk.degenerate) sk[2] = sk[3] = 0.0f;  // k ∥ c: the mode's polarisation is undefined
    }
  };
  internal_channel(0, w0);  // todo always holds the hero
  for (unsigned t2 = todo & ~1u; t2 != 0u; t2 &= t2 - 1u) {
    const int k = FT_LOWEST_BIT(t2);
    internal_channel(k, uniaxial_internal(ff, ms.k, ms.mode, c, ps.n_k[k], ms.ne_k[k], 1.0f));
  }
  if (reflect) {
    if (frosted) {
      const Vec3 kn = detail::cosine_direction(-n_out, stream_uniform(seed, b, kStreamFrostedDir1),
                                               stream_uniform(seed, b, kStreamFrostedDir2));
      return detail::diffuse_into_mode(ps, ms, p, m, live, pos, kn, true, n_out,
                                       stream_uniform(seed, b, kStreamModeCoupling));
    }
    // The other mode's direction depends on the index: compat ∩= the classes of the reflected rays, among the
    // worklist's channels (ok holds only those). A channel outside it is dead, stays dead, and neither its compat
    // row nor its bit in a live or split channel's row is ever read again (uniaxial_todo), so leaving it out of
    // the classes changes nothing that is read. Skipped when mirror_all (above).
    if ((todo & ~1u) != 0u && !mirror_all) detail::intersect_classes(ps, dirs, ok, live);
    ms.k = internal_reflected_k(w0, ff, mode);
    ms.mode = mode;
    return detail::end_bounce(ps, p, live, pos, dirs[0], ff.f.s, true);
  }
  if (frosted) {
    dir = frosted_direction(ps, p, planes, env, es, pos, n_out, live, s_prev);
  } else {
    dir = internal_exit_k(w0, ff, ms.k, ps.n_k[0], 1.0f);
    s_prev = ff.f.s;
    // Exit splitting (§7.4): a channel leaving along its own direction is staged along it.
    for (unsigned mm = live & ~1u; mm != 0u; mm &= mm - 1u) {
      const int k = FT_LOWEST_BIT(mm);
      if (dot(dirs[k], dir) >= kSameDirection) continue;
      const float ik = detail::maxf(st[k][0], 0.0f);
      st[k][0] = st[k][1] = st[k][2] = st[k][3] = 0.0f;
      live &= ~(1u << k);
      if (ik > 0.0f) {
        ps.split[k] = env.radiance(p, env.at(p, dirs[k]), ik, ps.hero, k);
        ps.split_bits = static_cast<std::uint8_t>(ps.split_bits | (1u << k));
      }
    }
  }
  ms.k = dir;
  return detail::end_bounce(ps, p, live, pos, dir, s_prev, false);
}

/// One bounce of a path through a uniaxial stone (see the comment above uniaxial_segment): the segment, then the
/// facet. Returns path_step's answer; kPhaseInside's *handoff as uniaxial_segment's.
template <class Env, std::uint32_t kPhase = kPhaseAll, bool kPlain = false>
FT_HD bool path_step_uniaxial(PathState& ps, MediumPathState& ms, const TraceParams& p, const MediumParams& m,
                              const FacetPlane* planes, const Env& env, EnvPathState& es,
                              bool* handoff = nullptr) {
  UniaxialSegment seg;
  bool going = false;
  if (!uniaxial_segment<Env, kPhase, kPlain>(ps, ms, p, m, planes, env, es, seg, going, handoff))
    return going;
  return uniaxial_facet<Env, kPhase, kPlain>(ps, ms, p, m, planes, env, es, seg);
}

/// Traces sample s of pixel (x, y) through a Tier 2 medium (docs/design/tracer.md §7.7) under environment policy
/// Env: path_step_uniaxial for a uniaxial stone (kKind kMediumUniaxial), else path_step_env with inclusions.
/// Deterministic like trace_sample.
template <std::uint32_t kKind, class Env>
FT_HD SampleXyz trace_sample_medium(const TraceParams& p, const MediumParams& m, const FacetPlane* planes,
                                    const Env& env, std::uint32_t x, std::uint32_t y, std::uint32_t s) {
  PathState ps;
  EnvPathState es{{0.0f, 0.0f, 0.0f}, 0.0f};
  path_begin(ps, p, x, y, s);
  if (p.max_bounces > 0) {
    if constexpr (kKind == kMediumUniaxial) {
      MediumPathState ms;
      medium_begin(ms, ps, p, m);
      while (path_step_uniaxial(ps, ms, p, m, planes, env, es)) {
      }
    } else {
      while (path_step_env<Env, true>(ps, p, planes, env, es, &m)) {
      }
    }
  }
  return path_finish_env(ps, p, es);
}

}  // namespace facetrace::tracer::physics
