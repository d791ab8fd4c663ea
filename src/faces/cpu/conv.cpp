/// @file
/// Conv kernels (docs/design/faces.md §3): dense and grouped convs as im2col + blocked SGEMM with the activation in the epilogue,
/// one-input-channel groups through dw_channel, and the row-band form of a 1×1 conv feeding a depthwise conv (its
/// output kept in L2-sized per-thread bands). Threads go across output channels or GEMM blocks; every element is
/// computed by one thread in a fixed order, so results do not depend on the thread count.
#include "cpu/conv.h"

#include <algorithm>
#include <cstring>

#include "cpu/buffers.h"
#include "cpu/cpu_features.h"
#include "cpu/depthwise.h"
#include "cpu/eltwise.h"
#include "cpu/ops.h"
#include "facetrace/core/parallel.h"

namespace facetrace::faces::detail {
namespace {

using core::parallel_for;

// B columns [off, off + n) of another source.
class OffsetB final : public detail::BSource {
 public:
  OffsetB(const detail::BSource& b, std::int64_t off) : b_(b), off_(off) {}
  void pack(std::int64_t k0, std::int64_t kc, std::int64_t n0, std::int64_t nc, float* dst,
            int nr) const override {
    b_.pack(k0, kc, n0 + off_, nc, dst, nr);
  }

 private:
  const detail::BSource& b_;
  std::int64_t off_;
};

}  // namespace

// Threads worth waking for `macs` multiply-adds: at least ~0.5 M per thread, so small layers (MobileFaceNet's
// 14×14 and 7×7 stages) do not pay a wake-up per op for microseconds of work. The split never changes results.
int threads_for(std::int64_t macs, int threads) {
  constexpr std::int64_t kMacsPerThread = std::int64_t{1} << 19;
  const int t = threads <= 0 ? core::hardware_threads() : threads;
  return static_cast<int>(std::clamp<std::int64_t>(macs / kMacsPerThread, 1, t));
}

KernelResult conv(const ConvJob& j, const float* x, float* y, const Activation& act, int threads) {
  threads = threads_for(j.macs(), threads);
  if (j.dh != 1 || j.dw != 1) return conv_direct(j, x, y, act, threads);  // dilated (cpu/ops.cpp)
  const std::int64_t cin_g = j.cin / j.groups, cout_g = j.cout / j.groups;
  const std::int64_t plane_in = j.h * j.w, plane_out = j.oh * j.ow;
  const float* w = j.weights->data();
  const float* b = j.bias ? j.bias->data() : nullptr;
  if (cin_g == 1) {
    const std::int64_t taps = j.kh * j.kw;
    ResultFlags result;
    parallel_for(j.cout, threads, [&](std::int64_t co) {
      if (!dw_channel(j, x + (co / cout_g) * plane_in, w + co * taps, b ? b[co] : 0.0f, y + co * plane_out,
                      act))
        result.add(KernelResult::kNonFinite);
    });
    return result.get();
  }
  const std::int64_t k = cin_g * j.kh * j.kw;
  const bool pointwise = j.kh == 1 && j.kw == 1 && j.sh == 1 && j.sw == 1 && j.pt == 0 && j.pl == 0 &&
                         j.oh == j.h && j.ow == j.w;
  KernelResult result = KernelResult::kOk;
  for (std::int64_t g = 0; g < j.groups; ++g) {
    const float* xg = x + g * cin_g * plane_in;
    const float* wg = w + g * cout_g * k;
    const float* bg = b ? b + g * cout_g : nullptr;
    float* yg = y + g * cout_g * plane_out;
    if (pointwise) {
      result = worst(result, sgemm_bias_act(cout_g, plane_out, k, wg, k, bg, MatrixB(xg, plane_out, plane_in),
                                            yg, plane_out, act, threads));
    } else {
      result =
          worst(result, sgemm_bias_act(cout_g, plane_out, k, wg, k, bg,
                                       Im2colB(xg, j.h, j.w, j.kh, j.kw, j.sh, j.sw, j.pt, j.pl, j.oh, j.ow),
                                       yg, plane_out, act, threads));
    }
  }
  return result;
}

// Target size of a band group's 1×1-output scratch: ~30 % of the per-core L2 (at most 384 KiB), so that it, the
// stem scratch of the first group and the packed B block stay in L2 together (the band height never changes
// results).
std::int64_t band_scratch_bytes() {
  static const std::int64_t v = std::clamp<std::int64_t>(detail::l2_cache_bytes() * 3 / 10,
                                                         std::int64_t{96} << 10, std::int64_t{384} << 10);
  return v;
}

// A 1×1 conv (pw, activation pact) feeding a depthwise conv (dw, activation dact) in row bands: the 1×1 output
// rows a band of dw output rows needs are computed into a per-thread scratch that stays in L2 (rows the previous
// band already computed are moved, not recomputed), then the depthwise kernel reads them. Every value is computed
// by the same kernels in the same order as the unfused pair, so the results are the same bits. Threads take
// contiguous ranges of output rows (each range computes its own leading halo rows once).
// The result holds the finiteness of pre's and the 1×1 output (before their activations) and of the dw output
// (before dact), or kOutOfMemory for the member whose band scratch could not be allocated.
// With `pool` (a non-overlapping MaxPool, kh = sh and kw = sw, after a Relu), each band of dw output goes to a
// second scratch and is pooled from there into y.
// With `pre` (a dense conv [+ preact] whose output is the 1×1 conv's input), x is pre's input and the rows of
// pre's output each band needs are computed per band too (into a third scratch), so that output is never stored.
BandResult conv_pw_dw(const ConvJob* pre, const Activation& preact, const ConvJob& pw, const Activation& pact,
                      const ConvJob& dw, const Activation& dact, const MaxPoolOp* pool, const float* x,
                      float* y, int threads) {
  const std::int64_t c = pw.cout, h = pw.h, w = pw.w, plane = h * w;
  const std::int64_t oh = dw.oh, ow = dw.ow;
  const float* wpw = pw.weights->data();
  const float* bpw = pw.bias ? pw.bias->data() : nullptr;
  const float* wdw = dw.weights->data();
  const float* bdw = dw.bias ? dw.bias->data() : nullptr;
  const std::int64_t taps = dw.kh * dw.kw;
  // band height: the scratch (c × rows × w floats) near band_scratch_bytes()
  const std::int64_t row_bytes = c * w * 4;
  const std::int64_t ps = pool ? pool->sh : 1;  // bands and chunks start at multiples of the pool stride
  std::int64_t band =
      std::max<std::int64_t>(1, band_scratch_bytes() / std::max<std::int64_t>(1, row_bytes * dw.sh));
  band = (band + ps - 1) / ps * ps;
  const int t = threads_for(pw.macs() + dw.macs() + (pre ? pre->macs() : 0), threads);
  const std::int64_t kpre = pre ? pre->cin * pre->kh * pre->kw : 0;
  const std::int64_t chunks0 = std::max<std::int64_t>(1, std::min<std::int64_t>(t, (oh + band - 1) / band));
  // Too few row chunks for the threads (small planes): split the channels too, in groups of a multiple of 8
  // (each channel's 1×1 row and depthwise plane are computed the same way in any group, so the bits do not
  // change), and take as many row chunks as fill t tasks (chunks × groups ≤ t: 9 chunks × 2 groups on 16
  // threads would leave a second round of 2 tasks). Not with `pre`: every group would recompute pre's channels.
  std::int64_t cgroups = 1, chunks = chunks0, cper = c;
  if (!pre && chunks0 < t) {
    cgroups = std::clamp<std::int64_t>((t + chunks0 - 1) / chunks0, 1, std::max<std::int64_t>(1, c / 8));
    cper = (c + cgroups - 1) / cgroups <= 8 ? 8 : ((c + cgroups - 1) / cgroups + 7) / 8 * 8;
    cgroups = (c + cper - 1) / cper;
    chunks = std::clamp<std::int64_t>(t / cgroups, 1, chunks0);
  }
  const std::int64_t per = ((oh + chunks - 1) / chunks + ps - 1) / ps * ps;
  ResultFlags rres, pres, dres;  // pre, the 1×1 conv, the depthwise conv
  parallel_for(chunks * cgroups, t, [&](std::int64_t task) {
    const std::int64_t ch = task / cgroups, cg = task % cgroups;
    const std::int64_t c_begin = cgroups == 1 ? 0 : cg * cper,
                       c_end = cgroups == 1 ? c : std::min(c, c_begin + cper);
    const std::int64_t cn = c_end - c_begin;
    const std::int64_t o_begin = ch * per, o_end = std::min(oh, o_begin + per);
    if (o_begin >= o_end || cn <= 0) return;
    const std::int64_t cap = std::min(h, band * dw.sh + dw.kh);  // input rows held per band
    float* s = thread_scratch(1, cn * cap * w);                  // channel c_begin + i at s + i·cap·w
    if (!s) return pres.add(KernelResult::kOutOfMemory);
    std::int64_t have0 = 0, have1 = 0;  // rows [have0, have1) of the 1×1 output are in s (row r at r − have0)
    for (std::int64_t a = o_begin; a < o_end; a += band) {
      const std::int64_t b = std::min(o_end, a + band);
      const std::int64_t r0 = std::clamp<std::int64_t>(a * dw.sh - dw.pt, 0, h);
      const std::int64_t r1 = std::clamp<std::int64_t>((b - 1) * dw.sh - dw.pt + dw.kh, r0, h);
      // keep the rows [r0, have1) already computed: move them to the front
      std::int64_t from = r0;
      if (have1 > r0 && have0 <= r0 && have0 < have1) {
        if (have0 < r0)
          for (std::int64_t co = 0; co < cn; ++co)
            std::memmove(s + co * cap * w, s + (co * cap + (r0 - have0)) * w,
                         static_cast<std::size_t>((have1 - r0) * w) * sizeof(float));
        from = have1;
      }
      if (r1 > from) {
        const std::int64_t nn = (r1 - from) * w;
        const float* src = x + from * w;  // the 1×1 conv's input rows [from, r1)
        std::int64_t ld = plane;
        if (pre) {  // compute them: rows [from, r1) of pre's output, row-major per channel with stride nn
          float* s3 = thread_scratch(3, pw.cin * nn);
          if (!s3) return rres.add(KernelResult::kOutOfMemory);
          const Im2colB im(x, pre->h, pre->w, pre->kh, pre->kw, pre->sh, pre->sw, pre->pt, pre->pl, pre->oh,
                           pre->ow);
          rres.add(sgemm_bias_act(pre->cout, nn, kpre, pre->weights->data(), kpre,
                                  pre->bias ? pre->bias->data() : nullptr, OffsetB(im, from * w), s3, nn,
                                  preact, 1));
          src = s3;
          ld = nn;
        }
        pres.add(sgemm_bias_act(cn, nn, pw.cin, wpw + c_begin * pw.cin, pw.cin, bpw ? bpw + c_begin : nullptr,
                                MatrixB(src, nn, ld), s + (from - r0) * w, cap * w, pact, 1));
      }
      have0 = r0;
      have1 = std::max(r1, from);
      // the depthwise conv on the band: input rows [r0, r1) as a plane of r1 − r0 rows
      ConvJob v = dw;
      v.h = r1 - r0;
      v.pt = dw.pt + r0 - a * dw.sh;
      v.oh = b - a;
      if (!pool) {
        for (std::int64_t co = c_begin; co < c_end; ++co)
          if (!dw_channel(v, s + (co - c_begin) * cap * w, wdw + co * taps, bdw ? bdw[co] : 0.0f,
                          y + co * oh * ow + a * ow, dact))
            dres.add(KernelResult::kNonFinite);
        continue;
      }
      float* d = thread_scratch(2, (b - a) * ow);
      if (!d) return dres.add(KernelResult::kOutOfMemory);
      MaxPoolOp mp = *pool;
      mp.channels = 1;
      mp.h = b - a;
      mp.oh = std::min(pool->oh, b / ps) - a / ps;
      for (std::int64_t co = c_begin; co < c_end; ++co) {
        if (!dw_channel(v, s + (co - c_begin) * cap * w, wdw + co * taps, bdw ? bdw[co] : 0.0f, d, dact))
          dres.add(KernelResult::kNonFinite);
        if (mp.oh > 0) maxpool_channel(mp, d, y + (co * pool->oh + a / ps) * pool->ow);
      }
    }
  });
  return BandResult{rres.get(), pres.get(), dres.get()};
}

}  // namespace facetrace::faces::detail
