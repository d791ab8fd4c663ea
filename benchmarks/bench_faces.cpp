/// @file
/// bench_faces: YuNet 640×640 per image and embedder per face on the CPU, 1 thread and all threads; in CUDA builds
/// also the GPU face program (cuda/faces/gpu_program.h, planned in-process) for YuNet 640 and an IResNet-100 at
/// batch 1, 64 and 256 (--device gpu|all); and the product path (make_gpu_accelerator + Net::attach_checked +
/// Net::run_batch through the isolated device child, host copies included) for YuNet 640, the exported MobileFaceNet
/// of tests/models and an IResNet-100 (--model), each beside the CPU interpreter in the same run; and the share row
/// (--share: a GPU render of the built-in diamond alone and beside a paced YuNet stream, docs/design/faces.md §4).
/// JSON lines on stdout (docs/design/style.md §10, through bench_common.h), a table on stderr.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_common.h"
#include "facetrace/core/env.h"
#include "facetrace/core/image.h"
#include "facetrace/core/logging.h"
#include "facetrace/faces/align.h"
#include "facetrace/faces/detector.h"
#include "facetrace/faces/embedder.h"
#include "facetrace/faces/net.h"

#ifdef FT_HAVE_CUDA_FACES
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <sstream>

#include "faces/gpu_program.h"
#include "faces/yunet_gpu.h"
#endif
#ifdef FT_HAVE_FACES_RUNTIME
#include <atomic>
#include <functional>

#include "facetrace/faces/accelerator.h"
#include "facetrace/faces/testing/counting_accelerator.h"
#ifdef FT_HAVE_TRACER_RENDER
#include "facetrace/tracer/film.h"
#include "facetrace/tracer/renderer.h"
#include "facetrace/tracer/scene.h"
#endif
#endif

namespace {

using namespace facetrace::faces;
namespace bench = facetrace::bench;

/// Times `run` and reports one case: a JSON line with `unit` = runs per second, and a table row. False when a
/// run failed (reported here).
template <class F>
bool measure(const char* cas, int threads, int warmup, int iters, const char* unit,
             const bench::RunContext& context, bench::Table& table, F&& run) {
  auto ms = bench::time_runs(warmup, iters, run);
  if (!ms) {
    std::fprintf(stderr, "bench_faces: %s: a run failed\n", cas);
    return false;
  }
  const bench::Stats s = bench::summarize(*ms);
  const double per_s = 1000.0 / s.median_ms;
  bench::Json j = bench::line("faces", cas);
  j["device"] = "cpu";
  j["precision"] = "fp32";
  j["threads"] = threads;
  bench::add_stats(j, s, iters, warmup);
  j[unit] = bench::rounded(per_s, 2);
  j["dispatches"] = 0;
  j["stalls"] = 0;
  j["peak_in_flight"] = 0;
  bench::emit(std::move(j), context);
  table.add({cas, std::to_string(threads), bench::cell("%.2f", s.median_ms), bench::cell("%.2f", s.p10_ms),
             bench::cell("%.2f", s.p90_ms), bench::cell("%.1f", per_s) + " " + unit});
  return true;
}

#ifdef FT_HAVE_CUDA_FACES
// ---- GPU rows: the GPU face program planned in-process ------------------------------------------------------

// A Program built by hand (the IResNet-100 with random weights), free lists from the last readers.
struct ProgramBuilder {
  Program p;
  std::uint64_t state = 0x9e3779b97f4a7c15ull;

  explicit ProgramBuilder(const Shape& in) {
    p.input_shape = in;
    p.lens.push_back(count(in));
    p.shapes.push_back(in);
  }
  static std::int64_t count(const Shape& s) {
    std::int64_t n = 1;
    for (auto d : s) n *= d;
    return n;
  }
  std::vector<float> random(std::int64_t n, float scale) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      x = scale * (static_cast<float>(state >> 40) / 16777216.0f * 2.0f - 1.0f);
    }
    return v;
  }
  std::int32_t constant(std::vector<float> v) {
    p.consts.push_back(std::make_shared<const std::vector<float>>(std::move(v)));
    return static_cast<std::int32_t>(p.consts.size() - 1);
  }
  std::int32_t step(Op op, std::vector<Arg> args, const Shape& out) {
    const auto v = static_cast<std::int32_t>(p.lens.size());
    p.lens.push_back(count(out));
    p.shapes.push_back(out);
    if (std::holds_alternative<ConvJob>(op)) ++p.conv_count;
    p.steps.push_back(
        Step{std::move(op), std::move(args), v, "n" + std::to_string(p.steps.size()), Fusion{}});
    return v;
  }
  // conv k×k stride s, pad k/2, with a bias (a folded BatchNorm)
  std::int32_t conv(std::int32_t x, std::int64_t cin, std::int64_t cout, std::int64_t k, std::int64_t s,
                    std::int64_t h) {
    ConvJob j;
    j.cin = cin, j.cout = cout, j.h = j.w = h, j.kh = j.kw = k, j.sh = j.sw = s, j.pt = j.pl = k / 2;
    j.oh = j.ow = (h + 2 * (k / 2) - k) / s + 1;
    j.layer = static_cast<std::int32_t>(p.conv_count);
    j.weights = std::make_shared<const std::vector<float>>(
        random(cout * cin * k * k, 1.0f / std::sqrt(static_cast<float>(cin * k * k))));
    j.bias = std::make_shared<const std::vector<float>>(random(cout, 0.1f));
    return step(j, {Arg::value(x)}, {1, cout, j.oh, j.ow});
  }
  std::int32_t affine(std::int32_t x, std::int64_t c, std::int64_t plane) {
    const auto sc = constant(random(c, 0.5f)), sh = constant(random(c, 0.1f));
    for (auto& v : const_cast<std::vector<float>&>(*p.consts[static_cast<std::size_t>(sc)])) v += 1.0f;
    return step(ChannelAffineOp{c, plane}, {Arg::value(x), Arg::constant(sc), Arg::constant(sh)},
                p.shapes[static_cast<std::size_t>(x)]);
  }
  std::int32_t prelu(std::int32_t x, std::int64_t c, std::int64_t plane) {
    return step(ChannelPreluOp{c, plane}, {Arg::value(x), Arg::constant(constant(random(c, 0.25f)))},
                p.shapes[static_cast<std::size_t>(x)]);
  }
  Program finish(std::int32_t out) {
    p.outputs.push_back(ProgramOutput{"embedding", out, p.shapes[static_cast<std::size_t>(out)]});
    std::vector<std::int32_t> last(p.lens.size(), -1);
    for (std::size_t i = 0; i < p.steps.size(); ++i)
      for (const auto& a : p.steps[i].args)
        if (a.kind == Arg::Kind::kValue) last[static_cast<std::size_t>(a.id)] = static_cast<std::int32_t>(i);
    p.free.assign(p.steps.size(), {});
    for (std::size_t v = 0; v < last.size(); ++v)
      if (last[v] >= 0 && static_cast<std::int32_t>(v) != out)
        p.free[static_cast<std::size_t>(last[v])].push_back(static_cast<std::int32_t>(v));
    return std::move(p);
  }
};

// IResNet-100 at 112² (insightface's iresnet100: IBasicBlock = BN → conv3×3 → BN → PReLU → conv3×3(stride) → BN,
// plus the identity or a 1×1 stride-2 downsample; layers [3, 13, 30, 3] at widths 64/128/256/512; BN → FC → BN),
// BatchNorms after a conv folded into its bias, random weights.
Program iresnet100() {
  ProgramBuilder b({1, 3, 112, 112});
  std::int64_t h = 112, c = 64;
  std::int32_t x = b.prelu(b.conv(kInputValue, 3, 64, 3, 1, h), 64, h * h);
  const std::int64_t blocks[4] = {3, 13, 30, 3}, widths[4] = {64, 128, 256, 512};
  for (int l = 0; l < 4; ++l)
    for (std::int64_t k = 0; k < blocks[l]; ++k) {
      const std::int64_t planes = widths[l], s = k == 0 ? 2 : 1, oh = h / s;
      const std::int32_t a = b.affine(x, c, h * h);
      const std::int32_t c1 = b.prelu(b.conv(a, c, planes, 3, 1, h), planes, h * h);
      const std::int32_t c2 = b.conv(c1, planes, planes, 3, s, h);
      const std::int32_t sc = k == 0 ? b.conv(x, c, planes, 1, s, h) : x;
      const std::int64_t n = planes * oh * oh;
      BinaryOp add{BinaryKind::kAdd, {1, planes, oh, oh}, {n, oh * oh, oh, 1}, {n, oh * oh, oh, 1}};
      x = b.step(add, {Arg::value(c2), Arg::value(sc)}, {1, planes, oh, oh});
      c = planes, h = oh;
    }
  const std::int32_t bn = b.affine(x, 512, 49);
  const auto w = b.constant(b.random(512 * 25088, 1.0f / std::sqrt(25088.0f)));
  const auto bias = b.constant(b.random(512, 0.1f));
  const std::int32_t fc = b.step(GemvOp{25088, 512, true, 1.0f, 1.0f, true},
                                 {Arg::value(bn), Arg::constant(w), Arg::constant(bias)}, {1, 512});
  return b.finish(fc);
}

// --layout nchw: every value NCHW in tf32/bf16 too (PlanOptions::nhwc off), the A/B baseline of the channels-last
// form (docs/design/faces.md §8.2); --embedder-only skips the YuNet rows.
bool g_nchw_only = false;
bool g_embedder_only = false;
// --yunet-only: the in-process YuNet rows (network and end to end) only; --no-fuse-heads: PlanOptions::fuse_heads
// off, the A/B baseline of the fused detection heads (docs/design/faces.md §8.1).
bool g_yunet_only = false;
std::vector<int> g_batches;  // --batches: the in-process rows' batches (empty: the defaults)
bool g_no_fuse_heads = false;
// --bands off|timed|always: PlanOptions::bands (default off, the planner's default)
gpu::PlanOptions::Bands g_bands = gpu::PlanOptions::Bands::kOff;
std::string bands_name(gpu::PlanOptions::Bands b) {
  return b == gpu::PlanOptions::Bands::kOff     ? "off"
         : b == gpu::PlanOptions::Bands::kTimed ? "timed"
                                                : "always";
}

std::string prec_name(Precision p) {
  return p == Precision::kFp32 ? "fp32" : p == Precision::kTf32 ? "tf32" : "bf16";
}

std::optional<bench::GpuFacts> cuda_facts() {
  cudaDeviceProp prop{};
  int drv = 0, rt = 0;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return std::nullopt;
  if (cudaDriverGetVersion(&drv) != cudaSuccess || cudaRuntimeGetVersion(&rt) != cudaSuccess)
    return std::nullopt;
  auto ver = [](int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); };
  return bench::GpuFacts{prop.name, ver(drv), ver(rt)};
}

// FACETRACE_BENCH_PROFILE=1: each GPU row runs once more between cudaProfilerStart and cudaProfilerStop, so
// `ncu --profile-from-start off` times the kernels of one replay and none of the plan's candidates.
bool profile_run() {
  const char* e = std::getenv("FACETRACE_BENCH_PROFILE");
  return e != nullptr && e[0] == '1';
}

// "kernel×count, ..." over the conv steps (and the fused groups) of a plan.
std::string kernel_summary(const gpu::GpuProgram& g) {
  std::map<std::string, int> n;
  for (const auto& s : g.steps())
    if (s.kernel.rfind("own:", 0) != 0 || s.kernel.find("depthwise") != std::string::npos ||
        s.kernel.find("direct") != std::string::npos || s.kernel.find("igemm") != std::string::npos)
      ++n[s.kernel];
  std::ostringstream os;
  for (const auto& [k, c] : n) os << (os.tellp() > 0 ? ", " : "") << k << "x" << c;
  return os.str();
}

// The `n` slowest steps of a plan's timed pass, "node kernel us; ...", and the share of time by kernel family.
std::string top_steps(const gpu::GpuProgram& g, std::size_t n) {
  std::vector<const gpu::StepPlan*> s;
  double total = 0;
  std::map<std::string, double> family;
  for (const auto& p : g.steps()) {
    s.push_back(&p);
    total += p.us;
    family[p.kernel.substr(0, p.kernel.find_first_of("+/"))] += p.us;
  }
  std::sort(s.begin(), s.end(), [](auto* a, auto* b) { return a->us > b->us; });
  std::ostringstream os;
  os.precision(4);
  os << "total " << total << " us;";
  for (std::size_t i = 0; i < std::min(n, s.size()); ++i)
    os << " " << s[i]->node << " " << s[i]->kernel << " " << s[i]->us << ";";
  os << " by kernel:";
  for (const auto& [k, us] : family) os << " " << k << " " << us;
  return os.str();
}

// Plans `program` at each batch and precision, times run() with CUDA events, one JSON line + table row each.
bool gpu_rows(const char* name, const char* unit, const Program& program, const std::vector<int>& batches,
              const std::vector<Precision>& precisions, std::uint64_t workspace_mb, int warmup, int iters,
              const bench::RunContext& context, bench::Table& table) {
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return false;
  std::vector<void*> owned;
  auto fail = [&](const std::string& why) {
    std::fprintf(stderr, "bench_faces: %s: %s\n", name, why.c_str());
    for (void* p : owned) cudaFree(p);
    cudaStreamDestroy(stream);
    return false;
  };
  gpu::ConstTable consts;
  for (const auto& c : program.consts) {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<std::size_t>(4, c->size() * 4)) != cudaSuccess) return fail("const upload");
    owned.push_back(d);
    if (cudaMemcpy(d, c->data(), c->size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
      return fail("const upload");
    consts.push_back(static_cast<const float*>(d));
  }
  if (cudaDeviceSynchronize() != cudaSuccess) return fail("const upload");
  for (Precision prec : precisions)
    for (int batch : batches) {
      gpu::PlanOptions o;
      o.batch = batch;
      o.precision = prec;
      o.max_workspace_bytes = workspace_mb << 20;
      o.nhwc = !g_nchw_only;
      o.fuse_heads = !g_no_fuse_heads;
      o.bands = g_bands;
      const auto t0 = std::chrono::steady_clock::now();
      auto g = gpu::GpuProgram::plan(program, consts, o, stream);
      const double plan_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!g) return fail(g.status().to_string());
      void *in = nullptr, *out = nullptr;
      const std::size_t in_floats =
          static_cast<std::size_t>(program.lens[0]) * static_cast<std::size_t>(batch);
      if (cudaMalloc(&in, in_floats * 4) != cudaSuccess ||
          cudaMalloc(&out, (*g)->output_floats() * 4) != cudaSuccess)
        return fail("input/output buffers");
      owned.push_back(in);
      owned.push_back(out);
      if (cudaMemsetAsync(in, 0, in_floats * 4, stream) != cudaSuccess) return fail("memset");
      cudaEvent_t a = nullptr, e = nullptr;
      cudaEventCreate(&a);
      cudaEventCreate(&e);
      std::vector<double> ms;
      bool ok = true;
      for (int r = 0; r < warmup + iters && ok; ++r) {
        ok = cudaEventRecord(a, stream) == cudaSuccess;
        ok = ok && (*g)->run(static_cast<const float*>(in), static_cast<float*>(out)).ok();
        ok = ok && cudaEventRecord(e, stream) == cudaSuccess && cudaEventSynchronize(e) == cudaSuccess;
        float t = 0.0f;
        ok = ok && cudaEventElapsedTime(&t, a, e) == cudaSuccess;
        if (r >= warmup) ms.push_back(t);
      }
      cudaEventDestroy(a);
      cudaEventDestroy(e);
      if (!ok) return fail("a run failed");
      if (profile_run()) {  // one more replay inside the profiler's range (ncu --profile-from-start off)
        ok = cudaProfilerStart() == cudaSuccess &&
             (*g)->run(static_cast<const float*>(in), static_cast<float*>(out)).ok() &&
             cudaStreamSynchronize(stream) == cudaSuccess && cudaProfilerStop() == cudaSuccess;
        if (!ok) return fail("the profiled run failed");
      }
      // tf32/bf16 at batch 64: the outputs against an fp32 plan's on one random input, the smallest cosine over
      // every (output, image)
      double min_cos = -2.0;
      if (prec != Precision::kFp32 && batch == 64) {
        std::vector<float> h(in_floats);
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> d(-1.0f, 1.0f);
        for (auto& v : h) v = d(rng);
        gpu::PlanOptions f = o;
        f.precision = Precision::kFp32;
        auto g32 = gpu::GpuProgram::plan(program, consts, f, stream);
        if (!g32) return fail(g32.status().to_string());
        const std::size_t nout = (*g)->output_floats();
        std::vector<float> a(nout), b(nout);
        void* out32 = nullptr;
        if (cudaMalloc(&out32, nout * 4) != cudaSuccess) return fail("fp32 output buffer");
        ok = cudaMemcpy(in, h.data(), in_floats * 4, cudaMemcpyHostToDevice) == cudaSuccess &&
             (*g)->run(static_cast<const float*>(in), static_cast<float*>(out)).ok() &&
             (*g32)->run(static_cast<const float*>(in), static_cast<float*>(out32)).ok() &&
             cudaStreamSynchronize(stream) == cudaSuccess &&
             cudaMemcpy(a.data(), out, nout * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(b.data(), out32, nout * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
        cudaFree(out32);
        if (!ok) return fail("the fp32 comparison run failed");
        min_cos = 2.0;
        std::size_t at = 0;
        for (const auto& po : program.outputs) {
          const auto len = static_cast<std::size_t>(program.lens[static_cast<std::size_t>(po.value)]);
          for (int img = 0; img < batch; ++img, at += len) {
            double ab = 0.0, aa = 0.0, bb = 0.0;
            for (std::size_t i = at; i < at + len; ++i)
              ab += static_cast<double>(a[i]) * b[i], aa += static_cast<double>(a[i]) * a[i],
                  bb += static_cast<double>(b[i]) * b[i];
            min_cos = std::min(min_cos, aa > 0.0 && bb > 0.0 ? ab / std::sqrt(aa * bb) : 1.0);
          }
        }
      }
      const bench::Stats s = bench::summarize(ms);
      const double per_s = 1000.0 * batch / s.median_ms;
      const std::string cas = std::string(name) + "_b" + std::to_string(batch);
      bench::Json j = bench::line("faces", cas);
      j["device"] = "gpu";
      j["precision"] = prec_name(prec);
      j["layout"] = prec == Precision::kFp32 || g_nchw_only ? "nchw" : "nhwc where cuDNN takes it";
      j["batch"] = batch;
      j["fuse_heads"] = o.fuse_heads;
      j["bands"] = bands_name(g_bands);
      j["steps"] = (*g)->steps().size();
      bench::add_stats(j, s, iters, warmup, true);
      j[unit] = bench::rounded(per_s, 1);
      j["plan_ms"] = bench::rounded(plan_ms, 1);
      j["workspace_cap_mb"] = workspace_mb;
      j["device_mb"] = bench::rounded(static_cast<double>((*g)->device_bytes()) / (1 << 20), 1);
      j["kernels"] = kernel_summary(**g);
      j["top_steps"] = top_steps(**g, 8);
      if (const char* d = std::getenv("FACETRACE_FACES_PLAN_DETAIL"); d && d[0] == '1' && batch == 1)
        for (const auto& st : (*g)->steps())
          std::fprintf(stderr, "plan %s b%d: %s %s %.1f us\n", name, batch, st.node.c_str(),
                       st.kernel.c_str(), st.us);
      if (min_cos > -2.0) j["min_cosine_vs_fp32"] = bench::rounded(min_cos, 6);
      bench::emit(std::move(j), context);
      table.add({cas + " " + prec_name(prec), "gpu", bench::cell("%.3f", s.median_ms),
                 bench::cell("%.3f", s.p10_ms), bench::cell("%.3f", s.p90_ms),
                 bench::cell("%.1f", per_s) + " " + unit});
      g->reset();
      cudaFree(in);
      cudaFree(out);
      owned.resize(owned.size() - 2);
    }
  for (void* p : owned) cudaFree(p);
  cudaStreamDestroy(stream);
  return true;
}

// --precision: fp32, tf32, bf16 or all (the three). False (reported) on anything else.
bool parse_precisions(const std::string& precision, std::vector<Precision>& precs) {
  Precision p{};
  if (precision == "all") {
    precs = {Precision::kFp32, Precision::kTf32, Precision::kBf16};
  } else if (parse_precision(precision, p)) {
    precs = {p};
  } else {
    std::fprintf(stderr, "bench_faces: unknown precision '%s' (fp32, tf32, bf16 or all)\n",
                 precision.c_str());
    return false;
  }
  return true;
}

// YuNet 640 end to end in-process: the benchmark photo's RGB8 frame resident on the device (decoded and uploaded
// once, as the detect op holds frames), then per run the letterbox, the network, decode + NMS and the readback of
// the counts and detections to the host; wall clock per run (steady_clock), median of `iters` after `warmup`.
bool yunet_e2e_rows(const Program& program, const std::string& images, const std::vector<int>& batches,
                    int warmup, int iters, const bench::RunContext& context, bench::Table& table) {
  auto photo = facetrace::core::load_image(images + "obama_portrait_2012.jpg");
  if (!photo) {
    std::fprintf(stderr, "bench_faces: %s\n", photo.status().to_string().c_str());
    return false;
  }
  cudaStream_t stream = nullptr;
  if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return false;
  std::vector<void*> owned;
  auto dev = [&](std::size_t bytes) -> void* {
    void* d = nullptr;
    if (cudaMalloc(&d, std::max<std::size_t>(bytes, 4)) != cudaSuccess) return nullptr;
    owned.push_back(d);
    return d;
  };
  auto done = [&](bool ok, const std::string& why) {
    if (!ok) std::fprintf(stderr, "bench_faces: yunet end to end: %s\n", why.c_str());
    for (void* q : owned) cudaFree(q);
    cudaStreamDestroy(stream);
    return ok;
  };
  gpu::ConstTable consts;
  for (const auto& c : program.consts) {
    void* d = dev(c->size() * 4);
    if (!d || cudaMemcpy(d, c->data(), c->size() * 4, cudaMemcpyHostToDevice) != cudaSuccess)
      return done(false, "const upload");
    consts.push_back(static_cast<const float*>(d));
  }
  auto* rgb = static_cast<std::uint8_t*>(dev(photo->rgb.size()));
  if (!rgb || cudaMemcpy(rgb, photo->rgb.data(), photo->rgb.size(), cudaMemcpyHostToDevice) != cudaSuccess)
    return done(false, "frame upload");
  std::vector<std::string> names;
  std::vector<std::int64_t> lens;
  for (const auto& o : program.outputs) {
    names.push_back(o.name);
    lens.push_back(program.lens[static_cast<std::size_t>(o.value)]);
  }
  constexpr int kN = 640, kCapacity = 200;
  for (int batch : batches) {
    gpu::PlanOptions o;
    o.batch = batch;
    o.fuse_heads = !g_no_fuse_heads;
    o.bands = g_bands;
    auto g = gpu::GpuProgram::plan(program, consts, o, stream);
    if (!g) return done(false, g.status().to_string());
    auto layout = gpu::yunet_layout(names, lens, batch, kN, kN);
    if (!layout) return done(false, layout.status().to_string());
    const std::uint64_t sb = gpu::yunet_post_scratch_bytes(*layout);
    auto* in = static_cast<float*>(dev(static_cast<std::size_t>(batch) * 3 * kN * kN * 4));
    auto* out = static_cast<float*>(dev((*g)->output_floats() * 4));
    auto* geom = static_cast<gpu::ImageGeom*>(dev(sizeof(gpu::ImageGeom) * static_cast<std::size_t>(batch)));
    void* scratch = dev(sb);
    auto* counts = static_cast<int*>(dev(sizeof(int) * static_cast<std::size_t>(batch)));
    auto* recs = static_cast<gpu::GpuDetection*>(
        dev(sizeof(gpu::GpuDetection) * static_cast<std::size_t>(batch) * kCapacity));
    if (!in || !out || !geom || !scratch || !counts || !recs) return done(false, "buffers");
    int* h_counts = nullptr;
    gpu::GpuDetection* h_recs = nullptr;
    if (cudaMallocHost(&h_counts, sizeof(int) * static_cast<std::size_t>(batch)) != cudaSuccess ||
        cudaMallocHost(&h_recs, sizeof(gpu::GpuDetection) * static_cast<std::size_t>(batch) * kCapacity) !=
            cudaSuccess)
      return done(false, "pinned host buffers");
    const std::vector<gpu::FrameDesc> frames(static_cast<std::size_t>(batch),
                                             gpu::FrameDesc{rgb, photo->width, photo->height});
    std::vector<double> ms;
    bool ok = true;
    std::string why;
    for (int r = 0; r < warmup + iters && ok; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      facetrace::Status st = gpu::letterbox_batch(frames.data(), batch, kN, in, geom, nullptr, stream);
      if (st.ok()) st = (*g)->run(in, out);
      if (st.ok())
        st = gpu::yunet_decode_nms(out, *layout, geom, DetectOptions{}, {scratch, sb},
                                   {counts, recs, kCapacity}, stream);
      ok = st.ok() &&
           cudaMemcpyAsync(h_counts, counts, sizeof(int) * static_cast<std::size_t>(batch),
                           cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
           cudaMemcpyAsync(h_recs, recs,
                           sizeof(gpu::GpuDetection) * static_cast<std::size_t>(batch) * kCapacity,
                           cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
           cudaStreamSynchronize(stream) == cudaSuccess;
      if (!st.ok()) why = st.to_string();
      if (r >= warmup)
        ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    int faces = ok ? h_counts[0] : -1;
    cudaFreeHost(h_counts);
    cudaFreeHost(h_recs);
    if (!ok) return done(false, why.empty() ? "a CUDA call failed" : why);
    const bench::Stats s = bench::summarize(ms);
    const double per_s = 1000.0 * batch / s.median_ms;
    const std::string cas = "yunet_640_end_to_end_b" + std::to_string(batch);
    bench::Json j = bench::line("faces", cas);
    j["device"] = "gpu";
    j["precision"] = "fp32";
    j["batch"] = batch;
    j["fuse_heads"] = o.fuse_heads;
    j["bands"] = bands_name(g_bands);
    j["steps"] = (*g)->steps().size();
    j["what"] = "resident RGB8 frame -> letterbox -> network -> decode+NMS -> detections on the host (wall)";
    j["faces_in_image_0"] = faces;
    bench::add_stats(j, s, iters, warmup, true);
    j["images_per_s"] = bench::rounded(per_s, 1);
    bench::emit(std::move(j), context);
    table.add({cas + " fp32", "gpu", bench::cell("%.3f", s.median_ms), bench::cell("%.3f", s.p10_ms),
               bench::cell("%.3f", s.p90_ms), bench::cell("%.1f", per_s) + " images_per_s"});
    g->reset();
  }
  return done(true, "");
}

#ifdef FT_HAVE_FACES_RUNTIME
// ---- Product rows: make_gpu_accelerator + Net::attach_checked + Net::run_batch (the isolated device child) ----

using facetrace::Expected;
using facetrace::Status;

using facetrace::faces::testing::CountingAccelerator;  // counts GPU runs and CPU fallbacks

// One model of the product rows.
struct ProductModel {
  std::string name;  // case prefix
  const char* unit = "images_per_s";
  std::function<Expected<Net>()> make;  // a fresh Net (its own shared state) per device
  std::vector<float> image;             // one input [1, C, H, W]
  Shape shape;
  std::vector<int> gpu_batches, cpu_batches;
};

// Deterministic values in [-1, 1) (an aligned face stand-in for the embedders).
std::vector<float> noise(std::size_t n, std::uint32_t seed) {
  std::vector<float> v(n);
  std::uint32_t x = seed * 2654435761u + 1u;
  for (auto& f : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = static_cast<float>(x >> 8) / 8388608.0f - 1.0f;
  }
  return v;
}

// Times Net::run_batch of `batch` copies of the model's image; one JSON line and table row. `cpu_per_s` > 0 adds
// the ratio to the CPU interpreter's throughput at `cpu_batch`. Returns the throughput, or a negative on failure.
double product_row(const ProductModel& m, const Net& net, const std::string& device, Precision prec,
                   int batch, int warmup, int iters, CountingAccelerator* acc, double attach_ms,
                   double cpu_per_s, int cpu_batch, const bench::RunContext& context, bench::Table& table) {
  std::vector<std::span<const float>> in(static_cast<std::size_t>(batch), std::span<const float>(m.image));
  auto run = [&] {
    auto r = net.run_batch(in, m.shape);
    if (!r) std::fprintf(stderr, "bench_faces: %s: %s\n", m.name.c_str(), r.status().to_string().c_str());
    return r.ok() && static_cast<int>(r->size()) == batch;
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (!run()) return -1.0;
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const std::uint64_t ran0 = acc ? acc->ran.load() : 0, back0 = acc ? acc->fell_back.load() : 0;
  auto ms = bench::time_runs(std::max(0, warmup - 1), iters, run);
  if (!ms) return -1.0;
  const bench::Stats s = bench::summarize(*ms);
  const double per_s = 1000.0 * batch / s.median_ms;
  const std::string cas = m.name + "_product_b" + std::to_string(batch);
  bench::Json j = bench::line("faces", cas);
  j["device"] = device;
  j["path"] = acc ? "make_gpu_accelerator+attach_checked+run_batch" : "cpu interpreter run_batch";
  j["precision"] = acc ? prec_name(prec) : "fp32";
  j["batch"] = batch;
  j["threads"] = acc ? 0 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bench::add_stats(j, s, iters, warmup);
  j[m.unit] = bench::rounded(per_s, 1);
  j["first_run_ms"] = bench::rounded(first_ms, 1);
  if (acc) {
    j["accelerator"] = net.accelerator().value_or("detached: " + net.detach_reason().value_or("?"));
    j["attach_ms"] = bench::rounded(attach_ms, 1);
    j["resident_mb"] = bench::rounded(static_cast<double>(acc->resident_bytes()) / (1 << 20), 1);
    j["gpu_runs"] = acc->ran.load() - ran0;
    j["cpu_fallbacks"] = acc->fell_back.load() - back0;  // non-zero: some timed runs were the CPU's
    if (cpu_per_s > 0) {
      j["cpu_batch"] = cpu_batch;
      j["gpu_over_cpu"] = bench::rounded(per_s / cpu_per_s, 2);
    }
  }
  bench::emit(std::move(j), context);
  std::string thr = bench::cell("%.1f", per_s) + " " + m.unit;
  if (acc && cpu_per_s > 0)
    thr += " (" + bench::cell("%.1f", per_s / cpu_per_s) + "x cpu b" + std::to_string(cpu_batch) + ")";
  table.add({cas + (acc ? " " + prec_name(prec) : ""), device, bench::cell("%.2f", s.median_ms),
             bench::cell("%.2f", s.p10_ms), bench::cell("%.2f", s.p90_ms), thr});
  return per_s;
}

// One model: the CPU interpreter at m.cpu_batches (a few repeats), then the GPU accelerator at m.gpu_batches for
// each precision, each GPU row with its ratio to the CPU row of the same batch (else the CPU's largest batch).
bool product_model(const ProductModel& m, const std::vector<Precision>& precs, bool short_run,
                   const bench::RunContext& context, bench::Table& table) {
  auto cpu = m.make();
  if (!cpu) {
    std::fprintf(stderr, "bench_faces: %s: %s\n", m.name.c_str(), cpu.status().to_string().c_str());
    return false;
  }
  std::map<int, double> cpu_rate;
  for (int b : m.cpu_batches) {
    const double r = product_row(m, *cpu, "cpu", Precision::kFp32, b, 1, short_run ? 2 : 3, nullptr, 0, 0, 0,
                                 context, table);
    if (r < 0) return false;
    cpu_rate[b] = r;
  }
  for (Precision prec : precs) {
    GpuAcceleratorOptions o = GpuAcceleratorOptions::from_env();
    o.precision = prec;
    auto inner = make_gpu_accelerator(o);
    if (!inner) {
      std::fprintf(stderr, "bench_faces: %s: make_gpu_accelerator: %s\n", m.name.c_str(),
                   inner.status().to_string().c_str());
      return false;
    }
    auto acc = std::make_shared<CountingAccelerator>(*inner);
    auto gnet = m.make();
    if (!gnet) return false;
    const auto t0 = std::chrono::steady_clock::now();
    const Status st = gnet->attach_checked(acc);
    const double attach_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) {
      std::fprintf(stderr, "bench_faces: %s %s: attach_checked: %s\n", m.name.c_str(),
                   prec_name(prec).c_str(), st.to_string().c_str());
      return false;
    }
    for (int b : m.gpu_batches) {
      int cb = 0;
      double cr = 0;
      if (auto it = cpu_rate.find(b); it != cpu_rate.end()) {
        cb = b, cr = it->second;
      } else if (!cpu_rate.empty()) {
        cb = cpu_rate.rbegin()->first, cr = cpu_rate.rbegin()->second;
      }
      if (product_row(m, *gnet, "gpu", prec, b, short_run ? 1 : 2, short_run ? 2 : 5, acc.get(), attach_ms,
                      cr, cb, context, table) < 0)
        return false;
    }
  }
  return true;
}

// The letterboxed 640² input of the benchmark photo, or empty (reported).
std::vector<float> yunet_input(const std::string& images) {
  auto photo = facetrace::core::load_image(images + "obama_portrait_2012.jpg");
  if (!photo) {
    std::fprintf(stderr, "bench_faces: %s\n", photo.status().to_string().c_str());
    return {};
  }
  std::vector<float> input(3 * 640 * 640);
  letterbox_bgr(photo->rgb, photo->width, photo->height, 640, input);
  return input;
}

Shape one_image(Shape s) {
  if (!s.empty()) s[0] = 1;
  return s;
}

// The product rows: YuNet 640 (GPU 1/64/256, CPU 1/64), the exported MobileFaceNet of `models` (GPU and CPU
// 1/16/64) and the IResNet-100 of --model (GPU 1/64/256, CPU 1). Exit code for main.
int run_product_rows(const std::string& model, const std::string& images, const std::string& models,
                     const std::vector<Precision>& precs, bool short_run, const bench::RunContext& context,
                     bench::Table& table) {
  auto pick = [&](std::vector<int> full) { return short_run ? std::vector<int>{1} : full; };
  ProductModel y;
  y.name = "yunet_640";
  y.make = [] { return Net::create(builtin_yunet_onnx()); };
  y.image = yunet_input(images);
  if (y.image.empty()) return 1;
  y.shape = {1, 3, 640, 640};
  y.gpu_batches = pick({1, 64, 256});
  y.cpu_batches = pick({1, 64});
  if (!product_model(y, precs, short_run, context, table)) return 1;

  const std::string mfn_path = models + "/mobilefacenet_w05/model.onnx";
  if (std::filesystem::exists(mfn_path)) {
    ProductModel f;
    f.name = "mobilefacenet_w05_112";
    f.unit = "faces_per_s";
    f.make = [mfn_path] { return Net::load(mfn_path); };
    f.shape = {1, 3, 112, 112};
    f.image = noise(3 * 112 * 112, 7);
    f.gpu_batches = pick({1, 16, 64});
    f.cpu_batches = pick({1, 16, 64});
    if (!product_model(f, precs, short_run, context, table)) return 1;
  } else {
    std::fprintf(stderr, "bench_faces: no %s (--models DIR); the MobileFaceNet product rows are skipped\n",
                 mfn_path.c_str());
  }

  if (!model.empty()) {
    auto probe = Net::load(model);
    if (!probe) {
      std::fprintf(stderr, "bench_faces: %s\n", probe.status().to_string().c_str());
      return 1;
    }
    ProductModel e;
    // The case is named by the file ("iresnet100" for make_models.py's DIR/iresnet100/model.onnx).
    const std::filesystem::path mp(model);
    e.name = mp.stem() == "model" && mp.has_parent_path() ? mp.parent_path().filename().string()
                                                          : mp.stem().string();
    e.unit = "faces_per_s";
    e.make = [model] { return Net::load(model); };
    e.shape = one_image(probe->input_shape());
    for (auto& d : e.shape)
      if (d == 0) d = 1;
    std::int64_t n = 1;
    for (auto d : e.shape) n *= d;
    e.image = noise(static_cast<std::size_t>(n), 11);
    e.gpu_batches = pick({1, 64, 256});
    e.cpu_batches = {1};
    if (!product_model(e, precs, short_run, context, table)) return 1;
  } else {
    std::fprintf(stderr,
                 "bench_faces: no --model; the IResNet-100 product rows are skipped (an ONNX file from "
                 "`tests/models/make_models.py --only iresnet100 --out DIR`)\n");
  }
  return 0;
}

#ifdef FT_HAVE_TRACER_RENDER
// ---- The share row: a GPU render alone and beside a paced YuNet stream (docs/design/faces.md §4 "Pace") ----

int run_share_row(const std::string& images, bool short_run, const bench::RunContext& context,
                  bench::Table& table) {
  namespace tr = facetrace::tracer;
  constexpr double kShare = 0.25, kTarget = 0.75;
  tr::Scene scene = tr::builtin_diamond_scene();
  scene.width = scene.height = short_run ? 256 : 1024;
  const std::uint32_t samples = short_run ? 64 : 2048;
  tr::RenderOptions ro;
  ro.device = tr::RenderDevice::kGpu;
  struct Timed {
    double seconds = -1;
    std::uint64_t gpu_samples = 0;
  };
  auto render = [&](std::uint32_t spp) {
    tr::Film film(scene.width, scene.height);
    const auto t0 = std::chrono::steady_clock::now();
    auto r = tr::render(scene, 0, spp, film, ro);
    Timed t;
    if (!r) {
      std::fprintf(stderr, "bench_faces: share: render: %s\n", r.status().to_string().c_str());
      return t;
    }
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    t.gpu_samples = r->gpu_samples;
    return t;
  };
  if (render(16).seconds < 0) return 1;  // the child, the tracer's module and its buffers
  const Timed alone = render(samples);
  if (alone.seconds < 0) return 1;

  auto acc = make_gpu_accelerator();
  if (!acc) {
    std::fprintf(stderr, "bench_faces: share: %s\n", acc.status().to_string().c_str());
    return 1;
  }
  auto net = Net::create(builtin_yunet_onnx());
  if (!net) return 1;
  if (Status st = net->attach_checked(*acc); !st.ok()) {
    std::fprintf(stderr, "bench_faces: share: attach_checked: %s\n", st.to_string().c_str());
    return 1;
  }
  const std::vector<float> image = yunet_input(images);
  if (image.empty()) return 1;
  const int batch = 16;
  std::vector<std::span<const float>> in(batch, std::span<const float>(image));
  if (!net->run_batch(in, {1, 3, 640, 640}).ok()) return 1;  // plan B = 16 before measuring
  set_pace(1, kShare);
  std::atomic<bool> stop{false}, failed{false};
  std::atomic<std::int64_t> streamed{0};
  const auto s0 = std::chrono::steady_clock::now();
  std::thread faces([&] {
    while (!stop.load()) {
      if (!net->run_batch(in, {1, 3, 640, 640}).ok()) {
        failed = true;
        return;
      }
      streamed += batch;
    }
  });
  const Timed shared = render(samples);
  stop = true;
  faces.join();
  const double stream_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
  set_pace(1 << 20, 1.0);
  if (shared.seconds < 0 || failed.load()) return 1;
  const double paths = static_cast<double>(scene.width) * scene.height * samples;
  const double alone_ps = paths / alone.seconds, shared_ps = paths / shared.seconds;
  const double kept = shared_ps / alone_ps;
  bench::Json j = bench::line("faces", "share_render_diamond_vs_yunet_stream");
  j["device"] = "gpu";
  j["precision"] = "fp32";
  j["width"] = scene.width;
  j["height"] = scene.height;
  j["samples"] = samples;
  j["pace_concurrent"] = 1;
  j["pace_share"] = kShare;
  j["face_batch"] = batch;
  j["render_alone_s"] = bench::rounded(alone.seconds, 3);
  j["render_shared_s"] = bench::rounded(shared.seconds, 3);
  j["paths_per_s_alone"] = bench::rounded(alone_ps, 0);
  j["paths_per_s_shared"] = bench::rounded(shared_ps, 0);
  j["kept"] = bench::rounded(kept, 3);
  j["target_kept"] = kTarget;
  j["meets_target"] = kept >= kTarget;
  j["faces_images_per_s"] = bench::rounded(static_cast<double>(streamed.load()) / stream_s, 1);
  j["gpu_samples_alone"] = alone.gpu_samples;  // below `samples`: some requests fell back to the CPU
  j["gpu_samples_shared"] = shared.gpu_samples;
  j["accelerator"] = net->accelerator().value_or("detached");
  bench::emit(std::move(j), context);
  table.add({"share render alone / with yunet b16 @0.25", "gpu", bench::cell("%.1f", alone.seconds * 1000),
             bench::cell("%.1f", shared.seconds * 1000), "",
             bench::cell("%.3f", kept) + " kept (target " + bench::cell("%.2f", kTarget) + "), faces " +
                 bench::cell("%.1f", static_cast<double>(streamed.load()) / stream_s) + " images/s"});
  return 0;
}
#endif  // FT_HAVE_TRACER_RENDER
#endif  // FT_HAVE_FACES_RUNTIME

int run_inprocess_rows(const std::string& model, const std::vector<Precision>& precs,
                       std::uint64_t workspace_mb, bool short_run, const std::string& images,
                       const bench::RunContext& context, bench::Table& table);

// The GPU rows: YuNet 640 and IResNet-100 (or --model) at each batch and precision planned in-process
// (`inprocess`), the product rows (`product`) and the share row (`share`). Exit code for main.
int run_gpu_rows(const std::string& model, const std::string& precision, std::uint64_t workspace_mb,
                 bool short_run, [[maybe_unused]] const std::string& images,
                 [[maybe_unused]] const std::string& models, bool inprocess, bool product, bool share) {
  auto facts = cuda_facts();
  if (!facts) {
    std::fprintf(stderr, "bench_faces: no usable CUDA device\n");
    return 1;
  }
  const bench::RunContext context = bench::run_context(facts);
  bench::Table table({"case", "threads", "median_ms", "p10_ms", "p90_ms", "throughput"});
  std::vector<Precision> precs;
  if (!parse_precisions(precision, precs)) return 2;
  if (inprocess && run_inprocess_rows(model, precs, workspace_mb, short_run, images, context, table) != 0)
    return 1;
#ifdef FT_HAVE_FACES_RUNTIME
  // The product rows run the first precision only (fp32 for `all`): end to end they cost minutes per precision on
  // the device, and the precisions differ only in the kernels, which the in-process rows compare.
  if (product && run_product_rows(model, images, models, {precs.front()}, short_run, context, table) != 0)
    return 1;
#ifdef FT_HAVE_TRACER_RENDER
  if (share && run_share_row(images, short_run, context, table) != 0) return 1;
#else
  if (share) std::fprintf(stderr, "bench_faces: built without the tracer's render loop; no share row\n");
#endif
#else
  if (product || share)
    std::fprintf(stderr, "bench_faces: built without the faces device runtime; no product or share rows\n");
#endif
  table.print();
  return 0;
}

int run_inprocess_rows(const std::string& model, const std::vector<Precision>& precs,
                       std::uint64_t workspace_mb, bool short_run, const std::string& images,
                       const bench::RunContext& context, bench::Table& table) {
  const std::vector<int> batches = !g_batches.empty() ? g_batches
                                   : short_run        ? std::vector<int>{1}
                                                      : std::vector<int>{1, 64, 256};
  const int warmup = short_run ? 1 : 3, iters = short_run ? 3 : 10;
  auto yunet = Net::create(builtin_yunet_onnx());
  if (!yunet) {
    std::fprintf(stderr, "bench_faces: %s\n", yunet.status().to_string().c_str());
    return 1;
  }
  auto yp = yunet->program({1, 3, 640, 640});
  if (!yp) {
    std::fprintf(stderr, "bench_faces: %s\n", yp.status().to_string().c_str());
    return 1;
  }
  if (!g_embedder_only && !gpu_rows("yunet_640_network", "images_per_s", *yp, batches, precs, workspace_mb,
                                    warmup, iters, context, table))
    return 1;
  if (!g_embedder_only && !yunet_e2e_rows(*yp, images, batches, warmup, iters, context, table)) return 1;
  if (g_yunet_only) return 0;
  Program emb;
  if (!model.empty()) {
    auto net = Net::load(model);
    if (!net) {
      std::fprintf(stderr, "bench_faces: %s\n", net.status().to_string().c_str());
      return 1;
    }
    auto ep = net->program(net->input_shape());
    if (!ep) {
      std::fprintf(stderr, "bench_faces: %s\n", ep.status().to_string().c_str());
      return 1;
    }
    emb = std::move(*ep);
  } else {
    emb = iresnet100();
  }
  std::fprintf(stderr, "embedder %s: %.2f G MACs per face\n",
               model.empty() ? "IResNet-100 (synthetic)" : model.c_str(),
               static_cast<double>(emb.macs()) / 1e9);
  if (!gpu_rows(model.empty() ? "iresnet100_112" : "embedder", "faces_per_s", emb, batches, precs,
                workspace_mb, warmup, iters, context, table))
    return 1;
  return 0;
}
#endif

}  // namespace

/// Exit code when the test data is absent (ctest SKIP_RETURN_CODE).
constexpr int kExitSkipped = 77;

int main(int argc, char** argv) {
  facetrace::core::init_logging_from_env();
  CLI::App app{"bench_faces: YuNet and embedder times on the CPU (JSON lines on stdout, table on stderr)"};
  std::string device = "cpu", data = FT_TEST_DATA_DIR, model, precision = "fp32", models_dir;
  bool short_run = false;
  [[maybe_unused]] bool share = false;
  [[maybe_unused]] std::uint64_t workspace_mb = 4096;
#ifdef FT_HAVE_CUDA_FACES
  app.add_option(
      "--device", device,
      "cpu; gpu (the GPU face program in-process, then the product path: make_gpu_accelerator + "
      "attach_checked + run_batch beside the CPU interpreter); all (gpu, the share row, then the CPU "
      "rows); default cpu");
  app.add_option("--precision", precision, "GPU rows: fp32, tf32, bf16 or all (default fp32)");
  std::string layout = "auto";
  app.add_option("--layout", layout,
                 "GPU rows in tf32/bf16: auto (channels-last where cuDNN takes it) or nchw")
      ->check(CLI::IsMember({"auto", "nchw"}));
  app.add_flag("--embedder-only", g_embedder_only,
               "GPU rows: the in-process embedder rows only (no YuNet, product or share rows)");
  app.add_flag(
      "--yunet-only", g_yunet_only,
      "GPU rows: the in-process YuNet rows only (network and end to end; no embedder, product or share "
      "rows)");
  app.add_flag(
      "--no-fuse-heads", g_no_fuse_heads,
      "GPU rows: plan without the fused detection heads (the A/B baseline, docs/design/faces.md §8.1)");
  std::string bands = "off";
  app.add_option(
         "--bands", bands,
         "GPU rows: the band kernel (docs/design/faces.md §8.1): off (default), timed (where faster) or "
         "always")
      ->check(CLI::IsMember({"off", "timed", "always"}));
  app.add_option(
      "--model", model,
      "GPU rows: an ONNX embedder (e.g. IResNet-100) instead of the synthetic IResNet-100 in-process, "
      "and for the product rows");
  app.add_option("--batches", g_batches, "GPU in-process rows: these batches (default 1, 64, 256)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--workspace-mb", workspace_mb,
                 "GPU rows: cuDNN workspace cap per plan in MiB (default 4096)");
  app.add_flag("--share", share,
               "the share row: a GPU render of the built-in diamond alone and beside a YuNet stream paced at "
               "share 0.25 (included in --device all; alone with --device cpu)");
#else
  app.add_option("--device", device, "cpu (the only device of this build; default cpu)");
#endif
  app.add_flag("--short", short_run, "CI smoke run: 1 warm-up, 3 timed runs, no pauses");
  app.add_option("--data", data,
                 "test data folder with images/ (and optionally models/; default the repository's "
                 "tests/data, or $FACETRACE_TEST_DATA when that is not a folder)");
  app.add_option("--models", models_dir,
                 "the exported models folder with mobilefacenet_w05/ (default: tests/models beside --data)");
  CLI11_PARSE(app, argc, argv);
#ifdef FT_HAVE_CUDA_FACES
  g_nchw_only = layout == "nchw";
  g_bands = bands == "timed"    ? gpu::PlanOptions::Bands::kTimed
            : bands == "always" ? gpu::PlanOptions::Bands::kAlways
                                : gpu::PlanOptions::Bands::kOff;
#endif
  if (auto env = facetrace::core::env_string("FACETRACE_TEST_DATA");
      env && (data.empty() || !std::filesystem::is_directory(data)))
    data = *env;
  if (models_dir.empty()) models_dir = (std::filesystem::path(data).parent_path() / "models").string();
  const std::string models = data + "/models/", images = data + "/images/";
#ifdef FT_HAVE_CUDA_FACES
  const bool gpu_wanted = device == "gpu" || device == "all";
  if (device != "cpu" && !gpu_wanted) {
    std::fprintf(stderr, "bench_faces: unknown device '%s' (cpu, gpu or all)\n", device.c_str());
    return 2;
  }
  if (gpu_wanted || share) {
    if (!std::filesystem::is_directory(images)) {
      std::fprintf(stderr, "bench_faces: no photos at %s (pass --data DIR)\n", images.c_str());
      return 1;
    }
    const int rc = run_gpu_rows(model, precision, workspace_mb, short_run, images, models_dir, gpu_wanted,
                                gpu_wanted && !g_embedder_only && !g_yunet_only,
                                !g_embedder_only && !g_yunet_only && (share || device == "all"));
    if (rc != 0 || device != "all") return rc;
  }
#else
  if (device != "cpu") {
    std::fprintf(stderr, "bench_faces: device '%s' is not available (only cpu in this build)\n",
                 device.c_str());
    return 2;
  }
#endif
  if (!std::filesystem::is_directory(images)) {
    std::fprintf(stderr,
                 "bench_faces: no photos at %s (pass --data DIR or set FACETRACE_TEST_DATA); skipped\n",
                 images.c_str());
    return kExitSkipped;
  }
  auto det = Detector::builtin();
  if (!det) {
    std::fprintf(stderr, "bench_faces: %s\n", det.status().to_string().c_str());
    return 1;
  }
  // No embedder ships (models/SOURCES.md): the MobileFaceNet case runs only when DIR/models holds the file.
  const std::string mfn_path = models + "mobilefacenet_foamliu_128d.onnx";
  std::optional<Embedder> emb;
  if (std::filesystem::exists(mfn_path)) {
    auto e = Embedder::load(mfn_path);
    if (!e) {
      std::fprintf(stderr, "bench_faces: %s\n", e.status().to_string().c_str());
      return 1;
    }
    emb = std::move(*e);
  } else {
    std::fprintf(stderr, "bench_faces: no %s; the MobileFaceNet case is skipped\n", mfn_path.c_str());
  }
  auto photo = facetrace::core::load_image(images + "obama_portrait_2012.jpg");
  if (!photo) {
    std::fprintf(stderr, "bench_faces: %s\n", photo.status().to_string().c_str());
    return 1;
  }
  auto faces = det->detect(*photo);
  if (!faces || faces->empty()) {
    std::fprintf(stderr, "bench_faces: no face in the benchmark photo\n");
    return 1;
  }
  auto aligned = align_face(*photo, (*faces)[0].landmarks);
  auto yin = det->net().program({1, 3, 640, 640});
  const int all = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int warmup = short_run ? 1 : 3, iters = short_run ? 3 : 15;
  std::fprintf(stderr, "YuNet %.0f M MACs, MobileFaceNet %.0f M MACs, %d hardware threads\n",
               static_cast<double>(yin->macs()) / 1e6,
               emb ? static_cast<double>(emb->net().program({1, 3, 112, 112})->macs()) / 1e6 : 0.0, all);
  std::fprintf(stderr, "%s\n", cpu_kernel_info().c_str());
  const bench::RunContext context = bench::run_context();  // no runtime linked: "gpu" is null
  bench::Table table({"case", "threads", "median_ms", "p10_ms", "p90_ms", "throughput"});
  std::vector<float> input(3 * 640 * 640);
  letterbox_bgr(photo->rgb, photo->width, photo->height, 640, input);
  std::vector<int> counts{1};
  if (all > 1) counts.push_back(all);
  const auto settle = std::chrono::milliseconds(short_run ? 0 : 300);
  for (int t : counts) {
    Net yunet = det->net();
    yunet.set_threads(t);
    if (!measure("yunet_640_network", t, warmup, iters, "images_per_s", context, table,
                 [&] { return yunet.run(input).ok(); }))
      return 1;
    std::this_thread::sleep_for(settle);
    if (!emb) continue;
    Net mfn = emb->net();
    mfn.set_threads(t);
    auto x = emb->preprocess(*aligned);
    if (!x) {
      std::fprintf(stderr, "bench_faces: %s\n", x.status().to_string().c_str());
      return 1;
    }
    if (!measure("mobilefacenet_112_per_face", t, warmup, iters * 2, "faces_per_s", context, table,
                 [&] { return mfn.run(*x).ok(); }))
      return 1;
    std::this_thread::sleep_for(settle);
  }
  table.print();
  return 0;
}
