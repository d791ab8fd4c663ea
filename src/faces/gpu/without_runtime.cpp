/// @file
/// The GPU accelerator's entry points in a build without the device runtime (FT_WITH_RUNTIME=OFF): every GPU
/// request says why it cannot run (docs/design/faces.md §4). Linked instead of ft_faces_gpu.
#include "facetrace/faces/accelerator.h"

namespace facetrace::faces {

GpuAcceleratorOptions GpuAcceleratorOptions::from_env() { return {}; }

Expected<std::shared_ptr<Accelerator>> make_gpu_accelerator(const GpuAcceleratorOptions&) {
  return not_supported("no usable GPU for the face networks: built without the device runtime (FT_WITH_RUNTIME=OFF)");
}

void set_pace(int, double) {}

}  // namespace facetrace::faces
