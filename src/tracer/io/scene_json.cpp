/// @file
/// Scene files: JSON ⇄ tracer::Scene (docs/scene-format.md). Errors name the field path.
#include "facetrace/tracer/scene_json.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "facetrace/core/file.h"
#include "facetrace/core/text.h"
#include "facetrace/tracer/env_map.h"
#include "scene/materials.h"

namespace facetrace::tracer {
namespace {

/// Largest scene file read: far above any real scene, it only bounds the memory a wrong path can take.
constexpr std::uint64_t kMaxSceneFileBytes = std::uint64_t{64} << 20;

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;  // keeps the written field order

/// Internal only: carries "<field path>: <reason>" to the API boundary, where it becomes a Status.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& path, const std::string& reason) {
  throw FieldError(path.empty() ? reason : path + ": " + reason);
}

std::string join(const std::string& path, std::string_view key) {
  // A key may come from the file: cut and escaped (core/text.h) like every echoed value.
  const std::string k = core::printable(key);
  return path.empty() ? k : path + "." + k;
}
std::string index_path(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const char* type_name(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

/// Requires `j` to be an object whose keys are all in `known`.
void check_object(const json& j, const std::string& path, const std::vector<std::string_view>& known) {
  if (!j.is_object()) fail(path, std::string("expected an object, got ") + type_name(j));
  for (const auto& [key, value] : j.items()) {
    if (std::find(known.begin(), known.end(), key) == known.end())
      fail(join(path, key),
           "unknown field" + did_you_mean(key, known) + "; known fields: " + list_names(known));
  }
}

bool is_nonfinite_word(const std::string& s) {
  const std::string f = fold_name(s);
  return f == "nan" || f == "inf" || f == "infinity" || f == "+inf" || f == "-inf" || f == "+infinity" ||
         f == "-infinity";
}

double number(const json& j, const std::string& path) {
  if (j.is_string() && is_nonfinite_word(j.get<std::string>()))
    fail(path, "must be a finite number, got the string \"" +
                   core::printable(j.get_ref<const std::string&>()) +
                   "\" (NaN and Infinity are not allowed)");
  if (!j.is_number()) fail(path, std::string("expected a number, got ") + type_name(j));
  const double v = j.get<double>();
  if (!std::isfinite(v)) fail(path, "must be a finite number");
  return v;
}

float to_float(double v, const std::string& path) {
  if (std::fabs(v) > static_cast<double>(std::numeric_limits<float>::max()))
    fail(path, "value " + std::to_string(v) + " is outside the range of a 32-bit float");
  return static_cast<float>(v);
}

float get_float(const json& obj, std::string_view key, const std::string& path, float def) {
  const auto it = obj.find(key);
  if (it == obj.end()) return def;
  const std::string p = join(path, key);
  return to_float(number(*it, p), p);
}

std::uint32_t as_u32(const json& j, const std::string& p, std::uint32_t min, std::uint32_t max) {
  const double v = number(j, p);
  if (v < 0) {
    std::ostringstream os;
    os << "must not be negative, got " << v;
    fail(p, os.str());
  }
  if (v != std::floor(v)) {
    std::ostringstream os;
    os << "expected a whole number, got " << v;
    fail(p, os.str());
  }
  if (v < min || v > max) {
    std::ostringstream os;
    os << "must be in [" << min << ", " << max << "], got " << v;
    fail(p, os.str());
  }
  return static_cast<std::uint32_t>(v);
}

std::uint32_t get_u32(const json& obj, std::string_view key, const std::string& path, std::uint32_t def,
                      std::uint32_t min, std::uint32_t max) {
  const auto it = obj.find(key);
  if (it == obj.end()) return def;
  return as_u32(*it, join(path, key), min, max);
}

bool get_bool(const json& obj, std::string_view key, const std::string& path, bool def) {
  const auto it = obj.find(key);
  if (it == obj.end()) return def;
  if (!it->is_boolean()) fail(join(path, key), std::string("expected true or false, got ") + type_name(*it));
  return it->get<bool>();
}

const std::string& as_string(const json& j, const std::string& p) {
  if (!j.is_string()) fail(p, std::string("expected a string, got ") + type_name(j));
  return j.get_ref<const std::string&>();
}

/// Matches `got` against `names` (fold_name()-insensitive); returns the index.
std::size_t enum_index(const json& j, const std::string& p, const std::vector<std::string_view>& names) {
  const std::string& got = as_string(j, p);
  for (std::size_t i = 0; i < names.size(); ++i)
    if (fold_name(got) == fold_name(names[i])) return i;
  fail(p, "unknown value \"" + core::printable(got) + "\"" + did_you_mean(got, names) +
              "; expected one of: " + list_names(names));
}

// ---- names ---------------------------------------------------------------------------------------------

const std::vector<std::string_view> kEnvironmentNames = {"studio", "uniform", "furnace"};
const std::vector<std::string_view> kModelNames = {"sellmeier1", "sellmeier3", "cauchy"};
const std::vector<std::string_view> kDomainNames = {"wavelength", "wavenumber"};
const std::vector<std::string_view> kFinishNames = {"polished", "frosted"};
const std::vector<std::string_view> kCharacterNames = {"isotropic", "uniaxial_positive", "uniaxial_negative",
                                                       "biaxial_positive", "biaxial_negative"};
const std::vector<std::string_view> kCrystalNames = {"cubic",        "tetragonal", "hexagonal", "trigonal",
                                                     "orthorhombic", "monoclinic", "triclinic", "amorphous"};

// ---- parsing -------------------------------------------------------------------------------------------

Dispersion parse_dispersion(const json& j, const std::string& path) {
  if (!j.is_object()) fail(path, std::string("expected an object, got ") + type_name(j));
  const auto model_it = j.find("model");
  if (model_it == j.end()) fail(join(path, "model"), "missing (one of: sellmeier1, sellmeier3, cauchy)");
  Dispersion d;
  d.model = static_cast<DispersionModel>(enum_index(*model_it, join(path, "model"), kModelNames));
  auto coefficient_list = [&](std::string_view key, float* out, std::size_t max_terms) {
    const std::string p = join(path, key);
    const auto it = j.find(key);
    if (it == j.end()) fail(p, "missing");
    if (it->is_number() || it->is_string()) {
      if (max_terms != 1) fail(p, "expected an array of up to " + std::to_string(max_terms) + " numbers");
      out[0] = to_float(number(*it, p), p);
      return;
    }
    if (!it->is_array()) fail(p, std::string("expected an array of numbers, got ") + type_name(*it));
    if (it->empty() || it->size() > max_terms)
      fail(p, "expected 1 to " + std::to_string(max_terms) + " numbers, got " + std::to_string(it->size()));
    for (std::size_t i = 0; i < it->size(); ++i)
      out[i] = to_float(number((*it)[i], index_path(p, i)), index_path(p, i));
  };
  switch (d.model) {
    case DispersionModel::kSellmeier1:
      check_object(j, path, {"model", "b", "c"});
      coefficient_list("b", d.b, 1);
      coefficient_list("c", d.c, 1);
      break;
    case DispersionModel::kSellmeier3:
      check_object(j, path, {"model", "b", "c"});
      coefficient_list("b", d.b, 3);
      coefficient_list("c", d.c, 3);
      break;
    case DispersionModel::kCauchy: {
      check_object(j, path, {"model", "a", "b", "c"});
      const char* keys[3] = {"a", "b", "c"};
      for (int i = 0; i < 3; ++i) {
        const std::string p = join(path, keys[i]);
        const auto it = j.find(keys[i]);
        if (it == j.end()) {
          if (i == 0) fail(p, "missing");
          continue;
        }
        d.b[i] = to_float(number(*it, p), p);
      }
      break;
    }
  }
  return d;
}

std::vector<AbsorptionBand> parse_bands(const json& j, const std::string& path) {
  if (!j.is_array()) fail(path, std::string("expected an array of bands, got ") + type_name(j));
  std::vector<AbsorptionBand> bands;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string p = index_path(path, i);
    const json& b = j[i];
    check_object(b, p, {"peak", "centre", "width", "domain"});
    for (const char* required : {"peak", "centre", "width"})
      if (!b.contains(required)) fail(join(p, required), "missing");
    AbsorptionBand band;
    band.peak = get_float(b, "peak", p, 0);
    band.centre = get_float(b, "centre", p, 0);
    band.width = get_float(b, "width", p, 1);
    if (band.peak < 0) fail(join(p, "peak"), "must not be negative (absorption per model unit)");
    if (!(band.width > 0)) fail(join(p, "width"), "must be > 0");
    if (const auto it = b.find("domain"); it != b.end())
      band.domain = static_cast<BandDomain>(enum_index(*it, join(p, "domain"), kDomainNames));
    bands.push_back(band);
  }
  return bands;
}

Material parse_material(const json& j, const std::string& path, const Material& def) {
  if (j.is_string()) {
    auto m = material_preset(j.get<std::string>());
    if (!m.ok()) fail(path, m.status().what());
    return std::move(m).value();
  }
  check_object(j, path,
               {"preset", "name", "dispersion", "absorption", "absorption_path_scale", "optical_character",
                "crystal_system", "birefringence_delta", "extraordinary_dispersion", "c_axis",
                "scattering_sigma_s", "scattering_g", "edge_rounding_radius", "fluorescence"});
  Material m = def;
  if (const auto it = j.find("preset"); it != j.end()) {
    auto preset = material_preset(as_string(*it, join(path, "preset")));
    if (!preset.ok()) fail(join(path, "preset"), preset.status().what());
    m = std::move(preset).value();
  } else if (j.contains("dispersion")) {
    m.name = "custom";
  }
  if (const auto it = j.find("name"); it != j.end()) m.name = as_string(*it, join(path, "name"));
  if (const auto it = j.find("dispersion"); it != j.end())
    m.dispersion = parse_dispersion(*it, join(path, "dispersion"));
  if (const auto it = j.find("absorption"); it != j.end()) {
    const std::string p = join(path, "absorption");
    check_object(*it, p, {"o_ray", "e_ray", "beta_ray"});
    m.o_ray =
        it->contains("o_ray") ? parse_bands((*it)["o_ray"], join(p, "o_ray")) : std::vector<AbsorptionBand>{};
    m.e_ray =
        it->contains("e_ray") ? parse_bands((*it)["e_ray"], join(p, "e_ray")) : std::vector<AbsorptionBand>{};
    m.beta_ray = it->contains("beta_ray") ? parse_bands((*it)["beta_ray"], join(p, "beta_ray"))
                                          : std::vector<AbsorptionBand>{};
  }
  m.absorption_path_scale = get_float(j, "absorption_path_scale", path, m.absorption_path_scale);
  if (m.absorption_path_scale < 0) fail(join(path, "absorption_path_scale"), "must not be negative");
  if (const auto it = j.find("optical_character"); it != j.end())
    m.optical_character =
        static_cast<OpticalCharacter>(enum_index(*it, join(path, "optical_character"), kCharacterNames));
  if (const auto it = j.find("crystal_system"); it != j.end())
    m.crystal_system =
        static_cast<CrystalSystem>(enum_index(*it, join(path, "crystal_system"), kCrystalNames));
  m.birefringence_delta = get_float(j, "birefringence_delta", path, m.birefringence_delta);
  if (const auto it = j.find("extraordinary_dispersion"); it != j.end()) {  // null: back to n_o + Δ
    if (it->is_null())
      m.extraordinary_dispersion.reset();
    else
      m.extraordinary_dispersion = parse_dispersion(*it, join(path, "extraordinary_dispersion"));
  }
  if (const auto it = j.find("c_axis"); it != j.end()) {
    const std::string p = join(path, "c_axis");
    if (!it->is_array() || it->size() != 3)
      fail(p, it->is_array() ? "expected 3 numbers, got " + std::to_string(it->size())
                             : std::string("expected an array of 3 numbers, got ") + type_name(*it));
    for (std::size_t k = 0; k < 3; ++k)
      m.c_axis[k] = to_float(number((*it)[k], index_path(p, k)), index_path(p, k));
  }
  m.scattering_sigma_s = get_float(j, "scattering_sigma_s", path, m.scattering_sigma_s);
  m.scattering_g = get_float(j, "scattering_g", path, m.scattering_g);
  m.edge_rounding_radius = get_float(j, "edge_rounding_radius", path, m.edge_rounding_radius);
  m.fluorescence = get_bool(j, "fluorescence", path, m.fluorescence);
  return m;
}

std::vector<Plane> parse_planes(const json& j, const std::string& path) {
  if (j.is_string()) {
    const std::string& name = j.get_ref<const std::string&>();
    if (fold_name(name) == "roundbrilliant") return round_brilliant_planes();
    fail(path, "unknown plane set \"" + core::printable(name) +
                   "\"; expected \"round_brilliant\" or an array of planes");
  }
  if (!j.is_array())
    fail(path, std::string("expected \"round_brilliant\" or an array of planes, got ") + type_name(j));
  std::vector<Plane> planes;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string p = index_path(path, i);
    const json& pj = j[i];
    check_object(pj, p, {"normal", "d", "finish"});
    Plane plane;
    const auto n = pj.find("normal");
    const std::string np = join(p, "normal");
    if (n == pj.end()) fail(np, "missing");
    if (!n->is_array() || n->size() != 3)
      fail(np, n->is_array() ? "expected 3 numbers, got " + std::to_string(n->size())
                             : std::string("expected an array of 3 numbers, got ") + type_name(*n));
    for (std::size_t k = 0; k < 3; ++k)
      plane.normal[k] = to_float(number((*n)[k], index_path(np, k)), index_path(np, k));
    if (!pj.contains("d")) fail(join(p, "d"), "missing");
    plane.d = get_float(pj, "d", p, -1);
    if (const auto f = pj.find("finish"); f != pj.end())
      plane.finish = static_cast<Finish>(enum_index(*f, join(p, "finish"), kFinishNames));
    planes.push_back(plane);
  }
  return planes;
}

/// `"environment": {"hdr": PATH, "sha256": HEX}` (docs/scene-format.md): the map is read and checked here, so a
/// missing file, a wrong sha256 or a map past the limits is an error of the scene file, named.
void parse_hdr_environment(const json& j, const std::string& base_dir, Scene& s) {
  check_object(j, "environment", {"hdr", "sha256"});
  if (!j.contains("hdr")) fail("environment.hdr", "missing (the map file, .hdr or .exr)");
  if (!j.contains("sha256")) fail("environment.sha256", "missing (the map's sha256, 64 hex digits)");
  const std::string file = as_string(j["hdr"], "environment.hdr");
  const std::string sha = as_string(j["sha256"], "environment.sha256");
  if (file.empty()) fail("environment.hdr", "empty path");
  if (sha.size() != 64 || !std::all_of(sha.begin(), sha.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c)) != 0;
      }))
    fail("environment.sha256", "expected 64 hex digits, got \"" + core::printable(sha) + "\"");
  const std::string path = file.front() == '/' || base_dir.empty() ? file : base_dir + "/" + file;
  s.environment = EnvironmentKind::kHdr;
  s.environment_map = path;
  s.environment_map_sha256 = sha;
  // Read, checked and decoded once here; the scene keeps the map and its sampling tables (docs/design/tracer.md §6.1).
  if (Status st = load_environment_light(s); !st.ok()) fail("environment.hdr", st.what());
}

Scene parse_scene(const json& j, const std::string& base_dir) {
  check_object(j, "", {"version",        "description",     "width",         "height",          "yaw",
                       "pitch",          "distance",        "light_yaw",     "light_pitch",     "exposure",
                       "max_bounces",    "lighting_preset", "environment",   "material",        "planes",
                       "girdle_frosted", "backdrop",        "surface_glare", "head_shadow_deg", "tools"});
  if (const auto it = j.find("version"); it != j.end() && as_u32(*it, "version", 0, 1000) != 1)
    fail("version", "unsupported scene format version (this build reads version 1)");
  if (const auto it = j.find("description"); it != j.end()) as_string(*it, "description");
  Scene s = builtin_diamond_scene();
  s.width = get_u32(j, "width", "", s.width, 1, 7680);
  s.height = get_u32(j, "height", "", s.height, 1, 4320);
  s.yaw = get_float(j, "yaw", "", s.yaw);
  s.pitch = get_float(j, "pitch", "", s.pitch);
  s.distance = get_float(j, "distance", "", s.distance);
  s.light_yaw = get_float(j, "light_yaw", "", s.light_yaw);
  s.light_pitch = get_float(j, "light_pitch", "", s.light_pitch);
  s.exposure = get_float(j, "exposure", "", s.exposure);
  s.max_bounces = get_u32(j, "max_bounces", "", s.max_bounces, 1, 128);
  if (const auto it = j.find("lighting_preset"); it != j.end())
    s.lighting_preset =
        static_cast<LightingPreset>(enum_index(*it, "lighting_preset", lighting_preset_names()));
  if (const auto it = j.find("environment"); it != j.end()) {
    if (it->is_object()) {
      parse_hdr_environment(*it, base_dir, s);
    } else {
      if (it->is_string() && fold_name(it->get<std::string>()) == "hdr")
        fail("environment",
             "an HDR map is an object: {\"hdr\": \"map.hdr\", \"sha256\": \"<64 hex digits>\"}");
      const std::size_t e = enum_index(*it, "environment", kEnvironmentNames);
      s.environment = e == 0 ? EnvironmentKind::kStudio : EnvironmentKind::kUniform;
    }
  }
  if (const auto it = j.find("material"); it != j.end())
    s.material = parse_material(*it, "material", s.material);
  if (const auto it = j.find("planes"); it != j.end()) s.planes = parse_planes(*it, "planes");
  s.girdle_frosted = get_bool(j, "girdle_frosted", "", s.girdle_frosted);
  s.backdrop = get_float(j, "backdrop", "", s.backdrop);
  s.surface_glare = get_float(j, "surface_glare", "", s.surface_glare);
  s.head_shadow_deg = get_float(j, "head_shadow_deg", "", s.head_shadow_deg);
  s.tools = get_bool(j, "tools", "", s.tools);
  return s;
}

/// "line L, column C" (1-based) of the last non-blank character at or before byte offset `byte` (1-based).
std::string text_position(std::string_view text, std::size_t byte) {
  if (text.empty()) return "line 1, column 1";
  std::size_t pos = std::min(byte > 0 ? byte - 1 : 0, text.size() - 1);
  while (pos > 0 && std::isspace(static_cast<unsigned char>(text[pos]))) --pos;
  std::size_t line = 1, line_start = 0;
  for (std::size_t i = 0; i < pos; ++i)
    if (text[i] == '\n') ++line, line_start = i + 1;
  return "line " + std::to_string(line) + ", column " + std::to_string(pos - line_start + 1);
}

/// Appends " (JSON has no NaN or Infinity ...)" when the syntax error sits on such a literal.
std::string nonfinite_hint(std::string_view text, std::size_t byte) {
  const std::size_t from = byte > 12 ? byte - 12 : 0;
  std::string window(text.substr(from, 24));
  for (auto& c : window) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (window.find("nan") != std::string::npos || window.find("inf") != std::string::npos)
    return " (JSON has no NaN or Infinity: use a finite number)";
  return {};
}

// ---- writing -------------------------------------------------------------------------------------------

/// A JSON number that prints as the shortest decimal reading back to exactly `f`.
ojson num(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  const double d = std::strtod(buf, nullptr);
  if (static_cast<float>(d) == f) return d;
  return static_cast<double>(f);
}

ojson bands_json(const std::vector<AbsorptionBand>& bands) {
  ojson a = ojson::array();
  for (const auto& b : bands) {
    ojson o = {{"peak", num(b.peak)}, {"centre", num(b.centre)}, {"width", num(b.width)}};
    o["domain"] = std::string(kDomainNames[static_cast<std::size_t>(b.domain)]);
    a.push_back(std::move(o));
  }
  return a;
}

bool same_dispersion(const Dispersion& a, const Dispersion& b) {
  if (a.model != b.model) return false;
  for (int i = 0; i < 3; ++i)
    if (a.b[i] != b.b[i] || a.c[i] != b.c[i]) return false;
  return true;
}

bool same_material(const Material& a, const Material& b) {
  if (a.name != b.name || !same_dispersion(a.dispersion, b.dispersion)) return false;
  if (a.extraordinary_dispersion.has_value() != b.extraordinary_dispersion.has_value()) return false;
  if (a.extraordinary_dispersion &&
      !same_dispersion(*a.extraordinary_dispersion, *b.extraordinary_dispersion))
    return false;
  return a.o_ray == b.o_ray && a.e_ray == b.e_ray && a.beta_ray == b.beta_ray &&
         a.absorption_path_scale == b.absorption_path_scale && a.optical_character == b.optical_character &&
         a.crystal_system == b.crystal_system && a.birefringence_delta == b.birefringence_delta &&
         a.c_axis[0] == b.c_axis[0] && a.c_axis[1] == b.c_axis[1] && a.c_axis[2] == b.c_axis[2] &&
         a.scattering_sigma_s == b.scattering_sigma_s && a.scattering_g == b.scattering_g &&
         a.edge_rounding_radius == b.edge_rounding_radius && a.fluorescence == b.fluorescence;
}

bool same_planes(const std::vector<Plane>& a, const std::vector<Plane>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].normal[0] != b[i].normal[0] || a[i].normal[1] != b[i].normal[1] ||
        a[i].normal[2] != b[i].normal[2] || a[i].d != b[i].d || a[i].finish != b[i].finish)
      return false;
  return true;
}

ojson dispersion_json(const Dispersion& disp) {
  ojson d;
  d["model"] = std::string(kModelNames[static_cast<std::size_t>(disp.model)]);
  switch (disp.model) {
    case DispersionModel::kSellmeier1:
      d["b"] = num(disp.b[0]);
      d["c"] = num(disp.c[0]);
      break;
    case DispersionModel::kSellmeier3:
      d["b"] = {num(disp.b[0]), num(disp.b[1]), num(disp.b[2])};
      d["c"] = {num(disp.c[0]), num(disp.c[1]), num(disp.c[2])};
      break;
    case DispersionModel::kCauchy:
      d["a"] = num(disp.b[0]);
      d["b"] = num(disp.b[1]);
      d["c"] = num(disp.b[2]);
      break;
  }
  return d;
}

ojson material_json(const Material& m, bool use_names) {
  if (use_names) {
    for (const MaterialPreset& p : material_presets())
      if (same_material(m, p.make())) return std::string(p.name);
  }
  ojson o;
  o["name"] = m.name;
  o["dispersion"] = dispersion_json(m.dispersion);
  o["absorption"] = {
      {"o_ray", bands_json(m.o_ray)}, {"e_ray", bands_json(m.e_ray)}, {"beta_ray", bands_json(m.beta_ray)}};
  o["absorption_path_scale"] = num(m.absorption_path_scale);
  o["optical_character"] = std::string(kCharacterNames[static_cast<std::size_t>(m.optical_character)]);
  o["crystal_system"] = std::string(kCrystalNames[static_cast<std::size_t>(m.crystal_system)]);
  o["birefringence_delta"] = num(m.birefringence_delta);
  if (m.extraordinary_dispersion)
    o["extraordinary_dispersion"] = dispersion_json(*m.extraordinary_dispersion);
  o["c_axis"] = {num(m.c_axis[0]), num(m.c_axis[1]), num(m.c_axis[2])};
  o["scattering_sigma_s"] = num(m.scattering_sigma_s);
  o["scattering_g"] = num(m.scattering_g);
  o["edge_rounding_radius"] = num(m.edge_rounding_radius);
  o["fluorescence"] = m.fluorescence;
  return o;
}

}  // namespace

// ---- public API ----------------------------------------------------------------------------------------

namespace {

/// scene_from_json with relative map paths resolved against `base_dir` ("" = the working directory).
Expected<Scene> scene_from_json_in(std::string_view text, std::string_view source,
                                   const std::string& base_dir) {
  const std::string src = core::printable(source);
  json j;
  std::string duplicate;
  try {
    // Duplicate keys would silently keep the last value; refuse them instead.
    std::vector<std::vector<std::string>> keys;
    json::parser_callback_t cb = [&](int, json::parse_event_t event, json& parsed) {
      if (event == json::parse_event_t::object_start) keys.emplace_back();
      if (event == json::parse_event_t::object_end && !keys.empty()) keys.pop_back();
      if (event == json::parse_event_t::key && !keys.empty() && duplicate.empty()) {
        const std::string k = parsed.get<std::string>();
        auto& level = keys.back();
        if (std::find(level.begin(), level.end(), k) != level.end()) duplicate = k;
        level.push_back(k);
      }
      return true;
    };
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::parse_error& e) {
    // nlohmann's "parse error at line L, column C: details"; the position is recomputed from the byte
    // offset so that it points at the offending token rather than at the look-ahead after it.
    std::string what = e.what();
    if (const auto pos = what.find("parse error"); pos != std::string::npos) {
      const auto colon = what.find(": ", pos);
      what = colon == std::string::npos ? what.substr(pos) : what.substr(colon + 2);
    }
    // the parser's "last read: '…'" quotes the file: a long token is cut, raw bytes escaped (core/text.h)
    return invalid_argument(src + ": malformed JSON at " + text_position(text, e.byte) + ": " +
                            core::printable(what, 2 * core::kEchoBytes) + nonfinite_hint(text, e.byte));
  } catch (const std::exception& e) {
    return invalid_argument(src + ": malformed JSON: " + core::printable(e.what()));
  }
  if (!duplicate.empty())
    return invalid_argument(src + ": " + core::printable(duplicate) + ": field given more than once");
  if (!j.is_object())
    return invalid_argument(src + ": expected a JSON object at the top level, got " + type_name(j));
  if (j.contains("scene") && j.contains("unit_samples"))  // a farm job (docs/farm.md) handed to render
    return invalid_argument(src +
                            ": a farm job file, not a scene (docs/farm.md): render its units with `facetrace "
                            "worker --job FILE` or `facetrace-mpi render FILE`, or render its \"scene\" file");
  Scene scene;
  try {
    scene = parse_scene(j, base_dir);
  } catch (const FieldError& e) {
    return invalid_argument(src + ": " + e.what());
  } catch (const std::exception& e) {
    return internal_error(src + ": unexpected error while reading the scene: " + e.what());
  }
  if (Status st = validate_scene(scene); !st.ok()) return st.with_context(src);
  return scene;
}

}  // namespace

Expected<Scene> scene_from_json(std::string_view text, std::string_view source) {
  return scene_from_json_in(text, source, "");
}

Expected<Scene> load_scene_file(const std::string& path) {
  auto bytes = core::read_file(path, kMaxSceneFileBytes);
  if (!bytes) return bytes.status().with_context("scene file");
  const std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  const auto slash = path.find_last_of('/');
  return scene_from_json_in(text, path, slash == std::string::npos ? std::string() : path.substr(0, slash));
}

std::string scene_to_json(const Scene& s, const SceneJsonOptions& options) {
  ojson j;
  j["version"] = 1;
  j["width"] = s.width;
  j["height"] = s.height;
  j["yaw"] = num(s.yaw);
  j["pitch"] = num(s.pitch);
  j["distance"] = num(s.distance);
  j["light_yaw"] = num(s.light_yaw);
  j["light_pitch"] = num(s.light_pitch);
  j["exposure"] = num(s.exposure);
  j["max_bounces"] = s.max_bounces;
  j["lighting_preset"] = std::string(lighting_preset_name(s.lighting_preset));
  if (s.environment == EnvironmentKind::kHdr)
    j["environment"] = options.map_by_sha256
                           ? nlohmann::json{{"sha256", s.environment_map_sha256}}
                           : nlohmann::json{{"hdr", s.environment_map}, {"sha256", s.environment_map_sha256}};
  else
    j["environment"] = s.environment == EnvironmentKind::kStudio ? "studio" : "uniform";
  j["material"] = material_json(s.material, options.use_names);
  if (options.use_names && same_planes(s.planes, round_brilliant_planes())) {
    j["planes"] = "round_brilliant";
  } else {
    ojson planes = ojson::array();
    for (const auto& p : s.planes)
      planes.push_back({{"normal", {num(p.normal[0]), num(p.normal[1]), num(p.normal[2])}},
                        {"d", num(p.d)},
                        {"finish", std::string(kFinishNames[static_cast<std::size_t>(p.finish)])}});
    j["planes"] = std::move(planes);
  }
  j["girdle_frosted"] = s.girdle_frosted;
  j["backdrop"] = num(s.backdrop);
  j["surface_glare"] = num(s.surface_glare);
  j["head_shadow_deg"] = num(s.head_shadow_deg);
  j["tools"] = s.tools;
  return j.dump(options.indent) + "\n";
}

Status save_scene_file(const Scene& scene, const std::string& path, const SceneJsonOptions& options) {
  // The one atomic writer (core/file.h): a failed write keeps the previous file, readers never see half of one.
  if (Status st = core::write_file_atomic(path, scene_to_json(scene, options)); !st.ok()) {
    std::string rest = st.what();  // "<path>: <step>: <OS error>"
    const std::string shown = core::printable(path);
    if (rest.rfind(shown + ": ", 0) == 0) rest.erase(0, shown.size() + 2);
    return Status(st.code(), shown + ": cannot write scene file: " + rest);
  }
  return {};
}

}  // namespace facetrace::tracer
