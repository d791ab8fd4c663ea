/// @file
/// The CPU interpreter of a Program (docs/design/faces.md §3): runs the steps in order, each step (or fused group of steps)
/// through the kernels of conv.cpp, depthwise.cpp and eltwise.cpp, with activation buffers from buffers.h. Threads go
/// across output channels / GEMM blocks (batch 1) or batch items (B > 1). Every element is computed by one thread in
/// a fixed order, so results do not depend on the thread count.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <string>
#include <utility>

#include "cpu/buffers.h"
#include "cpu/conv.h"
#include "cpu/cpu_features.h"
#include "cpu/eltwise.h"
#include "cpu/gemm.h"
#include "cpu/ops.h"
#include "cpu/profile.h"
#include "ir/fuse.h"
#include "facetrace/core/parallel.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {
namespace detail {
namespace {

// The activation a Relu/Clip step applies in a conv epilogue (none for any other step).
Activation epilogue_activation(const Step& s) {
  const auto* u = std::get_if<UnaryOp>(&s.op);
  if (u && u->kind == UnaryKind::kRelu) return Activation{Activation::Kind::kRelu, 0.0f, 0.0f};
  if (u && u->kind == UnaryKind::kClip) return Activation{Activation::Kind::kClip, u->lo, u->hi};
  return Activation{};
}

Status non_finite(const Step& s) {
  return invalid_argument("node '" + s.node + "' produced a non-finite value");
}
Status out_of_memory(const Step& s) {
  return Status(Code::kOutOfMemory, "out of memory at node '" + s.node + "'");
}

// The Status of a kernel's result for step s.
Status status_of(KernelResult r, const Step& s) {
  switch (r) {
    case KernelResult::kOk: return {};
    case KernelResult::kNonFinite: return non_finite(s);
    case KernelResult::kOutOfMemory: return out_of_memory(s);
  }
  return internal_error("unknown kernel result at node '" + s.node + "'");
}

// Ops whose output is finite whenever their (finite) inputs are: no separate check needed.
bool keeps_finite(const Op& op) {
  return std::holds_alternative<UnaryOp>(op) || std::holds_alternative<TransposeOp>(op) ||
         std::holds_alternative<MaxPoolOp>(op) || std::holds_alternative<ResizeOp>(op) ||
         std::holds_alternative<GlobalAverageOp>(op) || std::holds_alternative<ConcatOp>(op) ||
         std::holds_alternative<PadOp>(op) || std::holds_alternative<AvgPoolOp>(op) ||
         std::holds_alternative<SoftmaxOp>(op) || std::holds_alternative<ReduceMeanOp>(op);
}

struct Exec {
  const Program& p;
  int threads;

  const float* arg(const Activations& vals, const float* input, const Arg& a) const {
    if (a.kind == Arg::Kind::kConst) return p.consts[static_cast<std::size_t>(a.id)]->data();
    return a.id == kInputValue ? input : vals.data(a.id);
  }

  // Runs one step alone into y (act: the activation of a kConvAct group, applied in the conv's epilogue).
  Status step(const Step& s, const Activations& vals, const float* input, float* y,
              const Activation& act) const {
    const float* x = arg(vals, input, s.args[0]);
    const std::int64_t len = p.lens[static_cast<std::size_t>(s.out)];
    const int t = threads;
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      return status_of(conv(*j, x, y, act, t), s);
    } else if (const auto* u = std::get_if<UnaryOp>(&s.op)) {
      unary(*u, x, y, len, t);
    } else if (const auto* a = std::get_if<ChannelAffineOp>(&s.op)) {
      channel_affine(*a, x, arg(vals, input, s.args[1]), arg(vals, input, s.args[2]), y, t);
    } else if (const auto* pr = std::get_if<ChannelPreluOp>(&s.op)) {
      channel_prelu(*pr, x, arg(vals, input, s.args[1]), y, t);
    } else if (const auto* b = std::get_if<BinaryOp>(&s.op)) {
      binary(*b, x, arg(vals, input, s.args[1]), y);
    } else if (const auto* tr = std::get_if<TransposeOp>(&s.op)) {
      transpose(*tr, x, y);
    } else if (const auto* m = std::get_if<MaxPoolOp>(&s.op)) {
      maxpool(*m, x, y, t);
    } else if (const auto* r = std::get_if<ResizeOp>(&s.op)) {
      resize_nearest(*r, x, y, t);
    } else if (const auto* g = std::get_if<GlobalAverageOp>(&s.op)) {
      global_average(*g, x, y);
    } else if (const auto* gm = std::get_if<GemvOp>(&s.op)) {
      gemv(*gm, x, arg(vals, input, s.args[1]), gm->has_bias ? arg(vals, input, s.args[2]) : nullptr, y, t);
    } else if (const auto* ap = std::get_if<AvgPoolOp>(&s.op)) {
      avgpool(*ap, x, y, t);
    } else if (const auto* sm = std::get_if<SoftmaxOp>(&s.op)) {
      softmax(*sm, x, y, t);
    } else if (const auto* cc = std::get_if<ConcatOp>(&s.op)) {
      std::vector<const float*> parts;
      for (const Arg& a : s.args) parts.push_back(arg(vals, input, a));
      concat(*cc, parts, y);
    } else if (const auto* mm = std::get_if<MatMulOp>(&s.op)) {
      return status_of(matmul(*mm, x, arg(vals, input, s.args[1]), y, t), s);
    } else if (const auto* rm = std::get_if<ReduceMeanOp>(&s.op)) {
      reduce_mean(*rm, x, y, t);
    } else if (const auto* pd = std::get_if<PadOp>(&s.op)) {
      pad(*pd, x, y);
    } else {
      return internal_error("unknown op at node '" + s.node + "'");
    }
    return keeps_finite(s.op) || all_finite(y, len) ? Status{} : non_finite(s);
  }

  // Runs the kConvBand group that starts at step i into y.
  Status band(std::size_t i, const Activations& vals, const float* input, float* y) const {
    const Fusion& f = p.steps[i].fusion;
    auto member = [&](std::int8_t o) { return o < 0 ? nullptr : &p.steps[i + static_cast<std::size_t>(o)]; };
    auto act = [&](std::int8_t o) { return o < 0 ? Activation{} : epilogue_activation(*member(o)); };
    const Step* pre = member(f.pre);
    const Step& pw = *member(f.pw);
    const Step& dw = *member(f.dw);
    const Step* pool = member(f.pool);
    const BandResult r = conv_pw_dw(pre ? &std::get<ConvJob>(pre->op) : nullptr, act(f.pre_act),
                                    std::get<ConvJob>(pw.op), act(f.pw_act), std::get<ConvJob>(dw.op),
                                    act(f.dw_act), pool ? &std::get<MaxPoolOp>(pool->op) : nullptr,
                                    arg(vals, input, p.steps[i].args[0]), y, threads);
    // out of memory first (the other members' results are then incomplete), then in step order
    if (r.pre == KernelResult::kOutOfMemory) return out_of_memory(*pre);
    if (r.pw == KernelResult::kOutOfMemory) return out_of_memory(pw);
    if (r.dw == KernelResult::kOutOfMemory) return out_of_memory(dw);
    if (r.pre != KernelResult::kOk) return non_finite(*pre);
    return r.pw != KernelResult::kOk ? non_finite(pw) : status_of(r.dw, dw);
  }

  // Runs the kResizeBinary group that starts at step i into y.
  Status resize_then_binary(std::size_t i, const Activations& vals, const float* input, float* y) const {
    const Step& rs = p.steps[i];
    const Step& bs = p.steps[i + 1];
    const int side = rs.fusion.side;
    const float* other = arg(vals, input, bs.args[static_cast<std::size_t>(1 - side)]);
    const bool ok = resize_binary(std::get<ResizeOp>(rs.op), std::get<BinaryOp>(bs.op).kind, side,
                                  arg(vals, input, rs.args[0]), other, y, threads);
    return ok ? Status{} : non_finite(bs);
  }

  // Runs the group (or the lone step) that starts at step i into y, as its Step::fusion says.
  Status group(std::size_t i, const Activations& vals, const float* input, float* y) const {
    const Step& s = p.steps[i];
    switch (s.fusion.kind) {
      case FusionKind::kNone: return step(s, vals, input, y, Activation{});
      case FusionKind::kConvAct: return step(s, vals, input, y, epilogue_activation(p.steps[i + 1]));
      case FusionKind::kConvBand: return band(i, vals, input, y);
      case FusionKind::kResizeBinary: return resize_then_binary(i, vals, input, y);
    }
    return internal_error("unknown fusion kind at node '" + s.node + "'");
  }

  Status check_input(std::span<const float> input) const {
    if (static_cast<std::int64_t>(input.size()) != p.lens[0])
      return invalid_argument("input holds " + std::to_string(input.size()) +
                              " values, the program expects " + std::to_string(p.lens[0]));
    std::atomic<bool> input_ok{true};  // (YuNet: 4.9 MB, split across threads like the element-wise ops)
    chunked(p.lens[0], threads, [&](std::int64_t b, std::int64_t e) {
      if (!all_finite(input.data() + b, e - b)) input_ok.store(false, std::memory_order_relaxed);
    });
    return input_ok.load() ? Status{} : invalid_argument("input holds a non-finite value");
  }

  // Runs the program on one input; outs (one vector per program output, already of its length) receive the
  // outputs. Allocates no output memory, so it can run inside a parallel loop.
  Status run(std::span<const float> input, std::vector<std::vector<float>>& outs) const {
    FT_TRY(check_input(input));
    Activations vals(p.lens.size());
    for (std::size_t i = 0; i < p.steps.size();) {
      const auto n = static_cast<std::size_t>(p.steps[i].fusion.steps);
      const Step& last = p.steps[i + n - 1];
      const bool prof = profile_on();
      const auto t_start = prof ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      Buf out = vals.acquire(p.lens[static_cast<std::size_t>(last.out)]);
      if (!out.p) return out_of_memory(last);
      FT_TRY(group(i, vals, input.data(), out.p));
      vals.set(last.out, std::move(out));
      if (prof)
        profile_add(
            p, i, n,
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count());
      for (std::size_t d = 0; d < n; ++d)
        for (auto v : p.free[i + d])
          if (v != kInputValue) vals.release(v);
      i += n;
    }
    for (std::size_t k = 0; k < p.outputs.size(); ++k) {
      const std::int32_t v = p.outputs[k].value;
      const float* d = v == kInputValue ? input.data() : vals.data(v);
      std::copy(d, d + p.lens[static_cast<std::size_t>(v)], outs[k].begin());
    }
    return {};
  }
};

}  // namespace
}  // namespace detail

using detail::Activation;

Expected<std::vector<std::vector<std::vector<float>>>> run_program_cpu(
    const Program& program, std::span<const std::span<const float>> inputs, int threads) {
  using Result = std::vector<std::vector<std::vector<float>>>;
  if (program.lens.empty()) return invalid_argument("empty program");
  for (std::size_t i = 0; i < program.steps.size(); ++i)
    if (!detail::fusion_well_formed(program, i))
      return invalid_argument("step " + std::to_string(i) + " ('" + program.steps[i].node +
                              "'): malformed fusion");
  // The outputs and per-item statuses are allocated here, on the calling thread, before any run: the runs (and
  // the batch loop's tasks) only fill them, and report out of memory for their own buffers as a Status.
  Result result;
  std::vector<Status> st;
  try {
    result.resize(inputs.size());
    for (auto& r : result)
      for (const auto& o : program.outputs)
        r.emplace_back(static_cast<std::size_t>(program.lens[static_cast<std::size_t>(o.value)]));
    st.resize(inputs.size());
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory for the program's outputs");
  }
  if (inputs.size() <= 1) {
    const detail::Exec exec{program, threads};
    for (std::size_t b = 0; b < inputs.size(); ++b) FT_TRY(exec.run(inputs[b], result[b]));
    return result;
  }
  core::parallel_for(static_cast<std::int64_t>(inputs.size()), threads, [&](std::int64_t b) {
    const auto i = static_cast<std::size_t>(b);
    st[i] = detail::Exec{program, 1}.run(inputs[i], result[i]);
  });
  for (std::size_t b = 0; b < st.size(); ++b)
    if (!st[b].ok()) return st[b].with_context("batch item " + std::to_string(b));
  return result;
}

std::string cpu_kernel_info() {
  std::string s = detail::cpu_dispatch_info();
  const std::string dw = "depthwise 3x3 avx2-fma";
  if (const auto at = s.find(dw); at != std::string::npos && detail::cpu_has_avx512f())
    s.insert(at + dw.size(), " (stride-1 row pairs avx512f)");
  return s + ", band scratch " + std::to_string(detail::band_scratch_bytes() >> 10) + "K";
}

Expected<std::vector<float>> conv_cpu(const ConvJob& job, std::span<const float> input, int threads) {
  if (!job.weights || job.groups < 1 || job.cin % job.groups != 0 || job.cout % job.groups != 0)
    return invalid_argument("malformed ConvJob");
  if (static_cast<std::int64_t>(input.size()) != job.cin * job.h * job.w)
    return invalid_argument("conv input holds " + std::to_string(input.size()) + " values, expected " +
                            std::to_string(job.cin * job.h * job.w));
  std::vector<float> y;
  try {
    y.resize(static_cast<std::size_t>(job.cout * job.oh * job.ow));
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory for the conv output");
  }
  // a non-finite output is returned as computed (the reference shows what the conv gives)
  if (detail::conv(job, input.data(), y.data(), Activation{}, threads) == detail::KernelResult::kOutOfMemory)
    return Status(Code::kOutOfMemory, "out of memory in conv");
  return y;
}

}  // namespace facetrace::faces
