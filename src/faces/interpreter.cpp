/// @file
/// The CPU interpreter of a Program (faces.md §3): dense/grouped convs through im2col + blocked SGEMM, depthwise
/// convs through direct loops, plain loops for the other ops. Threads go across output channels / GEMM blocks
/// (batch 1) or batch items (B > 1). Every element is computed by one thread in a fixed order, so results do not
/// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>

#include "faces/gemm.h"
#include "faces/thread_pool.h"
#include "facetrace/faces/net.h"

namespace facetrace::faces {
namespace {

using detail::parallel_for;

// True when every value is finite (exponent bits not all ones); integer ops so it vectorises.
bool all_finite(const float* x, std::int64_t n) {
  std::uint32_t bad = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, x + i, 4);
    bad |= static_cast<std::uint32_t>((b & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

// Direct convolution for one-input-channel groups (depthwise and channel multipliers): output channel co reads
// input channel co / (cout/groups). Accumulates bias, then taps in (ky, kx) order, row by row.
__attribute__((target_clones("avx2", "default"))) void conv_direct_channel(const ConvJob& j,
                                                                           const float* __restrict x,
                                                                           const float* __restrict wt, float bias,
                                                                           float* __restrict y) {
  for (std::int64_t oy = 0; oy < j.oh; ++oy) {
    float* __restrict row = y + oy * j.ow;
    for (std::int64_t ox = 0; ox < j.ow; ++ox) row[ox] = bias;
    for (std::int64_t ky = 0; ky < j.kh; ++ky) {
      const std::int64_t iy = oy * j.sh + ky - j.pt;
      if (iy < 0 || iy >= j.h) continue;
      const float* in = x + iy * j.w;
      for (std::int64_t kx = 0; kx < j.kw; ++kx) {
        const float wv = wt[ky * j.kw + kx];
        // ox range with 0 ≤ ox·sw + kx − pl < w
        const std::int64_t off = kx - j.pl;
        std::int64_t lo = off >= 0 ? 0 : (-off + j.sw - 1) / j.sw;
        std::int64_t hi = (j.w - 1 - off) < 0 ? 0 : (j.w - 1 - off) / j.sw + 1;
        hi = std::min(hi, j.ow);
        if (j.sw == 1) {
          const float* __restrict src = in + off;
          for (std::int64_t ox = lo; ox < hi; ++ox) row[ox] += wv * src[ox];
        } else {
          for (std::int64_t ox = lo; ox < hi; ++ox) row[ox] += wv * in[ox * j.sw + off];
        }
      }
    }
  }
}

void conv(const ConvJob& j, const float* x, float* y, int threads) {
  const std::int64_t cin_g = j.cin / j.groups, cout_g = j.cout / j.groups;
  const std::int64_t plane_in = j.h * j.w, plane_out = j.oh * j.ow;
  const float* w = j.weights->data();
  const float* b = j.bias ? j.bias->data() : nullptr;
  if (cin_g == 1) {
    const std::int64_t taps = j.kh * j.kw;
    if (!parallel_for(j.cout, threads, [&](std::int64_t co) {
          conv_direct_channel(j, x + (co / cout_g) * plane_in, w + co * taps, b ? b[co] : 0.0f, y + co * plane_out);
        }))
      throw std::bad_alloc();
    return;
  }
  for (std::int64_t co = 0; co < j.cout; ++co) std::fill_n(y + co * plane_out, plane_out, b ? b[co] : 0.0f);
  const std::int64_t k = cin_g * j.kh * j.kw;
  const bool pointwise = j.kh == 1 && j.kw == 1 && j.sh == 1 && j.sw == 1 && j.pt == 0 && j.pl == 0 &&
                         j.oh == j.h && j.ow == j.w;
  for (std::int64_t g = 0; g < j.groups; ++g) {
    const float* xg = x + g * cin_g * plane_in;
    const float* wg = w + g * cout_g * k;
    float* yg = y + g * cout_g * plane_out;
    if (pointwise) {
      detail::sgemm_acc(cout_g, plane_out, k, wg, k, detail::MatrixB(xg, plane_out, plane_in), yg, plane_out, threads);
    } else {
      detail::sgemm_acc(cout_g, plane_out, k, wg, k,
                        detail::Im2colB(xg, j.h, j.w, j.kh, j.kw, j.sh, j.sw, j.pt, j.pl, j.oh, j.ow), yg, plane_out,
                        threads);
    }
  }
}

__attribute__((target_clones("avx2", "default"))) void binary(const BinaryOp& op, const float* a, const float* b,
                                                              float* y) {
  const auto& d = op.dims;
  const std::int64_t as3 = op.a_strides[3], bs3 = op.b_strides[3];
  for (std::int64_t i0 = 0; i0 < d[0]; ++i0)
    for (std::int64_t i1 = 0; i1 < d[1]; ++i1)
      for (std::int64_t i2 = 0; i2 < d[2]; ++i2) {
        const float* pa = a + i0 * op.a_strides[0] + i1 * op.a_strides[1] + i2 * op.a_strides[2];
        const float* pb = b + i0 * op.b_strides[0] + i1 * op.b_strides[1] + i2 * op.b_strides[2];
        float* py = y + ((i0 * d[1] + i1) * d[2] + i2) * d[3];
        const std::int64_t n = d[3];
        switch (op.kind) {
          case BinaryKind::kAdd:
            if (as3 == 1 && bs3 == 1) {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
            } else {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] + pb[i * bs3];
            }
            break;
          case BinaryKind::kSub:
            if (as3 == 1 && bs3 == 1) {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] - pb[i];
            } else {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] - pb[i * bs3];
            }
            break;
          case BinaryKind::kMul:
            if (as3 == 1 && bs3 == 1) {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i];
            } else {
              for (std::int64_t i = 0; i < n; ++i) py[i] = pa[i * as3] * pb[i * bs3];
            }
            break;
        }
      }
}

void transpose(const TransposeOp& op, const float* x, float* y) {
  const std::size_t r = op.dims.size();
  if (r == 0) {
    y[0] = x[0];
    return;
  }
  std::vector<std::int64_t> idx(r, 0);
  const std::int64_t inner = op.dims[r - 1], inner_stride = op.strides[r - 1];
  std::int64_t outer = 1;
  for (std::size_t i = 0; i + 1 < r; ++i) outer *= op.dims[i];
  for (std::int64_t o = 0; o < outer; ++o) {
    std::int64_t base = 0;
    for (std::size_t i = 0; i + 1 < r; ++i) base += idx[i] * op.strides[i];
    for (std::int64_t i = 0; i < inner; ++i) y[i] = x[base + i * inner_stride];
    y += inner;
    for (std::size_t i = r - 1; i-- > 0;) {
      if (++idx[i] < op.dims[i]) break;
      idx[i] = 0;
    }
  }
}

void gemv(const GemvOp& op, const float* x, const float* w, const float* bias, float* y, int threads) {
  if (op.trans_b) {  // W [n,k]: a dot product per output, threads over outputs
    const std::int64_t chunk = 16;
    parallel_for((op.n + chunk - 1) / chunk, threads, [&](std::int64_t c) {
      for (std::int64_t j = c * chunk; j < std::min(op.n, (c + 1) * chunk); ++j) {
        const float* row = w + j * op.k;
        double s = 0.0;
        for (std::int64_t i = 0; i < op.k; ++i) s += static_cast<double>(x[i]) * row[i];
        y[j] = op.alpha * static_cast<float>(s) + (bias ? op.beta * bias[j] : 0.0f);
      }
    });
  } else {  // W [k,n]: rows accumulated in ascending i
    std::vector<double> acc(static_cast<std::size_t>(op.n), 0.0);
    for (std::int64_t i = 0; i < op.k; ++i) {
      const double xi = x[i];
      const float* row = w + i * op.n;
      for (std::int64_t j = 0; j < op.n; ++j) acc[static_cast<std::size_t>(j)] += xi * row[j];
    }
    for (std::int64_t j = 0; j < op.n; ++j)
      y[j] = op.alpha * static_cast<float>(acc[static_cast<std::size_t>(j)]) + (bias ? op.beta * bias[j] : 0.0f);
  }
}

struct Exec {
  const Program& p;
  int threads;

  const float* arg(const std::vector<std::vector<float>>& vals, const float* input, const Arg& a) const {
    if (a.kind == Arg::Kind::kConst) return p.consts[static_cast<std::size_t>(a.id)]->data();
    return a.id == kInputValue ? input : vals[static_cast<std::size_t>(a.id)].data();
  }

  Status step(const Step& s, const std::vector<std::vector<float>>& vals, const float* input, float* y) const {
    const float* x = arg(vals, input, s.args[0]);
    const std::int64_t len = p.lens[static_cast<std::size_t>(s.out)];
    if (const auto* j = std::get_if<ConvJob>(&s.op)) {
      conv(*j, x, y, threads);
    } else if (const auto* u = std::get_if<UnaryOp>(&s.op)) {
      switch (u->kind) {
        case UnaryKind::kRelu:
          for (std::int64_t i = 0; i < len; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
          break;
        case UnaryKind::kSigmoid:
          for (std::int64_t i = 0; i < len; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
          break;
        case UnaryKind::kClip:
          for (std::int64_t i = 0; i < len; ++i) y[i] = std::min(std::max(x[i], u->lo), u->hi);
          break;
      }
    } else if (const auto* a = std::get_if<ChannelAffineOp>(&s.op)) {
      const float* sc = arg(vals, input, s.args[1]);
      const float* sh = arg(vals, input, s.args[2]);
      for (std::int64_t c = 0; c < a->channels; ++c)
        for (std::int64_t i = 0; i < a->plane; ++i) y[c * a->plane + i] = x[c * a->plane + i] * sc[c] + sh[c];
    } else if (const auto* pr = std::get_if<ChannelPreluOp>(&s.op)) {
      const float* sl = arg(vals, input, s.args[1]);
      for (std::int64_t c = 0; c < pr->channels; ++c)
        for (std::int64_t i = 0; i < pr->plane; ++i) {
          const float v = x[c * pr->plane + i];
          y[c * pr->plane + i] = v >= 0.0f ? v : sl[c] * v;
        }
    } else if (const auto* b = std::get_if<BinaryOp>(&s.op)) {
      binary(*b, x, arg(vals, input, s.args[1]), y);
    } else if (const auto* t = std::get_if<TransposeOp>(&s.op)) {
      transpose(*t, x, y);
    } else if (const auto* m = std::get_if<MaxPoolOp>(&s.op)) {
      for (std::int64_t c = 0; c < m->channels; ++c) {
        const float* in = x + c * m->h * m->w;
        float* out = y + c * m->oh * m->ow;
        for (std::int64_t oy = 0; oy < m->oh; ++oy)
          for (std::int64_t ox = 0; ox < m->ow; ++ox) {
            float best = in[(oy * m->sh) * m->w + ox * m->sw];
            for (std::int64_t ky = 0; ky < m->kh; ++ky)
              for (std::int64_t kx = 0; kx < m->kw; ++kx)
                best = std::max(best, in[(oy * m->sh + ky) * m->w + ox * m->sw + kx]);
            out[oy * m->ow + ox] = best;
          }
      }
    } else if (const auto* r = std::get_if<ResizeOp>(&s.op)) {
      const std::int64_t ow = r->w * r->sx;
      for (std::int64_t c = 0; c < r->channels; ++c)
        for (std::int64_t oy = 0; oy < r->h * r->sy; ++oy) {
          const float* in = x + (c * r->h + oy / r->sy) * r->w;
          float* out = y + (c * r->h * r->sy + oy) * ow;
          for (std::int64_t ox = 0; ox < ow; ++ox) out[ox] = in[ox / r->sx];
        }
    } else if (const auto* g = std::get_if<GlobalAverageOp>(&s.op)) {
      for (std::int64_t c = 0; c < g->channels; ++c) {
        double sum = 0.0;
        for (std::int64_t i = 0; i < g->plane; ++i) sum += x[c * g->plane + i];
        y[c] = static_cast<float>(sum / static_cast<double>(g->plane));
      }
    } else if (const auto* gm = std::get_if<GemvOp>(&s.op)) {
      gemv(*gm, x, arg(vals, input, s.args[1]), gm->has_bias ? arg(vals, input, s.args[2]) : nullptr, y, threads);
    } else {
      return internal_error("unknown op at node '" + s.node + "'");
    }
    return {};
  }

  Expected<std::vector<std::vector<float>>> run(std::span<const float> input) const {
    if (static_cast<std::int64_t>(input.size()) != p.lens[0])
      return invalid_argument("input holds " + std::to_string(input.size()) + " values, the program expects " +
                              std::to_string(p.lens[0]));
    if (!all_finite(input.data(), p.lens[0])) return invalid_argument("input holds a non-finite value");
    std::vector<std::vector<float>> vals(p.lens.size());
    std::vector<std::vector<float>> pool;  // released buffers, reused best-fit within [len, 2·len]
    for (std::size_t i = 0; i < p.steps.size(); ++i) {
      const Step& s = p.steps[i];
      const auto len = static_cast<std::size_t>(p.lens[static_cast<std::size_t>(s.out)]);
      std::vector<float> out;
      std::size_t best = pool.size();
      for (std::size_t q = 0; q < pool.size(); ++q)
        if (pool[q].capacity() >= len && pool[q].capacity() <= 2 * len &&
            (best == pool.size() || pool[q].capacity() < pool[best].capacity()))
          best = q;
      if (best < pool.size()) {
        out = std::move(pool[best]);
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
      }
      out.resize(len);
      FT_TRY(step(s, vals, input.data(), out.data()));
      if (!all_finite(out.data(), static_cast<std::int64_t>(len)))
        return invalid_argument("node '" + s.node + "' produced a non-finite value");
      vals[static_cast<std::size_t>(s.out)] = std::move(out);
      for (auto v : p.free[i])
        if (v != kInputValue) pool.push_back(std::move(vals[static_cast<std::size_t>(v)]));
    }
    std::vector<std::vector<float>> outs;
    outs.reserve(p.outputs.size());
    for (const auto& o : p.outputs) {
      if (o.value == kInputValue)
        outs.emplace_back(input.begin(), input.end());
      else
        outs.push_back(vals[static_cast<std::size_t>(o.value)]);
    }
    return outs;
  }
};

}  // namespace

Expected<std::vector<std::vector<std::vector<float>>>> run_program_cpu(const Program& program,
                                                                      std::span<const std::span<const float>> inputs,
                                                                      int threads) {
  using Result = std::vector<std::vector<std::vector<float>>>;
  if (program.lens.empty()) return invalid_argument("empty program");
  try {
    Result result(inputs.size());
    if (inputs.size() <= 1) {
      for (std::size_t b = 0; b < inputs.size(); ++b) {
        auto r = Exec{program, threads}.run(inputs[b]);
        if (!r) return r.status();
        result[b] = std::move(*r);
      }
      return result;
    }
    std::vector<Status> st(inputs.size());
    const bool ok = parallel_for(static_cast<std::int64_t>(inputs.size()), threads, [&](std::int64_t b) {
      auto r = Exec{program, 1}.run(inputs[static_cast<std::size_t>(b)]);
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

Expected<std::vector<float>> conv_cpu(const ConvJob& job, std::span<const float> input, int threads) {
  if (!job.weights || job.groups < 1 || job.cin % job.groups != 0 || job.cout % job.groups != 0)
    return invalid_argument("malformed ConvJob");
  if (static_cast<std::int64_t>(input.size()) != job.cin * job.h * job.w)
    return invalid_argument("conv input holds " + std::to_string(input.size()) + " values, expected " +
                            std::to_string(job.cin * job.h * job.w));
  try {
    std::vector<float> y(static_cast<std::size_t>(job.cout * job.oh * job.ow));
    conv(job, input.data(), y.data(), threads);
    return y;
  } catch (const std::bad_alloc&) {
    return Status(Code::kOutOfMemory, "out of memory in conv");
  }
}

}  // namespace facetrace::faces
