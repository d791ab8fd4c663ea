/// @file
/// Uniaxial birefringence (docs/design/tracer.md §7.6): the extraordinary index n(θ), the ray direction S (walk-off),
/// the closed-form plane-wave solution at an isotropic → uniaxial entry and at an internal facet (both reflected
/// modes, mode relabelling, the exit refraction), per-mode TIR, the p_o energy split with the scalar fallback of
/// tracer.md §7.5, and pleochroic absorption α = eᵀAe.
///
/// Conventions (docs/design/tracer.md §7.6): every direction is unit length; N is the facet normal pointing out of
/// the stone; c is the unit optic axis in the stone's frame; wave vectors are in units of k₀ = ω/c, so |k| is the
/// phase index of the wave. The Stokes frame of a wave with wave normal k̂ is (ŝ, p̂ = k̂ × ŝ), with ŝ = k̂ × N
/// normalised (the s axis of transport.h's frame rotation), Q = s − p, U = 2 Re(a_s a_p*), V = −2 Im(a_s a_p*) — the
/// sign of V that makes fresnel.h's TIR retarder the limit of these formulas.
///
/// Derivation (after Lekner, J. Phys.: Condens. Matter 3 (1991) 6121–6133, "Reflection and refraction by uniaxial
/// crystals"; Yeh, J. Opt. Soc. Am. 69 (1979) 742): ε = n_o² I + (n_e² − n_o²) c cᵀ, and Maxwell's equations for a
/// plane wave give k × (k × E) + εE = 0. The ordinary mode has E ∥ k × c and k·k = n_o². Trying E = a c + b k gives
/// the extraordinary mode E ∥ n_o² c − (k·c) k with k·k + (n_e² − n_o²)(k·c)²/n_o² = n_e², which is
/// 1/n(θ)² = cos²θ/n_o² + sin²θ/n_e² for real k. With k = k_t t̂ + q ẑ at an interface (ẑ the normal pointing into
/// the medium the incident wave travels to, t̂ the tangential direction of the incident wave normal, k_t conserved),
/// the extraordinary normal component solves A q² + 2B q + C = 0 with A = n_o² + Δε γ², B = Δε k_t α γ,
/// C = k_t²(n_o² + Δε α²) − n_o² n_e², Δε = n_e² − n_o², α = c·t̂, γ = c·ẑ. The root with +√(B² − AC) carries
/// energy along +ẑ (∂F/∂q = 2(Aq + B)); a negative discriminant is an evanescent (TIR) mode with Im q > 0 on the
/// far side. The four unknown amplitudes follow from continuity of the tangential E and H (H = k × E): the
/// isotropic side's two are eliminated in closed form, which leaves a 2 × 2 complex system for the crystal's
/// two (Residual, solve2); the powers follow from the normal Poynting flux Re(E × H*)·ẑ. The behaviour follows
/// the reference renderer (suitable-name/indicatrix,
/// crates/indicatrix/src/optics/raytracer/uniaxial_fresnel/{frame,entry,internal}.rs and
/// raytracer/refraction/uniaxial_entry.rs: the same boundary system and the Poynting-weighted p_o), written anew.
#pragma once

#include <cmath>
#include <cstdint>

#include "fresnel.h"
#include "host_device.h"
#include "vec3.h"

namespace facetrace::tracer::physics {

inline constexpr float kUniaxialDegenerate =
    1e-6f;  // tracer.md §7.5: |k × c|² ≤ 1e-6 → scalar Fresnel at n_o
inline constexpr float kModeSplitMin = 0.02f;      // tracer.md §7.5: p_o clamped to [0.02, 0.98]
inline constexpr float kModeSplitMax = 0.98f;      // tracer.md §7.5
inline constexpr std::uint32_t kModeOrdinary = 0;  // docs/design/tracer.md §7.6: mode label o (E ⊥ c)
inline constexpr std::uint32_t kModeExtraordinary =
    1;  // docs/design/tracer.md §7.6: mode label e (E in (k, c))

/// A complex amplitude (real and imaginary parts).
struct Complexf {
  float re, im;
};
static_assert(sizeof(Complexf) == 8, "Complexf layout");

namespace uniaxial_detail {

FT_HD Complexf cx(float re, float im = 0.0f) { return Complexf{re, im}; }
FT_HD Complexf operator+(Complexf a, Complexf b) { return Complexf{a.re + b.re, a.im + b.im}; }
FT_HD Complexf operator-(Complexf a, Complexf b) { return Complexf{a.re - b.re, a.im - b.im}; }
// The arithmetic below writes its fused multiply-adds as fmaf (tracer.md conventions: nothing is contracted
// implicitly, so the CPU and the GPU round alike); a product and a sum of products take one fmaf per term.
FT_HD Complexf operator*(Complexf a, Complexf b) {
  return Complexf{fmaf(a.re, b.re, -(a.im * b.im)), fmaf(a.re, b.im, a.im * b.re)};
}
FT_HD Complexf operator*(Complexf a, float s) { return Complexf{a.re * s, a.im * s}; }
/// a·b + c.
FT_HD Complexf cfma(Complexf a, Complexf b, Complexf c) {
  return Complexf{fmaf(a.re, b.re, fmaf(-a.im, b.im, c.re)), fmaf(a.re, b.im, fmaf(a.im, b.re, c.im))};
}
FT_HD Complexf neg(Complexf a) { return Complexf{-a.re, -a.im}; }
/// a·b − c·d.
FT_HD Complexf cfms(Complexf a, Complexf b, Complexf c, Complexf d) { return cfma(a, b, neg(c * d)); }
FT_HD Complexf conj(Complexf a) { return Complexf{a.re, -a.im}; }
FT_HD float abs2(Complexf a) { return fmaf(a.re, a.re, a.im * a.im); }
FT_HD Complexf cdiv(Complexf a, Complexf b) {
  const float inv = 1.0f / abs2(b);
  return Complexf{fmaf(a.re, b.re, a.im * b.im) * inv, fmaf(a.im, b.re, -(a.re * b.im)) * inv};
}

/// Vector forms with the same fused arithmetic (vec3.h's contract nothing; the Tier 1 transport keeps them).
FT_HD float fdot(Vec3 a, Vec3 b) { return fmaf(a.x, b.x, fmaf(a.y, b.y, a.z * b.z)); }
FT_HD Vec3 fcross(Vec3 a, Vec3 b) {
  return Vec3{fmaf(a.y, b.z, -(a.z * b.y)), fmaf(a.z, b.x, -(a.x * b.z)), fmaf(a.x, b.y, -(a.y * b.x))};
}
/// a·s + b.
FT_HD Vec3 fmadd(Vec3 a, float s, Vec3 b) {
  return Vec3{fmaf(a.x, s, b.x), fmaf(a.y, s, b.y), fmaf(a.z, s, b.z)};
}
FT_HD Vec3 fnormalize(Vec3 a) { return a * (1.0f / sqrtf(fdot(a, a))); }

/// The extraordinary quadratic A q² + 2B q + C = 0 in the interface frame (docs/design/tracer.md §7.6).
struct EQuad {
  float a, b, c;
};
/// The optic axis in the interface frame: (c·t̂, c·ŝ, c·ẑ).
struct AxisInFrame {
  float t, s, z;
};

FT_HD EQuad extraordinary_quadratic(float n_o, float n_e, float kt, AxisInFrame c) {
  const float no2 = n_o * n_o;
  const float de = fmaf(n_e, n_e, -no2);
  const float al = c.t, ga = c.z;
  return EQuad{fmaf(de * ga, ga, no2), de * kt * al * ga,
               fmaf(kt * kt, fmaf(de * al, al, no2), -(no2 * (n_e * n_e)))};
}

/// Normal component of a wave of index n along +ẑ (sign +1) or −ẑ (sign −1); evanescent past k_t = n, decaying
/// away from the interface on its own side.
FT_HD Complexf iso_q(float n, float kt, float sign, bool& propagating) {
  const float d = (n - kt) * (n + kt);  // n² − k_t² without the cancellation near grazing
  propagating = d >= 0.0f;
  const float root = sign * sqrtf(fabsf(d));  // one square root for both cases (one copy of its code)
  return propagating ? cx(root) : cx(0.0f, root);
}

/// Extraordinary normal component (A q² + 2B q + C = 0, docs/design/tracer.md §7.6): the root carrying energy
/// along sign·ẑ; evanescent (decaying away on its own side) when B² − AC < 0. slope = |Aq + B| = √(B² − AC).
FT_HD Complexf extraordinary_q(const EQuad& e, float sign, bool& propagating, float& slope) {
  const float disc = fmaf(e.b, e.b, -(e.a * e.c));
  propagating = disc >= 0.0f;
  const float inv = 1.0f / e.a;
  const float root = sqrtf(fabsf(disc));
  slope = propagating ? root : 0.0f;
  return propagating ? cx((-e.b + sign * root) * inv) : cx(-e.b * inv, sign * root * inv);
}

/// A crystal wave at the interface, in the interface frame's coordinates (docs/design/tracer.md §7.6): its electric
/// field E = e_t t̂ + e_s ŝ + e_z ẑ as formed, not normalised (complex for an evanescent wave), its normal
/// component q and the normal Poynting flux of that field (0 for an evanescent wave) as a fraction flux / flux_den:
/// the solution's amplitudes are relative to these fields, so a power fraction is |x|² times the ratio of two waves'
/// fluxes, formed with one division per solution for all its ratios (no normalisation, no square root, no division
/// per field). The flux is given in closed form: a direct Re(E × H*)·ẑ loses its relative precision near grazing,
/// where it is small. H = k × E is never formed: its tangential components follow from E and q (field_h_t,
/// field_h_s).
struct Field {
  Complexf et, es, ez, q;
  float flux;      ///< the normal flux's numerator (> 0 exactly when the wave propagates)
  float flux_den;  ///< its denominator (> 0; 1 but for e waves)
};

/// The interface frame's handedness: t̂ × ŝ = h ẑ with h = +1 at an entry (ẑ into the crystal) and −1 inside
/// (ẑ out of it), from make_frame. Cross products in frame coordinates carry the factor h.
inline constexpr float kHandEntry = 1.0f;
inline constexpr float kHandInternal = -1.0f;

/// |E|² of a field.
FT_HD float field_norm2(const Field& f) {
  return fmaf(f.et.re, f.et.re,
              fmaf(f.et.im, f.et.im, fmaf(f.es.re, f.es.re, fmaf(f.es.im, f.es.im, abs2(f.ez)))));
}

/// The ordinary wave with normal component q: E ∥ k × c with k = k_t t̂ + q ẑ; E ⊥ k, so the flux is |Re q|·|E|².
FT_HD Field ordinary_field(float kt, Complexf q, AxisInFrame c, float hand, bool propagating) {
  const Complexf et = q * (-hand * c.s);
  const Complexf es{fmaf(q.re, hand * c.t, -(hand * kt * c.z)), q.im * (hand * c.t)};
  Field f{et, es, cx(hand * kt * c.s), q, 0.0f, 1.0f};
  f.flux = propagating ? fabsf(q.re) * field_norm2(f) : 0.0f;
  return f;
}

/// The extraordinary wave with normal component q: E ∥ n_o² c − (k·c) k. For the unit field Ê its Poynting vector
/// P = k − Ê(Ê·k) is parallel to εk, whose normal component is Aq + B = slope (±√(B² − AC) for a root of the
/// quadratic), so the unit field's flux is |P|·slope/|εk| without cancellation; for E = |E|Ê that is
/// |k|E|² − E(E·k)|·slope/|εk|, formed as |P·εk|·slope over |εk|² (P ∥ εk: no square root).
FT_HD Field extraordinary_field(float kt, Complexf q, AxisInFrame c, float n_o, float n_e, float slope,
                                bool propagating) {
  const float no2 = n_o * n_o;
  const Complexf kc{fmaf(q.re, c.z, kt * c.t), q.im * c.z};
  const Complexf et{fmaf(-kc.re, kt, no2 * c.t), -(kc.im * kt)};
  const Complexf ez{fmaf(-kc.re, q.re, fmaf(kc.im, q.im, no2 * c.z)), -fmaf(kc.re, q.im, kc.im * q.re)};
  Field f{et, cx(no2 * c.s), ez, q, 0.0f, 1.0f};
  if (propagating) {
    const Vec3 kr{kt, 0.0f, q.re}, er{f.et.re, f.es.re, f.ez.re};
    const Vec3 cv{c.t, c.s, c.z};
    const Vec3 p = fmadd(er, -fdot(er, kr), kr * fdot(er, er));
    const Vec3 ek = fmadd(cv, fmaf(n_e, n_e, -no2) * fdot(kr, cv), kr * no2);
    f.flux = fabsf(slope * fdot(p, ek));  // |k|E|² − E(E·k)|·slope/|εk| = flux / flux_den
    f.flux_den = fdot(ek, ek);
  }
  return f;
}

/// Tangential components of H = k × E: H·t̂ = −h q (E·ŝ) and H·ŝ = h (q (E·t̂) − k_t (E·ẑ)).
FT_HD Complexf field_h_t(const Field& f, float hand) { return f.q * f.es * (-hand); }
FT_HD Complexf field_h_s(const Field& f, float kt, float hand) {
  return cfma(f.q, f.et, cx(-(f.ez.re * kt), -(f.ez.im * kt))) * hand;
}

/// The two boundary conditions left once the isotropic side's s and p amplitudes are eliminated
/// (docs/design/tracer.md §7.6). That side's waves, of index n and normal component q_i, have tangential
/// components (E·t̂, E·ŝ, H·t̂, H·ŝ) = (0, 1, q̃, 0) for s (E = ŝ) and (q̃/n, 0, 0, −n) for p (E = k × ŝ/n), with
/// q̃ = −h q_i, so a sum of crystal waves V is matched by them exactly when a(V) = H_t − q̃ E_s = 0 and
/// b(V) = n² E_t + q̃ H_s = 0; the s amplitude is then E_s and the p amplitude −H_s/n.
struct Residual {
  Complexf a, b;
};
FT_HD Residual iso_residual(const Field& f, float kt, float hand, Complexf qi, float n) {
  const Complexf qt = qi * (-hand);
  return Residual{cfma(neg(qt), f.es, field_h_t(f, hand)), cfma(qt, field_h_s(f, kt, hand), f.et * (n * n))};
}

/// x_r,0·u + x_r,1·v = w_r for R right-hand sides at once (Cramer's rule on complex 2-vectors); false when the
/// system is singular to f32 precision (a degenerate mode field) or not finite.
template <int R>
FT_HD bool solve2(Residual u, Residual v, const Residual* w, Complexf (*x)[2]) {
  const Complexf det = cfms(u.a, v.b, v.a, u.b);
  const float scale = (abs2(u.a) + abs2(v.a)) * (abs2(u.b) + abs2(v.b));
  if (!(abs2(det) > 1e-12f * scale)) return false;
  const Complexf inv = cdiv(cx(1.0f), det);
  FT_UNROLL for (int r = 0; r < R; ++r) {
    x[r][0] = cfms(w[r].a, v.b, v.a, w[r].b) * inv;
    x[r][1] = cfms(u.a, w[r].b, w[r].a, u.b) * inv;
  }
  return true;
}

/// An orthonormal interface frame: ẑ (into the far medium), t̂ (tangential part of k̂) and ŝ = k̂ × N normalised.
/// At normal incidence ŝ comes from s_hint (the path's current s axis), else any vector ⊥ ẑ.
struct Frame {
  Vec3 t, s, z;
};

FT_HD Frame make_frame(Vec3 k, Vec3 n_out, bool entering, Vec3 s_hint) {
  Frame f;
  f.z = entering ? -n_out : n_out;
  Vec3 s = fcross(k, n_out);
  float l2 = fdot(s, s);
  if (!(l2 > 1e-12f)) {
    s = fmadd(f.z, -fdot(s_hint, f.z), s_hint);
    l2 = fdot(s, s);
    if (!(l2 > 1e-12f)) {
      // Any vector ⊥ ẑ (branchless ONB, Duff et al. 2017).
      const float sign = f.z.z >= 0.0f ? 1.0f : -1.0f;
      const float a = -1.0f / (sign + f.z.z);
      s = Vec3{1.0f + sign * f.z.x * f.z.x * a, sign * f.z.x * f.z.y * a, -sign * f.z.x};
      l2 = fdot(s, s);
    }
  }
  f.s = s * (1.0f / sqrtf(l2));
  f.t = entering ? fcross(f.s, f.z) : fcross(f.z, f.s);
  return f;
}

FT_HD float clamp01(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

/// tracer.md §7.5's test |k̂ × c|² ≤ 1e-6 for the wave vector k = k_t t̂ + q ẑ as formed (|k| the wave's index), in
/// frame coordinates: |k × c|² ≤ 1e-6·|k|², without normalising k.
FT_HD bool frame_wave_degenerate(float kt, float q, AxisInFrame c) {
  const float x = q * c.s, y = fmaf(q, c.t, -(kt * c.z)), z = kt * c.s;
  return fmaf(x, x, fmaf(y, y, z * z)) <= kUniaxialDegenerate * fmaf(kt, kt, q * q);
}

}  // namespace uniaxial_detail

/// Phase index of the extraordinary wave whose normal makes angle θ with the optic axis:
/// 1/n(θ)² = cos²θ/n_o² + sin²θ/n_e² (docs/design/tracer.md §7.6).
FT_HD float extraordinary_index(float cos_theta, float n_o, float n_e) {
  const float c2 = cos_theta * cos_theta;
  const float s2 = 1.0f - c2 > 0.0f ? 1.0f - c2 : 0.0f;
  return n_o * n_e / sqrtf(fmaf(n_e * n_e, c2, n_o * n_o * s2));
}

/// Phase index of a mode for unit wave normal k and unit optic axis c.
FT_HD float mode_index(std::uint32_t mode, Vec3 k, Vec3 c, float n_o, float n_e) {
  return mode == kModeOrdinary ? n_o : extraordinary_index(uniaxial_detail::fdot(k, c), n_o, n_e);
}

/// Ray (energy) direction S of the extraordinary wave with unit normal k: S ∥ ∇ₖ(k·εk) ∥ εk =
/// n_o² k + (n_e² − n_o²)(k·c) c, normalised (docs/design/tracer.md §7.6). S ⊥ E and tan θ_S = (n_o²/n_e²) tan θ.
FT_HD Vec3 extraordinary_ray(Vec3 k, Vec3 c, float n_o, float n_e) {
  using namespace uniaxial_detail;
  return fnormalize(fmadd(c, fmaf(n_e, n_e, -(n_o * n_o)) * fdot(k, c), k * (n_o * n_o)));
}

/// Ray direction of a mode: k for o, the walk-off direction for e.
FT_HD Vec3 mode_ray(std::uint32_t mode, Vec3 k, Vec3 c, float n_o, float n_e) {
  return mode == kModeOrdinary ? k : extraordinary_ray(k, c, n_o, n_e);
}

/// Unit electric-field (polarisation) direction of a propagating mode with unit normal k: o ∥ k × c (⊥ the (k, c)
/// plane, D ∥ E); e ∥ n_o² c − n(θ)²(k̂·c) k̂ (in the (k, c) plane, ⊥ S; its D = εE is ⊥ k). Zero when k ∥ c.
FT_HD Vec3 mode_polarisation(std::uint32_t mode, Vec3 k, Vec3 c, float n_o, float n_e) {
  using namespace uniaxial_detail;
  Vec3 e;
  if (mode == kModeOrdinary) {
    e = fcross(k, c);
  } else {
    const float kc = fdot(k, c);
    const float n = extraordinary_index(kc, n_o, n_e);
    e = fmadd(k, -(n * n * kc), c * (n_o * n_o));
  }
  const float l2 = fdot(e, e);
  return l2 > 0.0f ? e * (1.0f / sqrtf(l2)) : Vec3{0.0f, 0.0f, 0.0f};
}

/// True when the scalar fallback of tracer.md §7.5 applies to unit wave normal k: |k × c|² ≤ 1e-6.
FT_HD bool uniaxial_degenerate(Vec3 k, Vec3 c) {
  const Vec3 x = uniaxial_detail::fcross(k, c);
  return uniaxial_detail::fdot(x, x) <= kUniaxialDegenerate;
}

/// Pleochroic absorption along unit polarisation e: α = eᵀAe with A = α_o (I − ccᵀ) + α_e ccᵀ, i.e.
/// α_o + (α_e − α_o)(e·c)² (docs/design/tracer.md §7.6).
FT_HD float pleochroic_absorption(Vec3 e, Vec3 c, float alpha_o, float alpha_e) {
  const float ec = uniaxial_detail::fdot(e, c);
  return fmaf(alpha_e - alpha_o, ec * ec, alpha_o);
}

/// A facet's interface frame and the optic axis in it (docs/design/tracer.md §7.6): the same for every channel
/// of a bounce (they share the hero's wave normal), so the transport makes it once and passes it to each
/// channel's solution.
struct FacetFrame {
  uniaxial_detail::Frame f;
  uniaxial_detail::AxisInFrame c;
};

/// The frame of incident unit wave normal k at the facet of outward normal n_out: ẑ into the far medium
/// (`entering`: into the crystal), s_hint as in make_frame; c the unit optic axis.
FT_HD FacetFrame facet_frame(Vec3 k, Vec3 n_out, bool entering, Vec3 c, Vec3 s_hint) {
  using namespace uniaxial_detail;
  const Frame f = make_frame(k, n_out, entering, s_hint);
  return FacetFrame{f, AxisInFrame{fdot(c, f.t), fdot(c, f.s), fdot(c, f.z)}};
}

/// The unit wave normal k_t t̂ + q ẑ (normalised) in the frame ff: a solution's waves from its k_t and normal
/// components, formed only where a path takes them.
FT_HD Vec3 frame_wave_k(const FacetFrame& ff, float kt, float q) {
  using namespace uniaxial_detail;
  return fnormalize(fmadd(ff.f.t, kt, ff.f.z * q));
}

/// Entry from an isotropic medium (index n1) into the crystal (docs/design/tracer.md §7.6). Jones matrices are
/// indexed [out·2 + in] with in, out ∈ {s, p} for reflection and out ∈ {o, e} for transmission; the reflected
/// wave's frame is (ŝ, k̂_r × ŝ). The reflection entries are power amplitudes (|·|² a power fraction of the
/// incident s or p wave). A transmitted row is kept as solved, relative to its mode's field as formed, with that
/// row's power scale (the mode's flux over the incident's): |t|²·t_scale is the power fraction, and the power
/// amplitude t·√t_scale is never needed by the transport (entry_transmission_amplitude forms it for tests). The
/// modes' wave normals and rays are formed where taken (entry_wave_k, entry_wave_ray) from k_t and the normal
/// components kept here; the plane of incidence's ŝ is the frame's (ff.f.s) and the mirror wave normal
/// entry_reflected_k's. The structure is returned through local memory on the GPU: it holds nothing the caller has.
struct UniaxialEntry {
  float kt;             ///< k_t, the conserved tangential component
  float q[2];           ///< the transmitted modes' normal components [o, e] (real parts)
  Complexf r[4];        ///< reflection Jones [ss, sp, ps, pp] (power amplitudes)
  Complexf t[4];        ///< transmission Jones [os, op, es, ep], each row relative to its mode's field
  float t_scale[2];     ///< power scale of the rows [o, e] (0 for an evanescent mode)
  std::uint8_t tir[2];  ///< 1 when the mode is evanescent (no real root): it carries no power
  std::uint8_t
      degenerate;  ///< 1: scalar Fresnel at n_o (tracer.md §7.5); r/t then hold that solution with o ≡ s, e ≡ p
  float cos_i;  ///< |k̂·N| of the incident wave
};

/// Entry: unit incident wave normal k (k·N < 0) in the frame ff = facet_frame(k, N, true, c, s_hint) of the facet
/// (N out of the stone, c the unit optic axis, s_hint the path's current s axis), indices n1 (outside), n_o, n_e.
FT_HD_OUTLINE UniaxialEntry uniaxial_entry(FacetFrame ff, Vec3 k, Vec3 c, float n1, float n_o, float n_e) {
  using namespace uniaxial_detail;
  UniaxialEntry out{};
  const Frame& f = ff.f;
  const float kz = fdot(k, f.z);
  out.cos_i = fabsf(kz);
  const float kt = n1 * fdot(k, f.t);
  bool prop_o, prop_e;
  const Complexf qo = iso_q(n_o, kt, 1.0f, prop_o);
  const EQuad eq = extraordinary_quadratic(n_o, n_e, kt, ff.c);
  float slope_e;
  const Complexf qe = extraordinary_q(eq, 1.0f, prop_e, slope_e);
  out.tir[0] = prop_o ? 0 : 1;
  out.tir[1] = prop_e ? 0 : 1;
  out.kt = kt;
  out.q[0] = qo.re;
  out.q[1] = qe.re;

  const float q1 = n1 * out.cos_i;
  const AxisInFrame cf = ff.c;
  const Field wo = ordinary_field(kt, qo, cf, kHandEntry, prop_o);
  const Field we = extraordinary_field(kt, qe, cf, n_o, n_e, slope_e, prop_e);
  // The reflected s and p waves (normal component −q1) are eliminated: the incident s wave, (0, 1, −q1, 0), and
  // p wave, (−q1/n1, 0, 0, −n1), leave the residuals (−2q1, 0) and (0, −2n1q1) for the transmitted o and e waves.
  const Residual ro = iso_residual(wo, kt, kHandEntry, cx(-q1), n1);
  const Residual re = iso_residual(we, kt, kHandEntry, cx(-q1), n1);
  const Residual rhs[2] = {{cx(-2.0f * q1), cx(0.0f)}, {cx(0.0f), cx(-2.0f * n1 * q1)}};
  Complexf xt[2][2];  // [incident s, p][o, e]
  bool ok = !uniaxial_degenerate(k, c) && !frame_wave_degenerate(kt, qo.re, cf) && !(q1 <= 0.0f);
  ok = ok && solve2<2>(ro, re, rhs, xt);
  if (ok) {
    // The reflected amplitudes from the transmitted field W: s = (W − incident)·ŝ, p = −(W − incident)_H·ŝ/n1.
    // Reflected and incident waves share the flux q1, so their amplitudes are power amplitudes as they are.
    const Complexf hs_o = field_h_s(wo, kt, kHandEntry), hs_e = field_h_s(we, kt, kHandEntry);
    // One division for 1/n1 and the modes' power scales (their fluxes over q1; the o wave's flux_den is 1).
    const float inv = 1.0f / (q1 * we.flux_den * n1);
    const float inv_n1 = q1 * we.flux_den * inv;
    out.t_scale[0] = wo.flux * we.flux_den * n1 * inv;
    out.t_scale[1] = we.flux * n1 * inv;
    FT_UNROLL for (int i = 0; i < 2; ++i) {
      const Complexf ws = cfma(xt[i][0], wo.es, xt[i][1] * we.es);
      const Complexf wh = cfma(xt[i][0], hs_o, xt[i][1] * hs_e);
      out.r[i] = i == 0 ? ws - cx(1.0f) : ws;                  // ss, sp
      out.r[2 + i] = (i == 0 ? wh : wh + cx(n1)) * (-inv_n1);  // ps, pp
      out.t[i] = xt[i][0];                                     // os, op
      out.t[2 + i] = xt[i][1];                                 // es, ep
    }
    return out;
  }
  // Scalar Fresnel at n_o (tracer.md §7.5): both modes along the o wave normal, o ≡ s and e ≡ p.
  out.degenerate = 1;
  out.q[1] = out.q[0];
  out.tir[1] = out.tir[0];
  const float cos_t = cos_transmitted(n1 / n_o, out.cos_i);
  if (cos_t < 0.0f) {
    out.r[0] = cx(1.0f);
    out.r[3] = cx(1.0f);
    return out;
  }
  const FresnelAmps a = fresnel_amps(n1, n_o, out.cos_i, cos_t);
  out.r[0] = cx(a.rs);
  out.r[3] = cx(a.rp);
  const float ts2 = 1.0f - a.rs * a.rs, tp2 = 1.0f - a.rp * a.rp;
  out.t[0] = cx(1.0f);
  out.t[3] = cx(1.0f);
  out.t_scale[0] = ts2 > 0.0f ? ts2 : 0.0f;
  out.t_scale[1] = tp2 > 0.0f ? tp2 : 0.0f;
  return out;
}

/// Entry of unit wave normal k through the facet of outward normal n_out (its frame made here).
FT_HD UniaxialEntry uniaxial_entry(Vec3 k, Vec3 n_out, Vec3 c, float n1, float n_o, float n_e, Vec3 s_hint) {
  return uniaxial_entry(facet_frame(k, n_out, true, c, s_hint), k, c, n1, n_o, n_e);
}

/// The mirror wave normal (outside) of unit incident wave normal k at the facet of frame ff.
FT_HD Vec3 entry_reflected_k(const FacetFrame& ff, Vec3 k) {
  using namespace uniaxial_detail;
  return fmadd(ff.f.z, -2.0f * fdot(k, ff.f.z), k);
}

/// The transmitted unit wave normal of `mode` (valid when the mode propagates) of the entry solution e in its frame
/// ff (both modes along the o normal when degenerate).
FT_HD Vec3 entry_wave_k(const UniaxialEntry& e, const FacetFrame& ff, std::uint32_t mode) {
  return frame_wave_k(ff, e.kt, e.q[mode]);
}

/// The transmitted ray direction S of `mode` (S = k for o and when degenerate), c, n_o, n_e as given to
/// uniaxial_entry.
FT_HD Vec3 entry_wave_ray(const UniaxialEntry& e, const FacetFrame& ff, std::uint32_t mode, Vec3 c, float n_o,
                          float n_e) {
  const Vec3 k = entry_wave_k(e, ff, mode);
  return mode == kModeOrdinary || e.degenerate ? k : extraordinary_ray(k, c, n_o, n_e);
}

/// Both transmitted modes' directions at once (tests and tools; the transport forms only the one it takes).
struct EntryGeometry {
  Vec3 k[2];    ///< transmitted unit wave normals [o, e] (valid where the mode propagates)
  Vec3 ray[2];  ///< transmitted ray directions S [o, e]
};
FT_HD EntryGeometry entry_geometry(const UniaxialEntry& e, const FacetFrame& ff, Vec3 c, float n_o, float n_e) {
  EntryGeometry g;
  for (std::uint32_t m = 0; m < 2; ++m) {
    g.k[m] = entry_wave_k(e, ff, m);
    g.ray[m] = entry_wave_ray(e, ff, m, c, n_o, n_e);
  }
  return g;
}

/// Transmission Jones entry j (os, op, es, ep) as a power amplitude (|·|² a power fraction): tests and tools.
FT_HD Complexf entry_transmission_amplitude(const UniaxialEntry& e, int j) {
  using namespace uniaxial_detail;
  return e.t[j] * sqrtf(e.t_scale[j >> 1]);
}

/// Power carried out by Jones row (j_s, j_p) for an incident Stokes vector s (I, Q, U, V) in the (ŝ, p̂) frame:
/// |j_s|²(I + Q)/2 + |j_p|²(I − Q)/2 + Re(j_s j_p*) U + Im(j_s j_p*) V.
FT_HD float jones_row_power(Complexf js, Complexf jp, const float* s) {
  using namespace uniaxial_detail;
  const Complexf x = js * conj(jp);
  return fmaf(abs2(js) * 0.5f, s[0] + s[1],
              fmaf(abs2(jp) * 0.5f, s[0] - s[1], fmaf(x.re, s[2], x.im * s[3])));
}

/// Power transmitted into a mode (kModeOrdinary / kModeExtraordinary) for incident Stokes s.
FT_HD float entry_mode_power(const UniaxialEntry& e, std::uint32_t mode, const float* s) {
  return jones_row_power(e.t[2 * mode], e.t[2 * mode + 1], s) * e.t_scale[mode];
}

/// Total reflected power for incident Stokes s.
FT_HD float entry_reflected_power(const UniaxialEntry& e, const float* s) {
  return jones_row_power(e.r[0], e.r[1], s) + jones_row_power(e.r[2], e.r[3], s);
}

/// Unpolarised reflectance ½(R_s + R_p) (the §7.2 step 7 reflect/transmit probability before its clamp).
FT_HD float entry_reflectance_unpolarised(const UniaxialEntry& e) {
  using namespace uniaxial_detail;
  return 0.5f * (abs2(e.r[0]) + abs2(e.r[1]) + abs2(e.r[2]) + abs2(e.r[3]));
}

/// The mode choice of tracer.md §7.5: p_o = P_o/(P_o + P_e) clamped to [0.02, 0.98] (0.5 when neither carries power).
FT_HD float mode_split_probability(float power_o, float power_e) {
  const float sum = power_o + power_e;
  return uniaxial_detail::clamp01(sum > 0.0f ? power_o / sum : 0.5f, kModeSplitMin, kModeSplitMax);
}

/// S ← J·S·scale for a 2×2 Jones matrix j = [ss, sp, ps, pp] (out·2 + in) in the (ŝ, p̂) frames: the coherency
/// matrix C = [[(I+Q)/2, (U − iV)/2], [(U + iV)/2, (I−Q)/2]] becomes J C J†.
FT_HD void apply_jones(float* s, const Complexf* j, float scale) {
  using namespace uniaxial_detail;
  const Complexf css = cx(0.5f * (s[0] + s[1])), cpp = cx(0.5f * (s[0] - s[1]));
  const Complexf csp = cx(0.5f * s[2], -0.5f * s[3]), cps = conj(csp);
  // M = J C, then C' = M J†.
  const Complexf m00 = cfma(j[0], css, j[1] * cps), m01 = cfma(j[0], csp, j[1] * cpp);
  const Complexf m10 = cfma(j[2], css, j[3] * cps), m11 = cfma(j[2], csp, j[3] * cpp);
  const Complexf o00 = cfma(m00, conj(j[0]), m01 * conj(j[1]));
  const Complexf o01 = cfma(m00, conj(j[2]), m01 * conj(j[3]));
  const Complexf o11 = cfma(m10, conj(j[2]), m11 * conj(j[3]));
  s[0] = (o00.re + o11.re) * scale;
  s[1] = (o00.re - o11.re) * scale;
  s[2] = 2.0f * o01.re * scale;
  s[3] = -2.0f * o01.im * scale;
}

/// A facet met from inside (docs/design/tracer.md §7.6): the incident mode's reflection into both crystal modes (the
/// reflected path is relabelled by the mode it continues in) and its refraction into the outside medium (index n2).
/// A reflected path goes on as the intensity of one mode, so only the reflected powers are kept. The transmitted
/// Jones vector is kept as solved, relative to the fields as formed, with its power scale (the exit waves' flux over
/// the incident's): |t|²·t_scale is a power fraction without a square root (internal_transmitted_amplitude forms
/// the power amplitude for tests and tools). No direction is formed here, only the normal components:
/// internal_reflected_k, internal_reflected_ray and internal_exit_k form them, so each channel's solution forms
/// only the one direction its path takes. The plane of incidence's ŝ is the frame's (ff.f.s). The structure is
/// returned through local memory on the GPU: it holds nothing the caller has.
struct UniaxialInternal {
  float kt;          ///< k_t, the conserved tangential component
  float q_r[2];      ///< the reflected o and e waves' normal components (real parts)
  float q_out;       ///< the exit wave's normal component (0 past the critical angle)
  float r_power[2];  ///< power fractions into the reflected o and e modes (0 for an evanescent mode)
  Complexf t[2];     ///< transmitted Jones vector (s, p) in the frame (ŝ, k̂_out × ŝ), relative
  float t_scale;     ///< its power scale (0 past the critical angle)
  std::uint8_t tir_reflected[2];  ///< 1 when that reflected mode is evanescent
  std::uint8_t tir_out;           ///< 1 past the incident mode's critical angle (no transmitted power)
  std::uint8_t degenerate;  ///< 1: scalar Fresnel at n_o; powers R and (T_s/2, T_p/2) for unpolarised light
  float cos_i;              ///< |k̂·N| of the incident wave normal
};

/// Internal facet: unit incident wave normal k of mode `mode` inside (its ray S has S·N > 0) in the frame
/// ff = facet_frame(k, N, false, c, s_hint) of the facet (N out of the stone, c the unit optic axis, s_hint the
/// path's current s axis), n_o, n_e, outside index n2.
FT_HD_OUTLINE UniaxialInternal uniaxial_internal(FacetFrame ff, Vec3 k, std::uint32_t mode, Vec3 c, float n_o,
                                                 float n_e, float n2) {
  using namespace uniaxial_detail;
  UniaxialInternal out{};
  const Frame& f = ff.f;
  const float kz = fdot(k, f.z);
  out.cos_i = fabsf(kz);
  const float n_in = mode_index(mode, k, c, n_o, n_e);
  const float kt = n_in * fdot(k, f.t);
  const float q_in = n_in * kz;
  // Reflected normal components: the same mode's other root is real (o: −q; e: Vieta, −2B/A − q), the other mode's
  // may be evanescent.
  bool prop_o = true, prop_e = true, prop_t;
  const EQuad eq = extraordinary_quadratic(n_o, n_e, kt, ff.c);
  Complexf qo, qe;
  float slope_e, slope_in = 0.0f;
  if (mode == kModeOrdinary) {
    qo = cx(-q_in);
    qe = extraordinary_q(eq, -1.0f, prop_e, slope_e);
  } else {
    qo = iso_q(n_o, kt, -1.0f, prop_o);
    // Vieta: the other root of the same quadratic (B = 0, k_t or c·t̂ or c·ẑ zero, adds −0 without dividing it).
    qe = cx((eq.b != 0.0f ? -2.0f * eq.b / eq.a : 0.0f) - q_in);
    slope_in = fabsf(fmaf(eq.a, q_in, eq.b));
    slope_e = slope_in;
  }
  const Complexf q2 = iso_q(n2, kt, 1.0f, prop_t);
  out.tir_reflected[0] = prop_o ? 0 : 1;
  out.tir_reflected[1] = prop_e ? 0 : 1;
  out.tir_out = prop_t ? 0 : 1;
  out.kt = kt;
  out.q_r[0] = qo.re;
  out.q_r[1] = qe.re;
  out.q_out = prop_t ? q2.re : 0.0f;

  const AxisInFrame cf = ff.c;
  const Field inc = mode == kModeOrdinary ? ordinary_field(kt, cx(q_in), cf, kHandInternal, true)
                                          : extraordinary_field(kt, cx(q_in), cf, n_o, n_e, slope_in, true);
  const Field wo = ordinary_field(kt, qo, cf, kHandInternal, prop_o);
  const Field we = extraordinary_field(kt, qe, cf, n_o, n_e, slope_e, prop_e);
  // The transmitted s and p waves (index n2, normal component q2) are eliminated.
  const Residual ri = iso_residual(inc, kt, kHandInternal, q2, n2);
  const Residual rhs[1] = {{cx(0.0f) - ri.a, cx(0.0f) - ri.b}};
  Complexf xr[1][2]{};  // [o, e]
  bool ok = !uniaxial_degenerate(k, c) && !frame_wave_degenerate(kt, qo.re, cf) && inc.flux > 0.0f;
  ok = ok && solve2<1>(iso_residual(wo, kt, kHandInternal, q2, n2),
                       iso_residual(we, kt, kHandInternal, q2, n2), rhs, xr);
  if (ok) {
    // The transmitted amplitudes from the crystal field V = incident + reflected: s = V·ŝ, p = −V_H·ŝ/n2; both
    // exit waves have the flux Re q2 (0 past the critical angle).
    const Complexf x0 = xr[0][0], x1 = xr[0][1];
    const Complexf vs = cfma(x0, wo.es, cfma(x1, we.es, inc.es));
    const Complexf vh = cfma(x0, field_h_s(wo, kt, kHandInternal),
                             cfma(x1, field_h_s(we, kt, kHandInternal), field_h_s(inc, kt, kHandInternal)));
    const float ft = prop_t ? fabsf(q2.re) : 0.0f;
    // Power scales, each wave's flux over the incident's, so |amplitude|²·scale is a power fraction, and 1/n2 from
    // one division (the o waves' flux_den is 1; the incident's is its own mode's).
    const float inv = 1.0f / (inc.flux * we.flux_den * n2);
    const float g = inc.flux_den * n2 * inv;  // (1/incident flux)/we.flux_den
    out.r_power[0] = abs2(x0) * (wo.flux * we.flux_den * g);
    out.r_power[1] = abs2(x1) * (we.flux * g);
    out.t[0] = vs;
    out.t[1] = vh * -(inc.flux * we.flux_den * inv);
    out.t_scale = ft * we.flux_den * g;
    return out;
  }
  // Scalar Fresnel at n_o (tracer.md §7.5): the mirror direction and Snell at n_o, unpolarised powers.
  out.degenerate = 1;
  out.kt = fdot(k, f.t);  // both reflected normals along the mirror direction, of unit length
  out.q_r[0] = out.q_r[1] = -kz;
  out.tir_reflected[0] = out.tir_reflected[1] = 0;
  const float cos_t = cos_transmitted(n_o / n2, out.cos_i);
  out.tir_out = cos_t < 0.0f ? 1 : 0;
  if (cos_t < 0.0f) {
    out.r_power[0] = 1.0f;
    return out;
  }
  const FresnelAmps a = fresnel_amps(n_o, n2, out.cos_i, cos_t);
  const float ts2 = 0.5f * (1.0f - a.rs * a.rs), tp2 = 0.5f * (1.0f - a.rp * a.rp);
  out.r_power[0] = 0.5f * (a.rs * a.rs + a.rp * a.rp);
  out.t[0] = cx(sqrtf(ts2 > 0.0f ? ts2 : 0.0f));
  out.t[1] = cx(sqrtf(tp2 > 0.0f ? tp2 : 0.0f));
  out.t_scale = 1.0f;
  return out;
}

/// The reflected wave normal of `mode` from an internal solution w in its frame ff (the mirror direction when
/// degenerate).
FT_HD Vec3 internal_reflected_k(const UniaxialInternal& w, const FacetFrame& ff, std::uint32_t mode) {
  return frame_wave_k(ff, w.kt, w.q_r[mode]);
}

/// The reflected ray direction S of `mode` (S = k for o and when degenerate).
FT_HD Vec3 internal_reflected_ray(const UniaxialInternal& w, const FacetFrame& ff, std::uint32_t mode, Vec3 c,
                                  float n_o, float n_e) {
  const Vec3 k = internal_reflected_k(w, ff, mode);
  return mode == kModeOrdinary || w.degenerate ? k : extraordinary_ray(k, c, n_o, n_e);
}

/// The transmitted unit wave normal outside (valid unless w.tir_out) of the solution w for incident unit wave
/// normal k in its frame ff, n_o and n2 as given to uniaxial_internal (Snell at n_o when degenerate).
FT_HD Vec3 internal_exit_k(const UniaxialInternal& w, const FacetFrame& ff, Vec3 k, float n_o, float n2) {
  using namespace uniaxial_detail;
  if (!w.degenerate) return frame_wave_k(ff, w.kt, w.q_out);
  const float eta = n_o / n2;
  const float cos_t = cos_transmitted(eta, w.cos_i);
  return fnormalize(fmadd(k, eta, ff.f.z * fmaf(-eta, w.cos_i, cos_t)));
}

/// Every direction of an internal solution at once (tests and tools; the transport forms only the one it takes).
struct InternalGeometry {
  Vec3 k_reflected[2];    ///< reflected unit wave normals [o, e]
  Vec3 ray_reflected[2];  ///< reflected ray directions S [o, e]
  Vec3 k_out;             ///< transmitted unit wave normal (outside; valid unless tir_out)
};
FT_HD InternalGeometry internal_geometry(const UniaxialInternal& w, const FacetFrame& ff, Vec3 k, Vec3 c,
                                         float n_o, float n_e, float n2) {
  InternalGeometry g;
  for (std::uint32_t m = 0; m < 2; ++m) {
    g.k_reflected[m] = internal_reflected_k(w, ff, m);
    g.ray_reflected[m] = internal_reflected_ray(w, ff, m, c, n_o, n_e);
  }
  g.k_out = internal_exit_k(w, ff, k, n_o, n2);
  return g;
}

/// An internal facet of unit wave normal k and outward normal n_out (its frame made here).
FT_HD UniaxialInternal uniaxial_internal(Vec3 k, std::uint32_t mode, Vec3 n_out, Vec3 c, float n_o, float n_e,
                                         float n2, Vec3 s_hint) {
  return uniaxial_internal(facet_frame(k, n_out, false, c, s_hint), k, mode, c, n_o, n_e, n2);
}

/// Stokes vector of the transmitted wave for an incident mode of intensity i: i·(|t_s|² + |t_p|², |t_s|² − |t_p|²,
/// 2 Re(t_s t_p*), −2 Im(t_s t_p*)) in the frame (ŝ, k̂_out × ŝ), t the power amplitudes.
FT_HD void internal_transmitted_stokes(const UniaxialInternal& w, float i, float* s) {
  using namespace uniaxial_detail;
  const float a = abs2(w.t[0]), b = abs2(w.t[1]);
  const Complexf x = w.t[0] * conj(w.t[1]);
  const float is = i * w.t_scale;
  s[0] = (a + b) * is;
  s[1] = (a - b) * is;
  s[2] = 2.0f * x.re * is;
  s[3] = -2.0f * x.im * is;
}

/// Reflected power into a mode and the total transmitted power.
FT_HD float internal_reflected_power(const UniaxialInternal& w, std::uint32_t mode) { return w.r_power[mode]; }
FT_HD float internal_transmitted_power(const UniaxialInternal& w) {
  return (uniaxial_detail::abs2(w.t[0]) + uniaxial_detail::abs2(w.t[1])) * w.t_scale;
}

/// The power amplitude (|·|² a power fraction) of the transmitted s (j = 0) and p (j = 1) waves: tests and tools.
FT_HD Complexf internal_transmitted_amplitude(const UniaxialInternal& w, int j) {
  using namespace uniaxial_detail;
  return w.t[j] * sqrtf(w.t_scale);
}

}  // namespace facetrace::tracer::physics
