/// @file
/// GraphConv (conv_graph.h, docs/design/faces.md §8.3): the cuDNN graph API for one channels-last convolution.
#include <cudnn.h>

#include "common/cuda_check.cuh"
#include "faces/conv_graph.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <utility>
#include <vector>

namespace facetrace::faces::gpu {
namespace {

constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3;
constexpr int kMaxCandidates = 12;  // heuristic results finalised and timed (best first)

// Plan-time search knobs (docs/design/faces.md §8.3): FACETRACE_CUDNN_GRAPH_CANDIDATES (timed plans, default 12),
// FACETRACE_CUDNN_GRAPH_RTC=1 (also engines that compile kernels at plan time).
int max_candidates() {
  const char* v = std::getenv("FACETRACE_CUDNN_GRAPH_CANDIDATES");
  const int n = v ? std::atoi(v) : kMaxCandidates;
  return n >= 1 && n <= 256 ? n : kMaxCandidates;
}
bool allow_rtc() {
  const char* v = std::getenv("FACETRACE_CUDNN_GRAPH_RTC");
  return v && v[0] == '1';
}
constexpr int kTimedRuns = 3;

/// An owned backend descriptor.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d(o.d) { o.d = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    std::swap(d, o.d);
    return *this;
  }
  ~Desc() {
    if (d) FT_CUDA_IGNORE(cudnnBackendDestroyDescriptor(d));
  }
};

Expected<Desc> make(cudnnBackendDescriptorType_t type) {
  Desc x;
  FT_CUDNN_TRY(cudnnBackendCreateDescriptor(type, &x.d));
  return x;
}

Status set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
           std::int64_t n, const void* v) {
  FT_CUDNN_TRY(cudnnBackendSetAttribute(d, a, t, n, v));
  return {};
}

Expected<Desc> tensor(std::int64_t uid, cudnnDataType_t type, const std::array<std::int64_t, 4>& dims) {
  auto t = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  if (!t) return t.status();
  // channels-last strides of the logical [n, c, h, w]
  const std::array<std::int64_t, 4> strides{dims[1] * dims[2] * dims[3], 1, dims[3] * dims[1], dims[1]};
  const std::int64_t align = 16;
  FT_TRY(set(t->d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  FT_TRY(set(t->d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data()));
  FT_TRY(set(t->d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data()));
  FT_TRY(set(t->d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  FT_TRY(set(t->d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align));
  FT_CUDNN_TRY(cudnnBackendFinalize(t->d));
  return t;
}

/// Runs `plan` once on the three buffers.
Status execute(cudnnHandle_t h, cudnnBackendDescriptor_t plan, const void* x, const void* w, void* y,
               void* workspace) {
  auto vp = make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  if (!vp) return vp.status();
  const std::int64_t uids[3] = {kUidX, kUidW, kUidY};
  void* ptrs[3] = {const_cast<void*>(x), const_cast<void*>(w), y};
  FT_TRY(set(vp->d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids));
  FT_TRY(set(vp->d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs));
  FT_TRY(set(vp->d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace));
  FT_CUDNN_TRY(cudnnBackendFinalize(vp->d));
  FT_CUDNN_TRY(cudnnBackendExecute(h, plan, vp->d));
  return {};
}

}  // namespace

struct GraphConv::Descriptors {
  Desc x, w, y, conv, op, graph;
  std::vector<Desc> keep;  // the kept plan's engine config and engine
};

GraphConv::~GraphConv() {
  if (plan_) FT_CUDA_IGNORE(cudnnBackendDestroyDescriptor(plan_));
}

Expected<std::shared_ptr<GraphConv>> GraphConv::build(cudnnHandle_t handle, const GraphConvShape& s,
                                                      const void* x, const void* w, void* y, void* workspace,
                                                      std::size_t workspace_cap, cudaStream_t stream) {
  std::shared_ptr<GraphConv> g(new GraphConv());
  g->handle_ = handle;
  g->d_ = std::make_unique<Descriptors>();
  Descriptors& d = *g->d_;
  FT_CUDNN_TRY(cudnnSetStream(handle, stream));
  {
    auto tx = tensor(kUidX, s.io, {s.n, s.c, s.h, s.w});
    if (!tx) return tx.status();
    auto tw = tensor(kUidW, s.io, {s.k, s.c, s.r, s.s});
    if (!tw) return tw.status();
    auto ty = tensor(kUidY, s.io, {s.n, s.k, s.oh, s.ow});
    if (!ty) return ty.status();
    d.x = std::move(*tx), d.w = std::move(*tw), d.y = std::move(*ty);
  }
  {
    auto c = make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    if (!c) return c.status();
    const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    const std::int64_t dims = 2, pads[2] = {s.pad_h, s.pad_w}, strides[2] = {s.stride_h, s.stride_w},
                       dil[2] = {s.dil_h, s.dil_w};
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp));
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims));
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pads));
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, strides));
    FT_TRY(set(c->d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil));
    FT_CUDNN_TRY(cudnnBackendFinalize(c->d));
    d.conv = std::move(*c);
  }
  {
    auto op = make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    if (!op) return op.status();
    const float one = 1.0f, zero = 0.0f;
    FT_TRY(set(op->d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.x.d));
    FT_TRY(set(op->d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.w.d));
    FT_TRY(set(op->d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.y.d));
    FT_TRY(set(op->d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
               &d.conv.d));
    FT_TRY(set(op->d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &one));
    FT_TRY(set(op->d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &zero));
    FT_CUDNN_TRY(cudnnBackendFinalize(op->d));
    d.op = std::move(*op);
  }
  {
    auto og = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (!og) return og.status();
    FT_TRY(set(og->d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.op.d));
    FT_TRY(set(og->d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle));
    if (cudnnBackendFinalize(og->d) != CUDNN_STATUS_SUCCESS)
      return Status(Code::kDeclined, "cuDNN graph: the operation graph does not finalise");
    d.graph = std::move(*og);
  }
  // The heuristics' engine configurations, best first.
  auto heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  if (!heur) return heur.status();
  const cudnnBackendHeurMode_t hm = CUDNN_HEUR_MODE_A;
  FT_TRY(set(heur->d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d.graph.d));
  FT_TRY(set(heur->d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm));
  if (cudnnBackendFinalize(heur->d) != CUDNN_STATUS_SUCCESS)
    return Status(Code::kDeclined, "cuDNN graph: no heuristics for this convolution");
  std::int64_t count = 0;
  FT_CUDNN_TRY(
      cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  count = std::min<std::int64_t>(count, 256);
  const int limit = max_candidates();
  const bool rtc = allow_rtc();
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    auto c = make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    if (!c) return c.status();
    raw.push_back(c->d);
    cfgs.push_back(std::move(*c));
  }
  std::int64_t got = 0;
  if (count > 0)
    FT_CUDNN_TRY(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          count, &got, raw.data()));
  cudaEvent_t a = nullptr, b = nullptr;
  FT_CUDA_TRY(cudaEventCreate(&a));
  if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
    FT_CUDA_IGNORE(cudaEventDestroy(a));
    return runtime::cuda_call_status(e, "cudaEventCreate", __FILE__, __LINE__);
  }
  float best_ms = 0.0f;
  int timed = 0;
  Status failure;
  for (std::int64_t i = 0; i < got && timed < limit && failure.ok(); ++i) {
    // the engine's notes: deterministic only, no runtime compilation (NVRTC at plan time)
    auto engine = make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
    if (!engine) {
      failure = engine.status();
      break;
    }
    std::int64_t n = 0;
    if (cudnnBackendGetAttribute(cfgs[static_cast<std::size_t>(i)].d, CUDNN_ATTR_ENGINECFG_ENGINE,
                                 CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine->d) != CUDNN_STATUS_SUCCESS)
      continue;
    cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
    cudnnBackendBehaviorNote_t behaviour[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
    std::int64_t nn = 0, nb = 0;
    if (cudnnBackendGetAttribute(engine->d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nn, notes) != CUDNN_STATUS_SUCCESS ||
        cudnnBackendGetAttribute(engine->d, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &nb, behaviour) != CUDNN_STATUS_SUCCESS)
      continue;
    if (std::find(notes, notes + nn, CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC) != notes + nn) continue;
    if (!rtc && std::find(behaviour, behaviour + nb, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != behaviour + nb)
      continue;
    std::int64_t index = -1;
    FT_CUDA_IGNORE(cudnnBackendGetAttribute(engine->d, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n,
                                            &index));
    cudnnBackendDescriptor_t plan = nullptr;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) != CUDNN_STATUS_SUCCESS)
      continue;
    std::int64_t ws = 0;
    const bool ok =
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) ==
            CUDNN_STATUS_SUCCESS &&
        cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                 &cfgs[static_cast<std::size_t>(i)].d) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS &&
        cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws) ==
            CUDNN_STATUS_SUCCESS &&
        ws >= 0 && static_cast<std::size_t>(ws) <= workspace_cap;
    if (!ok) {
      FT_CUDA_IGNORE(cudnnBackendDestroyDescriptor(plan));
      continue;
    }
    // warm-up, then the best of a few timed runs
    Status st = execute(handle, plan, x, w, y, workspace);
    float ms = 0.0f;
    for (int r = 0; r < kTimedRuns && st.ok(); ++r) {
      float t = 0.0f;
      cudaError_t e = cudaEventRecord(a, stream);
      if (e == cudaSuccess) st = execute(handle, plan, x, w, y, workspace);
      if (st.ok() && e == cudaSuccess) e = cudaEventRecord(b, stream);
      if (st.ok() && e == cudaSuccess) e = cudaEventSynchronize(b);
      if (st.ok() && e == cudaSuccess) e = cudaEventElapsedTime(&t, a, b);
      if (e != cudaSuccess) st = runtime::cuda_call_status(e, "timing a cuDNN graph plan", __FILE__, __LINE__);
      ms = r == 0 ? t : std::min(ms, t);
    }
    if (!st.ok()) {
      FT_CUDA_IGNORE(cudnnBackendDestroyDescriptor(plan));
      if (st.code() == Code::kDeviceLost) failure = st;  // sticky: stop; anything else: the next engine
      FT_CUDA_IGNORE(cudaGetLastError());
      continue;
    }
    ++timed;
    g->tried_ += "e" + std::to_string(index) + ":" + std::to_string(static_cast<int>(1000.0f * ms)) + " ";
    if (!g->plan_ || ms < best_ms) {
      if (g->plan_) FT_CUDA_IGNORE(cudnnBackendDestroyDescriptor(g->plan_));
      g->plan_ = plan;
      g->workspace_ = static_cast<std::size_t>(ws);
      g->name_ = "engine" + std::to_string(index);
      best_ms = ms;
      d.keep.clear();
      d.keep.push_back(std::move(cfgs[static_cast<std::size_t>(i)]));
      d.keep.push_back(std::move(*engine));
    } else {
      FT_CUDA_IGNORE(cudnnBackendDestroyDescriptor(plan));
    }
  }
  FT_CUDA_IGNORE(cudaEventDestroy(a));
  FT_CUDA_IGNORE(cudaEventDestroy(b));
  if (!failure.ok()) return failure;
  if (!g->plan_) return Status(Code::kDeclined, "cuDNN graph: no deterministic engine for this convolution");
  g->name_ += "/of" + std::to_string(timed) + "/" + std::to_string(got);
  return g;
}

Status GraphConv::run(const void* x, const void* w, void* y, void* workspace, cudaStream_t stream) const {
  FT_CUDNN_TRY(cudnnSetStream(handle_, stream));
  return execute(handle_, plan_, x, w, y, workspace);
}

}  // namespace facetrace::faces::gpu
