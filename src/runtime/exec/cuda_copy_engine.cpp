/// @file
/// The CUDA CopyEngine of the readback ring (docs/design/runtime.md §2 ordering): compute stream → out_ready event →
/// copy stream (non-blocking) waits → cudaMemcpyAsync D2H into the slot → done event, queried with
/// cudaEventQuery (never callback-only).
#include <vector>

#include "facetrace/runtime/readback_ring.h"
#include "common/cuda_check.cuh"

namespace facetrace::runtime {
namespace {

class CudaCopyEngine final : public CopyEngine {
 public:
  ~CudaCopyEngine() override {
    if (process_cuda_poisoned()) return;
    for (auto e : out_ready_) FT_CUDA_IGNORE(cudaEventDestroy(e));
    for (auto e : done_) FT_CUDA_IGNORE(cudaEventDestroy(e));
    if (copy_stream_ != nullptr) {
      FT_CUDA_IGNORE(cudaStreamSynchronize(copy_stream_));
      FT_CUDA_IGNORE(cudaStreamDestroy(copy_stream_));
    }
  }

  Status create_slot(std::uint32_t id) override {
    if (copy_stream_ == nullptr) FT_CUDA_TRY(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
    if (id != out_ready_.size()) return internal_error("copy engine: slot ids must be dense");
    cudaEvent_t a = nullptr, b = nullptr;
    FT_CUDA_TRY(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
    FT_CUDA_TRY(cudaEventCreateWithFlags(&b, cudaEventDisableTiming));
    out_ready_.push_back(a);
    done_.push_back(b);
    return {};
  }

  Status enqueue_copy(std::uint32_t id, void* dst, const void* src, std::uint64_t bytes,
                      CUstream_st* stream) override {
    cudaStream_t compute = stream != nullptr ? stream : cudaStreamPerThread;
    FT_CUDA_TRY(cudaEventRecord(out_ready_[id], compute));
    FT_CUDA_TRY(cudaStreamWaitEvent(copy_stream_, out_ready_[id], 0));
    FT_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, copy_stream_));
    FT_CUDA_TRY(cudaEventRecord(done_[id], copy_stream_));
    return {};
  }

  int query(std::uint32_t id) override {
    if (process_cuda_poisoned()) return 46;  // never ask CUDA again in a poisoned process
    return static_cast<int>(cudaEventQuery(done_[id]));
  }

 private:
  cudaStream_t copy_stream_ = nullptr;
  std::vector<cudaEvent_t> out_ready_, done_;
};

}  // namespace

std::unique_ptr<CopyEngine> make_cuda_copy_engine() { return std::make_unique<CudaCopyEngine>(); }

}  // namespace facetrace::runtime
