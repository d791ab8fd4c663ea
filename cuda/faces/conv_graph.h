/// @file
/// Private, CUDA builds only: a channels-last convolution through cuDNN's graph (backend) API
/// (docs/design/faces.md §8.3). The legacy API reaches only a few of cuDNN's engines for NHWC tensor-core
/// convolutions; the graph API's heuristics list them all. One GraphConv per (shape, batch, data type): the
/// heuristics' engine configurations that are deterministic and need no runtime compilation are finalised into
/// execution plans, each timed on the caller's buffers, and the fastest kept. Host C++ (cudnn.h only).
#pragma once

#include <cudnn.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "facetrace/core/status.h"

namespace facetrace::faces::gpu {

/// The convolution: x [n, c, h, w] NHWC, w [k, c, r, s] KRSC, y [n, k, oh, ow] NHWC, fp32 accumulate.
struct GraphConvShape {
  std::int64_t n = 1, c = 0, h = 0, w = 0, k = 0, r = 1, s = 1, oh = 0, ow = 0;
  std::int64_t pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  cudnnDataType_t io = CUDNN_DATA_FLOAT;  ///< x, w and y: CUDNN_DATA_FLOAT (tf32 engines) or CUDNN_DATA_BFLOAT16
};

class GraphConv {
 public:
  /// Builds and times the candidates on `x`, `w`, `y` with up to `workspace_cap` bytes at `workspace`.
  /// kDeclined when no engine takes the shape (the caller keeps the legacy API); other errors as cuDNN's.
  static Expected<std::shared_ptr<GraphConv>> build(cudnnHandle_t handle, const GraphConvShape& shape,
                                                    const void* x, const void* w, void* y, void* workspace,
                                                    std::size_t workspace_cap, cudaStream_t stream);
  ~GraphConv();
  GraphConv(const GraphConv&) = delete;
  GraphConv& operator=(const GraphConv&) = delete;

  /// y = conv(x, w) on `stream` (the handle's stream is set to it).
  Status run(const void* x, const void* w, void* y, void* workspace, cudaStream_t stream) const;
  std::size_t workspace() const { return workspace_; }
  /// "engine N" of the kept plan, and how many candidates were timed.
  const std::string& name() const { return name_; }
  /// Every timed candidate, "e<engine>:<us> ..." (plan detail).
  const std::string& tried() const { return tried_; }

 private:
  GraphConv() = default;
  struct Descriptors;
  cudnnHandle_t handle_ = nullptr;
  std::unique_ptr<Descriptors> d_;
  cudnnBackendDescriptor_t plan_ = nullptr;
  std::size_t workspace_ = 0;
  std::string name_;
  std::string tried_;
};

}  // namespace facetrace::faces::gpu
