/// @file
/// The CPU interpreter of a Program (faces.md §3): runs the steps in order, each step (or fused group of steps)
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
#include "cpu/profile.h"
#include "facetrace/core/parallel.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {
namespace detail {
namespace {

// The activation a Unary step applies, when it can be fused into a conv epilogue.
bool fusable(const Op& op, Activation* act) {
  const auto* u = std::get_if<UnaryOp>(&op);
  if (!u) return false;
  if (u->kind == UnaryKind::kRelu) {
    *act = Activation{Activation::Kind::kRelu, 0.0f, 0.0f};
    return true;
  }
  if (u->kind == UnaryKind::kClip) {
    *act = Activation{Activation::Kind::kClip, u->lo, u->hi};
    return true;
  }
  return false;
}

// Ops whose output is finite whenever their (finite) inputs are: no separate check needed.
bool keeps_finite(const Op& op) {
  return std::holds_alternative<UnaryOp>(op) || std::holds_alternative<TransposeOp>(op) ||
         std::holds_alternative<MaxPoolOp>(op) || std::holds_alternative<ResizeOp>(op) ||
         std::holds_alternative<GlobalAverageOp>(op);
}

struct Exec {
  const Program& p;
  int threads;

  const float* arg(const Activations& vals, const float* input, const Arg& a) const {
    if (a.kind == Arg::Kind::kConst) return p.consts[static_cast<std::size_t>(a.id)]->data();
    return a.id == kInputValue ? input : vals.data(a.id);
  }

  // Runs one step into y. Sets *finite to false when the step's own check found a non-finite value.
  Status step(const Step& s, const Activations& vals, const float* input, float* y, const Activation& act,
              bool* finite) const {
    const float* x = arg(vals, input, s.args[0]);
    const std::int64_t len = p.lens[static_cast<std::size_t>(s.out)];
    const int t = threads;
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      *finite = conv(*j, x, y, act, t);
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
    } else {
      return internal_error("unknown op at node '" + s.node + "'");
    }
    return {};
  }

  Expected<std::vector<std::vector<float>>> run(std::span<const float> input) const {
    if (static_cast<std::int64_t>(input.size()) != p.lens[0])
      return invalid_argument("input holds " + std::to_string(input.size()) + " values, the program expects " +
                              std::to_string(p.lens[0]));
    std::atomic<bool> input_ok{true};  // (YuNet: 4.9 MB, split across threads like the element-wise ops)
    chunked(p.lens[0], threads, [&](std::int64_t b, std::int64_t e) {
      if (!all_finite(input.data() + b, e - b)) input_ok.store(false, std::memory_order_relaxed);
    });
    if (!input_ok.load()) return invalid_argument("input holds a non-finite value");
    Activations vals(p.lens.size());
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const Step& s = p.steps[i];
      // Fused groups: Conv → its only reader, a Relu/Clip (the activation in the conv's epilogue); and a 1×1 Conv
      // [→ Relu/Clip] → its only reader, a depthwise Conv [→ Relu/Clip], run in row bands (conv_pw_dw).
      auto only_reader = [&](std::size_t r, std::int32_t v) {
        const Step& n = p.steps[r];
        const auto& fr = p.free[r];
        return n.args.size() == 1 && n.args[0].kind == Arg::Kind::kValue && n.args[0].id == v &&
               std::find(fr.begin(), fr.end(), v) != fr.end();
      };
      // match a 1×1 Conv at step q [→ Relu/Clip] → depthwise Conv [→ Relu/Clip [→ MaxPool]]; returns the step
      // after the group, or 0 when no depthwise conv follows
      Activation act, dact, preact;
      const Step* dws = nullptr;
      const Step* pws = nullptr;
      const Step* pres = nullptr;  // a dense conv feeding the 1×1 conv, computed per band too
      const MaxPoolOp* mpool = nullptr;
      auto match_pw_dw = [&](std::size_t q) -> std::size_t {
        const auto* cj = std::get_if<ConvJob>(&p.steps[q].op);
        if (!cj || !is_pointwise(*cj)) return 0;
        std::size_t k = q + 1;
        Activation pa;
        if (k < p.steps.size() && fusable(p.steps[k].op, &pa) && only_reader(k, p.steps[q].out))
          ++k;
        else
          pa = Activation{};
        if (k >= p.steps.size()) return 0;
        const auto* dj = std::get_if<ConvJob>(&p.steps[k].op);
        if (!dj || !is_depthwise(*dj) || dj->cin != cj->cout || dj->h != cj->oh || dj->w != cj->ow ||
            !only_reader(k, p.steps[k - 1].out))
          return 0;
        act = pa;
        pws = &p.steps[q];
        dws = &p.steps[k];
        ++k;
        if (k < p.steps.size() && fusable(p.steps[k].op, &dact) && only_reader(k, dws->out)) {
          ++k;
          // a non-overlapping MaxPool after a Relu (values ≥ +0, so the max is order-free) pools each band
          const auto* mp = k < p.steps.size() ? std::get_if<MaxPoolOp>(&p.steps[k].op) : nullptr;
          if (mp && dact.kind == Activation::Kind::kRelu && mp->kh == mp->sh && mp->kw == mp->sw &&
              mp->channels == dj->cout && mp->h == dj->oh && mp->w == dj->ow && only_reader(k, p.steps[k - 1].out)) {
            mpool = mp;
            ++k;
          }
        } else {
          dact = Activation{};
        }
        return k;
      };
      std::size_t nx = i + 1;
      if (const auto* cj = std::get_if<ConvJob>(&s.op)) {
        std::size_t g = match_pw_dw(i);
        if (!g && cj->groups == 1 && !is_pointwise(*cj)) {  // dense conv [→ act] → 1×1 → depthwise …
          std::size_t q = i + 1;
          Activation a0;
          if (q < p.steps.size() && fusable(p.steps[q].op, &a0) && only_reader(q, s.out))
            ++q;
          else
            a0 = Activation{};
          const auto* pj = q < p.steps.size() ? std::get_if<ConvJob>(&p.steps[q].op) : nullptr;
          if (pj && pj->cin == cj->cout && pj->h == cj->oh && pj->w == cj->ow && only_reader(q, p.steps[q - 1].out)) {
            g = match_pw_dw(q);
            if (g) {
              pres = &s;
              preact = a0;
            }
          }
        }
        if (g) {
          nx = g;
        } else {
          if (nx < p.steps.size() && fusable(p.steps[nx].op, &act) && only_reader(nx, s.out))
            ++nx;
          else
            act = Activation{};
        }
      }
      // a nearest Resize whose only reader is the next step, an element-wise Binary without broadcasting
      const BinaryOp* rbin = nullptr;
      int rside = -1;
      if (const auto* rs = std::get_if<ResizeOp>(&s.op); rs && nx < p.steps.size()) {
        const Step& n = p.steps[nx];
        const auto* bo = std::get_if<BinaryOp>(&n.op);
        const auto& fr = p.free[nx];
        if (bo && n.args.size() == 2 && std::find(fr.begin(), fr.end(), s.out) != fr.end()) {
          const std::int64_t oh = rs->h * rs->sy, ow = rs->w * rs->sx;
          auto dense = [&](const std::array<std::int64_t, 4>& st) {
            return st[1] == oh * ow && st[2] == ow && st[3] == 1;
          };
          int side = -1;
          for (int q = 0; q < 2; ++q)
            if (n.args[static_cast<std::size_t>(q)].kind == Arg::Kind::kValue &&
                n.args[static_cast<std::size_t>(q)].id == s.out)
              side = side == -1 ? q : 2;
          if ((side == 0 || side == 1) && bo->dims[0] == 1 && bo->dims[1] == rs->channels && bo->dims[2] == oh &&
              bo->dims[3] == ow && dense(bo->a_strides) && dense(bo->b_strides)) {
            rbin = bo;
            rside = side;
            ++nx;
          }
        }
      }
      const std::size_t steps_done = nx - i;
      const bool prof = profile_on();
      const auto t_start = prof ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
      const Step& last = p.steps[nx - 1];
      const auto len = p.lens[static_cast<std::size_t>(last.out)];
      Buf out = vals.acquire(len);
      if (dws) {
        bool pre_ok = true, pw_ok = true, dw_ok = true;
        conv_pw_dw(pres ? &std::get<ConvJob>(pres->op) : nullptr, preact, std::get<ConvJob>(pws->op), act,
                   std::get<ConvJob>(dws->op), dact, mpool, arg(vals, input.data(), s.args[0]), out.p, threads,
                   &pre_ok, &pw_ok, &dw_ok);
        if (!pre_ok || !pw_ok || !dw_ok) {
          const std::string& bad = !pre_ok ? pres->node : !pw_ok ? pws->node : dws->node;
          return invalid_argument("node '" + bad + "' produced a non-finite value");
        }
      } else if (rbin) {
        const Step& bs = p.steps[nx - 1];
        if (!resize_binary(std::get<ResizeOp>(s.op), rbin->kind, rside, arg(vals, input.data(), s.args[0]),
                           arg(vals, input.data(), bs.args[static_cast<std::size_t>(1 - rside)]), out.p, threads)) {
          return invalid_argument("node '" + bs.node + "' produced a non-finite value");
        }
      } else {
        bool finite = true;
        FT_TRY(step(s, vals, input.data(), out.p, act, &finite));
        if (!finite ||
            (!std::holds_alternative<ConvJob>(s.op) && !keeps_finite(s.op) && !all_finite(out.p, len))) {
          return invalid_argument("node '" + s.node + "' produced a non-finite value");
        }
      }
      vals.set(last.out, std::move(out));
      if (prof)
        profile_add(p, i, steps_done,
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count());
      for (std::size_t d = 0; d < steps_done; ++d)
        for (auto v : p.free[i + d])
          if (v != kInputValue) vals.release(v);
      i += steps_done - 1;
    }
    std::vector<std::vector<float>> outs;
    outs.reserve(p.outputs.size());
    for (const auto& o : p.outputs) {
      if (o.value == kInputValue) {
        outs.emplace_back(input.begin(), input.end());
      } else {
        const float* d = vals.data(o.value);
        outs.emplace_back(d, d + p.lens[static_cast<std::size_t>(o.value)]);
      }
    }
    return outs;
  }
};

}  // namespace
}  // namespace detail

using detail::Activation;

Expected<std::vector<std::vector<std::vector<float>>>> run_program_cpu(const Program& program,
                                                                      std::span<const std::span<const float>> inputs,
                                                                      int threads) {
  using Result = std::vector<std::vector<std::vector<float>>>;
  if (program.lens.empty()) return invalid_argument("empty program");
  try {
    Result result(inputs.size());
    if (inputs.size() <= 1) {
      for (std::size_t b = 0; b < inputs.size(); ++b) {
        auto r = detail::Exec{program, threads}.run(inputs[b]);
        if (!r) return r.status();
        result[b] = std::move(*r);
      }
      return result;
    }
    std::vector<Status> st(inputs.size());
    const bool ok = core::parallel_for(static_cast<std::int64_t>(inputs.size()), threads, [&](std::int64_t b) {
      auto r = detail::Exec{program, 1}.run(inputs[static_cast<std::size_t>(b)]);
      if (!r)
        st[static_cast<std::size_t>(b)] = r.status().with_context("batch item " + std::to_string(b));
      else
        result[static_cast<std::size_t>(b)] = std::move(*r);
    });
    if (!ok) return Status(Code::kOutOfMemory, "out of memory running the program");
    for (auto& s : st)
      if (!s.ok()) return s;
    return result;
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory running the program");
  }
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
  try {
    std::vector<float> y(static_cast<std::size_t>(job.cout * job.oh * job.ow));
    detail::conv(job, input.data(), y.data(), Activation{}, threads);
    return y;
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory in conv");
  }
}

}  // namespace facetrace::faces
