// A program outside the facetrace tree: renders the built-in diamond through the installed package
// (find_package(facetrace CONFIG), README "Install") and writes a PNG. GPU when one is usable, else the CPU.
#include <cstdio>

#include "facetrace/runtime/executor.h"
#include "facetrace/tracer/output.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"

int main(int argc, char** argv) {
  namespace ft = facetrace;
  const char* out = argc > 1 ? argv[1] : "consumer.png";
  ft::tracer::Scene scene = ft::tracer::builtin_diamond_scene();
  scene.width = scene.height = 64;
  ft::tracer::Film film(scene.width, scene.height);
  auto report = ft::tracer::render(scene, 0, 4, film);
  if (!report) return std::fprintf(stderr, "render: %s\n", report.status().to_string().c_str()), 1;
  if (auto st = ft::tracer::write_png(out, ft::tracer::tonemap_film(film)); !st.ok())
    return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
  std::printf("rendered %ux%u on %s into %s\nfacetrace-gpud: %s\n", scene.width, scene.height,
              report->device.c_str(), out, ft::runtime::find_gpud({}).c_str());
}
