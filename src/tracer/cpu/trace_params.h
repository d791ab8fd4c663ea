/// @file
/// Host side of the shared physics: turns a validated Scene into the POD TraceParams and the FacetPlane array
/// that trace_sample (physics/transport.h) consumes on the CPU and the GPU.
#pragma once

#include <vector>

#include "facetrace/core/status.h"
#include "facetrace/tracer/scene.h"
#include "physics/chunk.h"
#include "physics/hdr_environment.h"

namespace facetrace::tracer {

/// Builds the trace parameters of `scene` (camera basis, environment and rig, white balance, material).
/// Precondition: validate_scene(scene) is ok and tier_features(scene).status() is ok. An HDR environment gets
/// env_kind kEnvHdr and no white balance; its map travels separately (physics::EnvMapView). Pure; thread-safe.
physics::TraceParams make_trace_params(const Scene& scene);

/// The material beyond TraceParams (docs/design/tracer.md §7.7): kMediumUniaxial for a uniaxial stone (non-cubic,
/// |Δ| > 1e-4, not biaxial) with the unit optic axis, n_e = n_o + Δ and the e_ray bands, plus the inclusions
/// (σ_s × absorption_path_scale, g) and the edge rounding radius. All zero for a clear isotropic stone with sharp
/// edges. Same precondition as make_trace_params.
physics::MediumParams make_medium_params(const Scene& scene);

/// The scene's planes as FacetPlane, with the Frosted finish re-derived for girdle facets (|n_y| ≤ 1e-3) when
/// girdle_frosted is set (docs/design/tracer.md §4). Same precondition as make_trace_params.
std::vector<physics::FacetPlane> make_facet_planes(const Scene& scene);

/// The view of `light` the physics reads on the host (docs/design/tracer.md §6.1); `light` outlives it.
physics::EnvMapView env_map_view(const EnvLight& light, float exposure, bool nee);

/// The Bradford white-balance matrix (row-major 3×3) mapping the white of illuminant S to D65 at equal Y,
/// both integrated from the 5 nm CMF table (docs/design/tracer.md §8). Identity for D65.
void bradford_to_d65(std::uint32_t illuminant_kind, float planck_kelvin, float out[9]);

}  // namespace facetrace::tracer
