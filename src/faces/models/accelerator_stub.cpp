/// @file
/// TEMPORARY STUB (issue 11, helper "cli"): stands in for the GPU face stack until branch `accel` lands. The lead
/// deletes this file (and its line in cmake/area_faces.cmake) when merging `accel`, whose library defines these
/// functions. Everything here reports that the GPU face stack is not built.
#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {

GpuAcceleratorOptions GpuAcceleratorOptions::from_env() { return {}; }

Expected<std::shared_ptr<Accelerator>> make_gpu_accelerator(const GpuAcceleratorOptions&) {
  return not_supported("GPU face stack not built");
}

Status Net::attach_checked(std::shared_ptr<Accelerator>) { return not_supported("GPU face stack not built"); }
void Net::detach() {}
std::optional<std::string> Net::accelerator() const { return std::nullopt; }
std::optional<std::string> Net::detach_reason() const { return std::nullopt; }

}  // namespace facetrace::faces
