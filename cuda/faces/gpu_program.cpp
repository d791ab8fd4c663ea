/// @file
/// GpuProgram (cuda/faces/gpu_program.h, docs/design/faces.md §8): the planner and executor of a lowered Program
/// on one stream. Host C++20 (it includes the faces public headers); the kernels are the family .cu files.
///
/// Plan: the steps become units (a lone step, a kConvAct conv with its activation in the epilogue, a
/// kResizeBinary pair in one kernel; a kConvBand group runs as its member steps one by one, each conv with its
/// activation fused, the intermediates allocated); every unit's output is placed best-fit in the activation
/// arena from the IR's liveness (Program::free); convs search their algorithm once per (shape, batch) on probe
/// buffers; then one arena allocation holds the activations and the workspaces, and the units are captured as
/// one CUDA graph. run() copies the input into the arena, replays the graph, and copies the outputs out.
#include <cublas_v2.h>
#include <cudnn.h>

#include "common/cuda_check.cuh"
#include "faces/band.cuh"
#include "faces/conv.cuh"
#include "faces/eltwise.cuh"
#include "faces/gpu_program.h"
#include "faces/heads.cuh"
#include "faces/nhwc_layout.h"
#include "faces/pool.cuh"
#include "faces/resize.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace facetrace::faces::gpu {
namespace {

constexpr std::uint64_t kAlign = 256;
constexpr std::uint64_t kCublasWorkspace = std::uint64_t{32} << 20;

std::uint64_t aligned(std::uint64_t b) { return (b + kAlign - 1) / kAlign * kAlign; }

// The epilogue form of a Relu/Clip step; nullopt for any other step.
std::optional<EpilogueAct> act_of(const Step& s) {
  const auto* u = std::get_if<UnaryOp>(&s.op);
  if (!u) return std::nullopt;
  if (u->kind == UnaryKind::kRelu) return EpilogueAct{EpilogueAct::Kind::kRelu, 0.0f, 0.0f};
  if (u->kind == UnaryKind::kClip) return EpilogueAct{EpilogueAct::Kind::kClip, u->lo, u->hi};
  return std::nullopt;
}

// One executed unit: steps [first, last] (last = first, or first + 1 for a fused pair).
struct Unit {
  enum class Kind : std::uint8_t { kStep, kConvAct, kResizeBinary, kHeads, kBand };
  Kind kind = Kind::kStep;
  std::size_t first = 0, last = 0;
  std::int32_t out = 0;
  EpilogueAct act;
  std::size_t extra = kNoStep;  ///< a conv's one reader (PReLU / residual Add) run in its epilogue
  Arg residual;                 ///< the residual Add's other operand (act.has_residual)
  std::size_t heads = 0;        ///< kHeads: index into Plan::heads_ (first = last = the group's last step)
  static constexpr std::size_t kNoStep = ~std::size_t{0};
};

Unit make_unit(Unit::Kind kind, std::size_t first, std::size_t last, std::int32_t out, EpilogueAct act = {}) {
  Unit u;
  u.kind = kind, u.first = first, u.last = last, u.out = out, u.act = act;
  return u;
}

// Splits the steps into units as their fusion marks say (docs/design/faces.md §3 and §8).
Expected<std::vector<Unit>> units_of(const Program& p) {
  std::vector<Unit> units;
  const std::size_t n = p.steps.size();
  auto add_conv_or_step = [&](std::size_t i, std::size_t end) {
    // a conv followed (inside [i, end)) by the Relu/Clip that reads it: one conv unit with the activation
    const Step& s = p.steps[i];
    if (std::holds_alternative<ConvJob>(s.op) && i + 1 < end) {
      const Step& t = p.steps[i + 1];
      const auto act = act_of(t);
      if (act && t.args.size() == 1 && t.args[0].kind == Arg::Kind::kValue && t.args[0].id == s.out) {
        units.push_back(make_unit(Unit::Kind::kConvAct, i, i + 1, t.out, *act));
        return i + 2;
      }
    }
    units.push_back(make_unit(Unit::Kind::kStep, i, i, s.out));
    return i + 1;
  };
  for (std::size_t i = 0; i < n;) {
    const Step& s = p.steps[i];
    const auto len = static_cast<std::size_t>(std::max<std::int32_t>(1, s.fusion.steps));
    if (i + len > n)
      return invalid_argument("step " + std::to_string(i) + " ('" + s.node + "'): fusion past the end");
    switch (s.fusion.kind) {
      case FusionKind::kNone: i = add_conv_or_step(i, i + 1); break;
      case FusionKind::kConvAct: i = add_conv_or_step(i, i + 2); break;
      case FusionKind::kConvBand:  // member steps one by one (each conv with its activation)
        for (std::size_t j = i; j < i + len;) j = add_conv_or_step(j, i + len);
        i += len;
        break;
      case FusionKind::kResizeBinary: {
        const auto* r = std::get_if<ResizeOp>(&s.op);
        const bool fusable = len == 2 && r && r->mode == ResizeMode::kNearest && r->sy > 0 && r->sx > 0 &&
                             r->oh == r->h * r->sy && r->ow == r->w * r->sx &&
                             std::holds_alternative<BinaryOp>(p.steps[i + 1].op) &&
                             (s.fusion.side == 0 || s.fusion.side == 1);
        if (fusable) {
          units.push_back(make_unit(Unit::Kind::kResizeBinary, i, i + 1, p.steps[i + 1].out));
        } else {
          for (std::size_t j = i; j < i + len; ++j)
            units.push_back(make_unit(Unit::Kind::kStep, j, j, p.steps[j].out));
        }
        i += len;
        break;
      }
    }
  }
  return units;
}

// A group of detection heads run by one launch_heads (docs/design/faces.md §8.1 "head fusion").
struct HeadsGroup {
  std::int32_t x = 0;                 ///< the feature map every head reads
  std::vector<std::size_t> members;   ///< every step of the group, ascending
  std::vector<std::size_t> pw, dw;    ///< per head: its 1×1 and depthwise conv steps
  std::vector<std::int32_t> outs;     ///< per head: the value it writes (the Transpose's or the Sigmoid's)
  HeadsJob job;                       ///< geometry and flags; the output pointers are bound at build_launches
  const float* packed = nullptr;      ///< its part of Plan::heads_w_
  std::string node;                   ///< the first head's 1×1 conv node
};

// A strided copy that stores a per-image [n, h, w] value channels-last, [h, w, n] (ONNX Transpose perm
// 0,2,3,1): the same output dims and input strides once axes of size 1 are dropped.
bool is_channels_last_copy(const TransposeOp& t, std::int64_t n, std::int64_t h, std::int64_t w) {
  if (t.offset != 0 || t.dims.size() != t.strides.size()) return false;
  std::vector<std::pair<std::int64_t, std::int64_t>> got, want;
  for (std::size_t k = 0; k < t.dims.size(); ++k)
    if (t.dims[k] != 1) got.emplace_back(t.dims[k], t.strides[k]);
  for (const auto& d : {std::pair{h, w}, std::pair{w, std::int64_t{1}}, std::pair{n, h * w}})
    if (d.first != 1) want.push_back(d);
  return got == want;
}

class Plan final : public GpuProgram {
 public:
  Plan(const Program& p, const PlanOptions& o, cudaStream_t s, std::vector<bool> nhwc = {})
      : p_(p), o_(o), stream_(s), nhwc_(std::move(nhwc)) {}
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() override {
    if (exec_) FT_CUDA_IGNORE(cudaGraphExecDestroy(exec_));
    if (graph_) FT_CUDA_IGNORE(cudaGraphDestroy(graph_));
    convs_.clear();
    if (cublas_) FT_CUDA_IGNORE(cublasDestroy(cublas_));
    if (cudnn_) FT_CUDA_IGNORE(cudnnDestroy(cudnn_));
    if (arena_) FT_CUDA_IGNORE(cudaFree(arena_));
    if (weights_) FT_CUDA_IGNORE(cudaFree(weights_));
    if (heads_w_) FT_CUDA_IGNORE(cudaFree(heads_w_));
  }

  Status build(const ConstTable& consts) {
    const Program& p = p_;
    if (p.lens.empty() || p.steps.empty()) return invalid_argument("empty program");
    if (o_.batch < 1) return invalid_argument("batch " + std::to_string(o_.batch) + " (must be >= 1)");
    if (p.free.size() != p.steps.size()) return invalid_argument("program free lists do not match its steps");
    FT_TRY(bind_consts(consts));
    FT_TRY(validate());
    auto u = units_of(p);
    if (!u) return u.status();
    units_ = std::move(*u);
    find_heads();
    merge_epilogues();
    find_bias_deferrals();
    plan_arena();
    FT_CUDNN_TRY(cudnnCreate(&cudnn_));
    FT_CUDNN_TRY(cudnnSetStream(cudnn_, stream_));
    FT_TRY(upload_conv_weights());
    FT_TRY(pack_heads());
    FT_TRY(setup_convs());
    defer_biases_into_convs();
    fuse_affines_into_bf16_convs();
    FT_TRY(allocate_arena());
    FT_TRY(setup_cublas());
    FT_TRY(build_launches());
    // one eager run first: every kernel is loaded and every launch checked before anything is captured
    FT_TRY(launch_all());
    FT_CUDA_TRY(cudaStreamSynchronize(stream_));
    FT_TRY(choose_bands());
    FT_TRY(time_units());
    if (o_.use_graph && stream_ != nullptr) FT_TRY(capture());
    FT_CUDA_TRY(cudaStreamSynchronize(stream_));
    return {};
  }

  Status run(const float* input, float* output) override {
    const std::uint64_t B = static_cast<std::uint64_t>(o_.batch);
    if (!input || !output) return invalid_argument("null input or output pointer");
    FT_CUDA_TRY(
        cudaMemcpyAsync(val_[0], input, B * lens(0) * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    if (exec_) {
      FT_CUDA_TRY(cudaGraphLaunch(exec_, stream_));
    } else {
      FT_TRY(launch_all());
    }
    std::uint64_t at = 0;
    for (const auto& o : p_.outputs) {
      const std::uint64_t n = B * lens(o.value);
      FT_CUDA_TRY(cudaMemcpyAsync(output + at, val_[static_cast<std::size_t>(o.value)], n * sizeof(float),
                                  cudaMemcpyDeviceToDevice, stream_));
      at += n;
    }
    return {};
  }

  std::uint64_t output_floats() const override {
    std::uint64_t n = 0;
    for (const auto& o : p_.outputs) n += static_cast<std::uint64_t>(o_.batch) * lens(o.value);
    return n;
  }
  std::uint64_t device_bytes() const override {
    std::uint64_t n = arena_bytes_ + weight_bytes_ + heads_bytes_;
    for (const auto& c : convs_) n += c->bf16_weight_bytes();
    return n;
  }
  int batch() const override { return o_.batch; }
  Precision precision() const override { return o_.precision; }
  const std::vector<StepPlan>& steps() const override { return plans_; }
  std::vector<ConvChoice> conv_choices() const override {
    std::vector<ConvChoice> c;
    if (o_.precision != Precision::kFp32) return c;
    for (const auto& conv : convs_) c.push_back(conv->choice());
    return c;
  }
  int carried_choices() const override { return carried_; }

 private:
  std::uint64_t lens(std::int32_t v) const {
    return static_cast<std::uint64_t>(p_.lens[static_cast<std::size_t>(v)]);
  }
  /// Stored channels-last (docs/design/faces.md §8.3).
  bool nhwc(std::int32_t v) const {
    return v >= 0 && static_cast<std::size_t>(v) < nhwc_.size() && nhwc_[static_cast<std::size_t>(v)];
  }

  // Consts from the table; conv weights (and biases) too when the table holds them after the consts (wire
  // order: Program::consts, then each Conv step's weights and bias), else uploaded by upload_conv_weights.
  Status bind_consts(const ConstTable& consts) {
    const std::size_t nc = p_.consts.size();
    std::size_t conv_blobs = 0;
    for (const auto& s : p_.steps)
      if (const auto* j = std::get_if<ConvJob>(&s.op)) conv_blobs += j->bias ? 2 : 1;
    if (consts.size() != nc && consts.size() != nc + conv_blobs)
      return invalid_argument("const table holds " + std::to_string(consts.size()) +
                              " pointers, the program has " + std::to_string(nc) + " constants (" +
                              std::to_string(nc + conv_blobs) + " with its conv weights)");
    for (std::size_t i = 0; i < consts.size(); ++i)
      if (!consts[i]) return invalid_argument("const table entry " + std::to_string(i) + " is null");
    for (std::size_t i = 0; i < nc; ++i)
      if (!p_.consts[i]) return invalid_argument("program constant " + std::to_string(i) + " is null");
    consts_.assign(consts.begin(), consts.begin() + static_cast<std::ptrdiff_t>(nc));
    if (consts.size() > nc) {
      std::size_t k = nc;
      for (const auto& s : p_.steps)
        if (const auto* j = std::get_if<ConvJob>(&s.op)) {
          const float* w = consts[k++];
          const float* b = j->bias ? consts[k++] : nullptr;
          conv_w_.emplace_back(w, b);
        }
    }
    return {};
  }

  // Operand kinds and sizes the launchers rely on.
  Status validate() const {
    const auto nv = static_cast<std::int32_t>(p_.lens.size());
    for (const auto& s : p_.steps) {
      if (s.out <= 0 || s.out >= nv)
        return invalid_argument("node '" + s.node + "': output value out of range");
      if (s.args.empty()) return invalid_argument("node '" + s.node + "': no operands");
      for (const auto& a : s.args) {
        const bool bad = a.kind == Arg::Kind::kValue
                             ? (a.id < 0 || a.id >= nv)
                             : (a.id < 0 || a.id >= static_cast<std::int32_t>(p_.consts.size()));
        if (bad) return invalid_argument("node '" + s.node + "': operand out of range");
      }
      const bool any_const_ok =
          std::holds_alternative<BinaryOp>(s.op) || std::holds_alternative<ConcatOp>(s.op);
      if (!any_const_ok && s.args[0].kind == Arg::Kind::kConst)
        return Status(Code::kDeclined, "node '" + s.node + "': a constant first operand");
      if (const auto* j = std::get_if<ConvJob>(&s.op)) {
        if (!j->weights || j->groups < 1 || j->cin % j->groups || j->cout % j->groups)
          return invalid_argument("node '" + s.node + "': malformed conv");
        if (static_cast<std::int64_t>(j->weights->size()) != j->cout * (j->cin / j->groups) * j->kh * j->kw ||
            (j->bias && static_cast<std::int64_t>(j->bias->size()) != j->cout))
          return invalid_argument("node '" + s.node + "': conv weights of the wrong size");
      }
      if (const auto* t = std::get_if<TransposeOp>(&s.op); t && t->dims.size() > 4)
        return Status(Code::kDeclined, "node '" + s.node + "': strided copy of rank " +
                                           std::to_string(t->dims.size()) + " (the GPU takes rank <= 4)");
      if (const auto* m = std::get_if<MatMulOp>(&s.op); m && s.args.size() < 2)
        return invalid_argument("node '" + s.node + "': MatMul without its second operand");
      if (const auto* g = std::get_if<GemvOp>(&s.op); g && s.args.size() < (g->has_bias ? 3u : 2u))
        return invalid_argument("node '" + s.node + "': Gemm without its operands");
    }
    for (const auto& o : p_.outputs)
      if (o.value < 0 || o.value >= nv) return invalid_argument("output '" + o.name + "' out of range");
    return {};
  }

  // Head fusion (docs/design/faces.md §8.1): every 1×1 conv → depthwise 3×3 (stride 1, pad 1) → channels-last
  // Transpose [→ Sigmoid] chain whose steps run alone and whose intermediates have no other reader joins the
  // group of its feature map; a group runs as one kHeads unit at its last step's place, when no other step
  // before that place reads a head's output and the feature map is not freed before it. Off: fuse_heads false,
  // channels-last values, or a group the kernel does not take.
  void find_heads() {
    if (!o_.fuse_heads) return;
    const std::size_t n = p_.steps.size(), nv = p_.lens.size();
    std::vector<int> reads(nv, 0);
    std::vector<std::size_t> reader(nv, Unit::kNoStep), freed_at(nv, Unit::kNoStep);
    for (std::size_t i = 0; i < n; ++i) {
      for (const auto& a : p_.steps[i].args)
        if (a.kind == Arg::Kind::kValue) {
          ++reads[static_cast<std::size_t>(a.id)];
          reader[static_cast<std::size_t>(a.id)] = i;
        }
      for (auto v : p_.free[i])
        if (v >= 0 && static_cast<std::size_t>(v) < nv) freed_at[static_cast<std::size_t>(v)] = i;
    }
    for (const auto& o : p_.outputs) reads[static_cast<std::size_t>(o.value)] += 2;
    std::vector<bool> alone(n, false);
    for (const auto& u : units_)
      if (u.kind == Unit::Kind::kStep) alone[u.first] = true;
    auto one_reader = [&](std::int32_t v) {  // the step that alone reads v once (v no output), else kNoStep
      const auto k = static_cast<std::size_t>(v);
      return reads[k] == 1 && alone[reader[k]] ? reader[k] : Unit::kNoStep;
    };
    auto reads_first = [&](std::size_t step, std::int32_t v) {
      const auto& a = p_.steps[step].args;
      return !a.empty() && a[0].kind == Arg::Kind::kValue && a[0].id == v;
    };
    std::map<std::int32_t, std::vector<HeadsGroup>> by_x;  // a group per feature map, split where it is full
    for (std::size_t i = 0; i < n; ++i) {
      const Step& s = p_.steps[i];
      const auto* pw = std::get_if<ConvJob>(&s.op);
      if (!pw || !alone[i] || !pw->is_pointwise() || s.args[0].kind != Arg::Kind::kValue ||
          nhwc(s.args[0].id) || nhwc(s.out))
        continue;
      const std::size_t d = one_reader(s.out);
      if (d == Unit::kNoStep || !reads_first(d, s.out)) continue;
      const auto* dw = std::get_if<ConvJob>(&p_.steps[d].op);
      if (!dw || !dw->is_depthwise() || dw->cin != pw->cout || dw->kh != 3 || dw->kw != 3 || dw->sh != 1 ||
          dw->sw != 1 || dw->pt != 1 || dw->pl != 1 || dw->dh != 1 || dw->dw != 1 || dw->h != pw->oh ||
          dw->w != pw->ow || dw->oh != dw->h || dw->ow != dw->w || nhwc(p_.steps[d].out))
        continue;
      const std::size_t t = one_reader(p_.steps[d].out);
      if (t == Unit::kNoStep || !reads_first(t, p_.steps[d].out)) continue;
      const auto* tr = std::get_if<TransposeOp>(&p_.steps[t].op);
      if (!tr || !is_channels_last_copy(*tr, dw->cout, dw->h, dw->w) ||
          p_.lens[static_cast<std::size_t>(p_.steps[t].out)] != dw->cout * dw->h * dw->w)
        continue;
      std::vector<std::size_t> steps{i, d, t};
      std::int32_t out = p_.steps[t].out;
      bool sigmoid = false;
      if (const std::size_t g = one_reader(out); g != Unit::kNoStep && reads_first(g, out)) {
        const auto* un = std::get_if<UnaryOp>(&p_.steps[g].op);
        if (un && un->kind == UnaryKind::kSigmoid &&
            p_.lens[static_cast<std::size_t>(p_.steps[g].out)] == p_.lens[static_cast<std::size_t>(out)]) {
          steps.push_back(g), out = p_.steps[g].out, sigmoid = true;
        }
      }
      auto& groups = by_x[s.args[0].id];
      const int ch = static_cast<int>(pw->cout);
      if (groups.empty() || static_cast<int>(groups.back().outs.size()) == kMaxHeads ||
          heads_channels(groups.back().job) + ch > kMaxHeadChannels) {
        groups.emplace_back();
        HeadsGroup& g = groups.back();
        g.x = s.args[0].id, g.node = s.node;
        g.job.cin = static_cast<int>(pw->cin), g.job.h = static_cast<int>(pw->h), g.job.w = static_cast<int>(pw->w);
      }
      HeadsGroup& g = groups.back();
      if (pw->cout > kMaxHeadChannels || g.job.cin != pw->cin || g.job.h != pw->h || g.job.w != pw->w) continue;
      const int k = g.job.heads++;
      g.job.channels[k] = ch;
      g.job.pw_bias[k] = pw->bias != nullptr, g.job.dw_bias[k] = dw->bias != nullptr;
      g.job.sigmoid[k] = sigmoid;
      g.pw.push_back(i), g.dw.push_back(d), g.outs.push_back(out);
      g.members.insert(g.members.end(), steps.begin(), steps.end());
    }
    for (auto& [x, groups] : by_x)
      for (auto& g : groups) {
        if (g.outs.empty() || !heads_fit(g.job)) continue;
        std::sort(g.members.begin(), g.members.end());
        const std::size_t last = g.members.back();
        const auto member = [&](std::size_t i) { return std::binary_search(g.members.begin(), g.members.end(), i); };
        // the feature map lives until the group has run
        const std::size_t fx = freed_at[static_cast<std::size_t>(g.x)];
        if (fx != Unit::kNoStep && !member(fx) && fx < last) continue;
        // no step outside the group reads a head's output before the group runs
        bool early = false;
        for (std::size_t r = g.members.front(); r < last && !early; ++r)
          if (!member(r))
            for (const auto& a : p_.steps[r].args)
              early = early || (a.kind == Arg::Kind::kValue &&
                                std::find(g.outs.begin(), g.outs.end(), a.id) != g.outs.end());
        if (early) continue;
        const std::size_t index = heads_.size();
        std::vector<Unit> kept;
        for (const auto& u : units_) {
          if (u.kind == Unit::Kind::kStep && member(u.first) && u.first != last) continue;
          if (u.kind == Unit::Kind::kStep && u.first == last) {
            Unit h = make_unit(Unit::Kind::kHeads, last, last, g.outs.front());
            h.heads = index;
            kept.push_back(h);
            continue;
          }
          kept.push_back(u);
        }
        units_ = std::move(kept);
        heads_.push_back(std::move(g));  // after the filter above, which reads g.members
      }
  }

  // The packed weights of every head group (heads.cuh): copied on the device from the conv weights.
  Status pack_heads() {
    if (heads_.empty()) return {};
    std::map<std::size_t, std::size_t> conv_index;
    for (std::size_t i = 0, k = 0; i < p_.steps.size(); ++i)
      if (std::holds_alternative<ConvJob>(p_.steps[i].op)) conv_index[i] = k++;
    std::uint64_t total = 0;
    for (const auto& g : heads_)
      total += aligned(static_cast<std::uint64_t>(heads_packed_floats(g.job)) * sizeof(float));
    FT_CUDA_TRY(cudaMalloc(&heads_w_, total));
    heads_bytes_ = total;
    FT_CUDA_TRY(cudaMemsetAsync(heads_w_, 0, total, stream_));
    auto* base = static_cast<char*>(heads_w_);
    std::uint64_t at = 0;
    auto copy = [&](float* dst, const float* src, std::int64_t count) -> Status {
      if (src && count > 0)
        FT_CUDA_TRY(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(count) * sizeof(float),
                                    cudaMemcpyDeviceToDevice, stream_));
      return {};
    };
    for (auto& g : heads_) {
      auto* pk = reinterpret_cast<float*>(base + at);
      g.packed = pk;
      const std::int64_t C = heads_channels(g.job), cin = g.job.cin;
      std::int64_t c0 = 0;
      for (std::size_t k = 0; k < g.outs.size(); ++k) {
        const std::int64_t nk = g.job.channels[k];
        const auto [pw_w, pw_b] = conv_w_[conv_index.at(g.pw[k])];
        const auto [dw_w, dw_b] = conv_w_[conv_index.at(g.dw[k])];
        FT_TRY(copy(pk + c0 * cin, pw_w, nk * cin));
        FT_TRY(copy(pk + C * cin + c0, pw_b, nk));
        FT_TRY(copy(pk + C * cin + C + c0 * 9, dw_w, nk * 9));
        FT_TRY(copy(pk + C * cin + C + C * 9 + c0, dw_b, nk));
        c0 += nk;
      }
      at += aligned(static_cast<std::uint64_t>(heads_packed_floats(g.job)) * sizeof(float));
    }
    return {};
  }

  // Epilogue fusion (docs/design/faces.md §8.1): a conv whose one reader is a ChannelPrelu (no activation of its
  // own) or a residual Add without broadcasting whose other operand exists before the conv runs takes that step
  // into its epilogue; the reader's output is written by the conv, at the conv's place in the order.
  void merge_epilogues() {
    const std::size_t nv = p_.lens.size();
    std::vector<int> reads(nv, 0);
    std::vector<std::size_t> reader(nv, Unit::kNoStep), producer(nv, 0);
    for (std::size_t i = 0; i < p_.steps.size(); ++i) {
      producer[static_cast<std::size_t>(p_.steps[i].out)] = i;
      for (const auto& a : p_.steps[i].args)
        if (a.kind == Arg::Kind::kValue)
          ++reads[static_cast<std::size_t>(a.id)], reader[static_cast<std::size_t>(a.id)] = i;
    }
    for (const auto& o : p_.outputs) reads[static_cast<std::size_t>(o.value)] += 2;
    std::map<std::size_t, std::size_t> alone;  // step → its kStep unit
    for (std::size_t k = 0; k < units_.size(); ++k)
      if (units_[k].kind == Unit::Kind::kStep) alone[units_[k].first] = k;
    std::vector<bool> gone(units_.size(), false);
    for (auto& u : units_) {
      if (!std::holds_alternative<ConvJob>(p_.steps[u.first].op) || u.kind == Unit::Kind::kResizeBinary ||
          u.kind == Unit::Kind::kHeads)
        continue;
      const auto v = static_cast<std::size_t>(u.out);
      if (reads[v] != 1) continue;
      const std::size_t r = reader[v];
      const auto ru = alone.find(r);
      if (ru == alone.end() || gone[ru->second]) continue;
      const Step& rs = p_.steps[r];
      if (const auto* pr = std::get_if<ChannelPreluOp>(&rs.op)) {
        if (u.act.kind != EpilogueAct::Kind::kNone || rs.args.size() < 2 ||
            rs.args[1].kind != Arg::Kind::kConst)
          continue;
        static_cast<void>(pr);
        u.act.kind = EpilogueAct::Kind::kPrelu;
        u.act.slope = consts_[static_cast<std::size_t>(rs.args[1].id)];
      } else if (const auto* b = std::get_if<BinaryOp>(&rs.op)) {
        if (b->kind != BinaryKind::kAdd || rs.args.size() < 2) continue;
        // contiguous strides on both sides (no broadcasting), over the conv's whole output (an axis of size 1
        // may have any stride: the loader gives the batch axis stride 0)
        std::int64_t st = 1;
        bool dense = true;
        for (int ax = 3; ax >= 0; --ax) {
          const auto k = static_cast<std::size_t>(ax);
          dense = dense && (b->dims[k] == 1 || (b->a_strides[k] == st && b->b_strides[k] == st));
          st *= b->dims[k];
        }
        if (!dense || st != p_.lens[v]) continue;
        const Arg other =
            rs.args[0].kind == Arg::Kind::kValue && rs.args[0].id == u.out ? rs.args[1] : rs.args[0];
        if (other.kind == Arg::Kind::kValue &&
            (other.id == u.out ||
             (other.id != kInputValue && producer[static_cast<std::size_t>(other.id)] >= u.first)))
          continue;
        if (other.kind == Arg::Kind::kConst &&
            (nhwc(u.out) ||
             static_cast<std::int64_t>(p_.consts[static_cast<std::size_t>(other.id)]->size()) != st))
          continue;
        u.act.has_residual = true;
        u.act.residual_bstride = bstride(other);
        u.residual = other;
      } else {
        continue;
      }
      u.extra = r;
      u.out = rs.out;
      gone[ru->second] = true;
    }
    std::vector<Unit> kept;
    for (std::size_t k = 0; k < units_.size(); ++k)
      if (!gone[k]) kept.push_back(units_[k]);
    units_ = std::move(kept);
  }

  // Bias deferral (docs/design/faces.md §8.1): a conv with a bias and no activation whose one reader is a
  // ChannelPrelu or a Binary run alone leaves its bias to that reader, which adds it (the same rounding as the
  // epilogue) on its way through, saving the epilogue's pass over the conv output.
  void find_bias_deferrals() {
    std::vector<int> reads(p_.lens.size(), 0);
    for (const auto& s : p_.steps)
      for (const auto& a : s.args)
        if (a.kind == Arg::Kind::kValue) ++reads[static_cast<std::size_t>(a.id)];
    for (const auto& o : p_.outputs) reads[static_cast<std::size_t>(o.value)] += 2;  // never an output
    std::map<std::int32_t, std::size_t> alone;  // value read → the kStep unit reading it
    for (std::size_t k = 0; k < units_.size(); ++k)
      if (units_[k].kind == Unit::Kind::kStep)
        for (const auto& a : p_.steps[units_[k].first].args)
          if (a.kind == Arg::Kind::kValue) alone[a.id] = units_[k].first;
    for (const auto& u : units_) {
      const auto* j = std::get_if<ConvJob>(&p_.steps[u.first].op);
      if (!j || !j->bias || u.kind != Unit::Kind::kStep || u.extra != Unit::kNoStep ||
          reads[static_cast<std::size_t>(u.out)] != 1)
        continue;
      const auto r = alone.find(u.out);
      if (r == alone.end()) continue;
      const Step& reader = p_.steps[r->second];
      const bool prelu = std::holds_alternative<ChannelPreluOp>(reader.op) && reader.args[0].id == u.out &&
                         reader.args[0].kind == Arg::Kind::kValue;
      if (prelu || std::holds_alternative<BinaryOp>(reader.op))
        deferred_[u.out] = {nullptr, j->cout, nhwc(u.out) ? 1 : j->oh * j->ow};
    }
  }
  OperandBias deferred_bias(const Arg& a) const {
    if (a.kind != Arg::Kind::kValue) return {};
    const auto d = deferred_.find(a.id);
    return d == deferred_.end() ? OperandBias{} : d->second;
  }

  // Best-fit placement: a freed region is reused for a later value of size in [bytes, 2·bytes] (the smallest
  // such), else a new region at the end (docs/design/faces.md §8).
  void plan_arena() {
    const std::uint64_t B = static_cast<std::uint64_t>(o_.batch);
    offset_.assign(p_.lens.size(), kUnplaced);
    struct Region {
      std::uint64_t offset, bytes;
    };
    std::vector<Region> free_regions;
    std::vector<std::uint64_t> region_bytes(p_.lens.size(), 0);
    std::uint64_t end = 0;
    std::vector<bool> keep(p_.lens.size(), false);
    for (const auto& o : p_.outputs) keep[static_cast<std::size_t>(o.value)] = true;
    auto place = [&](std::int32_t v) {
      const std::uint64_t need = aligned(B * lens(v) * sizeof(float));
      std::size_t best = free_regions.size();
      for (std::size_t k = 0; k < free_regions.size(); ++k) {
        const auto b = free_regions[k].bytes;
        if (b >= need && b <= 2 * need && (best == free_regions.size() || b < free_regions[best].bytes))
          best = k;
      }
      if (best < free_regions.size()) {
        offset_[static_cast<std::size_t>(v)] = free_regions[best].offset;
        region_bytes[static_cast<std::size_t>(v)] = free_regions[best].bytes;
        free_regions.erase(free_regions.begin() + static_cast<std::ptrdiff_t>(best));
      } else {
        offset_[static_cast<std::size_t>(v)] = end;
        region_bytes[static_cast<std::size_t>(v)] = need;
        end += need;
      }
    };
    auto release = [&](std::int32_t v) {
      const auto k = static_cast<std::size_t>(v);
      if (offset_[k] == kUnplaced || keep[k] || region_bytes[k] == 0) return;
      free_regions.push_back({offset_[k], region_bytes[k]});
      region_bytes[k] = 0;  // released once
    };
    place(kInputValue);
    for (const auto& u : units_) {
      if (u.kind == Unit::Kind::kHeads) {  // every head's output, then the members' free lists
        const HeadsGroup& g = heads_[u.heads];
        for (auto v : g.outs) place(v);
        for (auto i : g.members)
          for (auto v : p_.free[i])
            if (v >= 0 && static_cast<std::size_t>(v) < p_.lens.size() &&
                std::find(g.outs.begin(), g.outs.end(), v) == g.outs.end())
              release(v);
        continue;
      }
      place(u.out);
      auto free_of = [&](std::size_t i) {
        for (auto v : p_.free[i])
          if (v >= 0 && static_cast<std::size_t>(v) < p_.lens.size() && v != u.out) release(v);
      };
      for (std::size_t i = u.first; i <= u.last; ++i) free_of(i);
      if (u.extra != Unit::kNoStep) free_of(u.extra);
    }
    activation_bytes_ = end;
  }

  Status upload_conv_weights() {
    if (!conv_w_.empty()) return {};  // bound from the const table
    std::uint64_t total = 0;
    for (const auto& s : p_.steps)
      if (const auto* j = std::get_if<ConvJob>(&s.op))
        total += aligned(j->weights->size() * sizeof(float)) +
                 (j->bias ? aligned(j->bias->size() * sizeof(float)) : 0);
    if (total == 0) return {};
    FT_CUDA_TRY(cudaMalloc(&weights_, total));
    weight_bytes_ = total;
    auto* base = static_cast<char*>(weights_);
    std::uint64_t at = 0;
    auto put = [&](const std::vector<float>& v) -> Expected<const float*> {
      auto* d = reinterpret_cast<float*>(base + at);
      // on the plan's stream (a non-blocking stream does not wait for a legacy-stream cudaMemcpy's DMA)
      FT_CUDA_TRY(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
      at += aligned(v.size() * sizeof(float));
      return static_cast<const float*>(d);
    };
    for (const auto& s : p_.steps)
      if (const auto* j = std::get_if<ConvJob>(&s.op)) {
        auto w = put(*j->weights);
        if (!w) return w.status();
        const float* b = nullptr;
        if (j->bias) {
          auto bb = put(*j->bias);
          if (!bb) return bb.status();
          b = *bb;
        }
        conv_w_.emplace_back(*w, b);
      }
    FT_CUDA_TRY(cudaStreamSynchronize(stream_));  // the host blobs may go away after plan
    return {};
  }

  // The conv of each conv unit, its algorithm searched once per (shape, batch, bias, activation).
  Status setup_convs() {
    std::vector<std::size_t> conv_index(p_.steps.size(), 0);
    std::uint64_t max_x = 0, max_y = 0;
    {
      std::size_t k = 0;
      for (std::size_t i = 0; i < p_.steps.size(); ++i)
        if (const auto* j = std::get_if<ConvJob>(&p_.steps[i].op)) {
          conv_index[i] = k++;
          max_x = std::max<std::uint64_t>(max_x, static_cast<std::uint64_t>(j->cin * j->h * j->w));
          max_y = std::max<std::uint64_t>(max_y, static_cast<std::uint64_t>(j->cout * j->oh * j->ow));
        }
      if (k == 0) return {};
    }
    const std::uint64_t B = static_cast<std::uint64_t>(o_.batch);
    // probe buffers: the largest conv's input and output, and as much workspace as the cap and memory allow
    void* probe_xy = nullptr;
    const std::uint64_t xy = aligned(B * max_x * sizeof(float)) + aligned(B * max_y * sizeof(float));
    FT_CUDA_TRY(cudaMalloc(&probe_xy, xy));
    if (Status f = launch_fill_probe(static_cast<float*>(probe_xy), static_cast<std::int64_t>(xy / sizeof(float)),
                                     stream_);
        !f.ok()) {
      FT_CUDA_IGNORE(cudaFree(probe_xy));
      return f;
    }
    void* probe_ws = nullptr;
    std::uint64_t ws = o_.max_workspace_bytes;
    // bf16: the workspace also holds the conv's bf16 input and output after cuDNN's part (not under the cap)
    if (o_.precision == Precision::kBf16) ws += aligned(B * max_x * 2) + aligned(B * max_y * 2);
    while (ws > 0) {
      if (cudaMalloc(&probe_ws, ws) == cudaSuccess) break;
      FT_CUDA_IGNORE(cudaGetLastError());  // not sticky: a smaller workspace then
      probe_ws = nullptr;
      ws /= 2;
      if (ws < (std::uint64_t{1} << 20)) ws = 0;
    }
    ConvProbe probe{
        static_cast<float*>(probe_xy),
        reinterpret_cast<float*>(static_cast<char*>(probe_xy) + aligned(B * max_x * sizeof(float))), probe_ws,
        ws};
    ConvSetup cs{o_.batch, o_.precision != Precision::kFp32, o_.precision == Precision::kBf16, o_.autotune,
                 o_.max_workspace_bytes};
    std::map<std::vector<std::int64_t>, ConvAlgo> cache;
    // Carried choices (PlanOptions::conv_choices): fp32 only, one per conv unit in unit order.
    std::size_t conv_units = 0;
    for (const auto& u : units_) conv_units += std::holds_alternative<ConvJob>(p_.steps[u.first].op) ? 1 : 0;
    const bool carry = o_.precision == Precision::kFp32 && o_.conv_choices.size() == conv_units;  // else searched
    Status st;
    for (const auto& u : units_) {
      const Step& s = p_.steps[u.first];
      const auto* j = std::get_if<ConvJob>(&s.op);
      if (!j) continue;
      auto [w, b] = conv_w_[conv_index[u.first]];
      if (const auto d = deferred_.find(u.out); d != deferred_.end()) {
        d->second.bias = b;  // the reader adds it
        b = nullptr;
      }
      const std::vector<std::int64_t> key{j->cin,
                                          j->h,
                                          j->w,
                                          j->cout,
                                          j->groups,
                                          j->kh,
                                          j->kw,
                                          j->sh,
                                          j->sw,
                                          j->pt,
                                          j->pl,
                                          j->oh,
                                          j->ow,
                                          j->dh,
                                          j->dw,
                                          b != nullptr,
                                          static_cast<std::int64_t>(u.act.kind),
                                          u.act.has_residual,
                                          nhwc(s.out)};
      auto conv = std::make_unique<GpuConv>();
      const auto hit = cache.find(key);
      ConvSetup one = cs;
      one.nhwc = nhwc(s.out);
      if (carry) one.carried = &o_.conv_choices[convs_.size()];
      st = conv->setup(cudnn_, *j, one, u.act, w, b, hit == cache.end() ? nullptr : &hit->second, probe,
                       stream_);
      if (!st.ok()) {
        st = st.with_context("node '" + s.node + "'");
        break;
      }
      if (hit == cache.end()) cache.emplace(key, conv->algo());
      // Taken: the conv runs its carried choice (itself, or a conv of the same shape that took it before).
      if (carry) {
        const ConvChoice want = o_.conv_choices[convs_.size()], got = conv->choice();
        carried_ += std::memcmp(&want, &got, sizeof want) == 0 ? 1 : 0;
      }
      workspace_bytes_ = std::max<std::uint64_t>(workspace_bytes_, conv->algo().workspace);
      conv_of_unit_[u.first] = convs_.size();
      convs_.push_back(std::move(conv));
    }
    FT_CUDA_IGNORE(cudaStreamSynchronize(stream_));
    FT_CUDA_IGNORE(cudaFree(probe_xy));
    if (probe_ws) FT_CUDA_IGNORE(cudaFree(probe_ws));
    return st;
  }

  // Input-bias deferral (docs/design/faces.md §8.1): a conv with a bias and nothing else in its epilogue whose one
  // reader is a conv running an own kernel gives that reader its bias, added to the reader's in-bounds input taps
  // (exact: padded taps were zeros in the stored tensor too), and skips its epilogue pass.
  void defer_biases_into_convs() {
    const std::size_t nv = p_.lens.size();
    std::vector<int> reads(nv, 0);
    for (const auto& s : p_.steps)
      for (const auto& a : s.args)
        if (a.kind == Arg::Kind::kValue) ++reads[static_cast<std::size_t>(a.id)];
    for (const auto& o : p_.outputs) reads[static_cast<std::size_t>(o.value)] += 2;
    std::map<std::int32_t, std::size_t> conv_reading;  // value → the conv unit (first step) reading it
    for (const auto& u : units_)
      if (std::holds_alternative<ConvJob>(p_.steps[u.first].op) &&
          p_.steps[u.first].args[0].kind == Arg::Kind::kValue)
        conv_reading[p_.steps[u.first].args[0].id] = u.first;
    for (const auto& u : units_) {
      const auto cp = conv_of_unit_.find(u.first);
      if (cp == conv_of_unit_.end() || u.kind != Unit::Kind::kStep || u.extra != Unit::kNoStep ||
          u.act.kind != EpilogueAct::Kind::kNone || reads[static_cast<std::size_t>(u.out)] != 1 ||
          deferred_.count(u.out))
        continue;
      const auto r = conv_reading.find(u.out);
      if (r == conv_reading.end()) continue;
      GpuConv& consumer = *convs_[conv_of_unit_.at(r->second)];
      GpuConv& producer = *convs_[cp->second];
      if (!consumer.algo().own || producer.algo().fused) continue;
      const float* b = producer.take_bias();
      if (!b) continue;
      consumer.set_input_bias(b);
      bias_moved_from_.insert(u.first);
      bias_moved_to_.insert(r->second);
    }
  }

  Status allocate_arena() {
    needs_cublas_ = std::any_of(p_.steps.begin(), p_.steps.end(), [](const Step& s) {
      return std::holds_alternative<GemvOp>(s.op) || std::holds_alternative<MatMulOp>(s.op);
    });
    ws_at_ = aligned(activation_bytes_);
    cublas_ws_at_ = ws_at_ + aligned(workspace_bytes_);
    arena_bytes_ = cublas_ws_at_ + (needs_cublas_ ? kCublasWorkspace : 0);
    FT_CUDA_TRY(cudaMalloc(&arena_, arena_bytes_));
    // zeroed once, so no region ever holds a non-finite pattern that a β = 0 read could turn into NaN
    FT_CUDA_TRY(cudaMemsetAsync(arena_, 0, arena_bytes_, stream_));
    auto* base = static_cast<char*>(arena_);
    val_.assign(p_.lens.size(), nullptr);
    for (std::size_t v = 0; v < p_.lens.size(); ++v)
      if (offset_[v] != kUnplaced) val_[v] = reinterpret_cast<float*>(base + offset_[v]);
    return {};
  }

  // bf16 (docs/design/faces.md §8.1): a ChannelAffine with constant scale and shift whose one reader is the
  // next unit, a conv running the bf16 form, is applied by that conv's input conversion; the affine's unit then
  // does nothing and the conv reads the affine's input (nothing runs between them, so it is still there).
  void fuse_affines_into_bf16_convs() {
    if (o_.precision != Precision::kBf16) return;
    std::vector<int> reads(p_.lens.size(), 0);
    for (const auto& st : p_.steps)
      for (const auto& a : st.args)
        if (a.kind == Arg::Kind::kValue) ++reads[static_cast<std::size_t>(a.id)];
    for (const auto& o : p_.outputs) reads[static_cast<std::size_t>(o.value)] += 2;
    for (std::size_t k = 0; k + 1 < units_.size(); ++k) {
      const Unit& a = units_[k];
      const Unit& c = units_[k + 1];
      const Step& sa = p_.steps[a.first];
      if (a.kind != Unit::Kind::kStep || !std::holds_alternative<ChannelAffineOp>(sa.op) || sa.args.size() < 3 ||
          sa.args[0].kind != Arg::Kind::kValue || sa.args[1].kind != Arg::Kind::kConst ||
          sa.args[2].kind != Arg::Kind::kConst || deferred_.count(sa.args[0].id) ||
          reads[static_cast<std::size_t>(a.out)] != 1)
        continue;
      const Step& sc = p_.steps[c.first];
      const auto conv = conv_of_unit_.find(c.first);
      if (c.kind == Unit::Kind::kResizeBinary || conv == conv_of_unit_.end() || sc.args.empty() ||
          sc.args[0].kind != Arg::Kind::kValue || sc.args[0].id != a.out || !convs_[conv->second]->algo().bf16)
        continue;
      convs_[conv->second]->set_input_affine(consts_[static_cast<std::size_t>(sa.args[1].id)],
                                             consts_[static_cast<std::size_t>(sa.args[2].id)]);
      affine_skipped_.insert(a.first);
      conv_input_[c.first] = sa.args[0];
    }
  }

  Status setup_cublas() {
    if (!needs_cublas_) return {};
    FT_CUBLAS_TRY(cublasCreate(&cublas_));
    FT_CUBLAS_TRY(cublasSetStream(cublas_, stream_));
    FT_CUBLAS_TRY(cublasSetWorkspace(cublas_, static_cast<char*>(arena_) + cublas_ws_at_, kCublasWorkspace));
    FT_CUBLAS_TRY(cublasSetMathMode(
        cublas_, o_.precision == Precision::kTf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    // bf16: cublasGemmEx on the fp32 operands with bf16 tensor-core products and fp32 accumulate
    if (o_.precision == Precision::kBf16) gemm_compute_ = CUBLAS_COMPUTE_32F_FAST_16BF;
    return {};
  }

  const float* ptr(const Arg& a) const {
    return a.kind == Arg::Kind::kConst ? consts_[static_cast<std::size_t>(a.id)]
                                       : val_[static_cast<std::size_t>(a.id)];
  }
  std::int64_t bstride(const Arg& a) const {
    return a.kind == Arg::Kind::kConst ? 0 : p_.lens[static_cast<std::size_t>(a.id)];
  }

  // Row-major C[m,n] = A[m,k]·B(k,n) for `count` pairs (strides in floats) through column-major cuBLAS:
  // Cᵀ = B(k,n)ᵀ·Aᵀ.
  Status sgemm(std::int64_t count, std::int64_t m, std::int64_t n, std::int64_t k, const float* a,
               std::int64_t sa, const float* b, std::int64_t sb, bool trans_b, float alpha, float beta,
               float* c, std::int64_t sc) const {
    const auto i = [](std::int64_t v) { return static_cast<int>(v); };
    const cublasOperation_t ob = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = i(trans_b ? k : n);
    if (gemm_compute_ != CUBLAS_COMPUTE_32F) {
      if (count == 1) {
        FT_CUBLAS_TRY(cublasGemmEx(cublas_, ob, CUBLAS_OP_N, i(n), i(m), i(k), &alpha, b, CUDA_R_32F, ldb, a,
                                   CUDA_R_32F, i(k), &beta, c, CUDA_R_32F, i(n), gemm_compute_,
                                   CUBLAS_GEMM_DEFAULT));
      } else {
        FT_CUBLAS_TRY(cublasGemmStridedBatchedEx(cublas_, ob, CUBLAS_OP_N, i(n), i(m), i(k), &alpha, b, CUDA_R_32F,
                                                 ldb, sb, a, CUDA_R_32F, i(k), sa, &beta, c, CUDA_R_32F, i(n),
                                                 sc, i(count), gemm_compute_, CUBLAS_GEMM_DEFAULT));
      }
      return {};
    }
    if (count == 1) {
      FT_CUBLAS_TRY(
          cublasSgemm(cublas_, ob, CUBLAS_OP_N, i(n), i(m), i(k), &alpha, b, ldb, a, i(k), &beta, c, i(n)));
    } else {
      FT_CUBLAS_TRY(cublasSgemmStridedBatched(cublas_, ob, CUBLAS_OP_N, i(n), i(m), i(k), &alpha, b, ldb, sb,
                                              a, i(k), sa, &beta, c, i(n), sc, i(count)));
    }
    return {};
  }

  using Launch = std::function<Status(cudaStream_t)>;

  Expected<Launch> launch_of(const Unit& u) const {
    const int B = o_.batch;
    const Step& s = p_.steps[u.first];
    float* y = val_[static_cast<std::size_t>(u.out)];
    const float* x = ptr(s.args[0]);
    if (u.kind == Unit::Kind::kResizeBinary) {
      const Step& bs = p_.steps[u.last];
      const int side = s.fusion.side;
      const Arg other = bs.args[static_cast<std::size_t>(1 - side)];
      const ResizeOp r = std::get<ResizeOp>(s.op);
      const BinaryKind kind = std::get<BinaryOp>(bs.op).kind;
      const float* o = ptr(other);
      const std::int64_t obs = bstride(other);
      return Launch(
          [=](cudaStream_t st) { return launch_resize_binary(r, kind, side, B, x, o, obs, y, st); });
    }
    if (u.kind == Unit::Kind::kHeads) {
      const HeadsGroup& g = heads_[u.heads];
      HeadsJob j = g.job;
      for (std::size_t k = 0; k < g.outs.size(); ++k) j.out[k] = val_[static_cast<std::size_t>(g.outs[k])];
      const float* hx = val_[static_cast<std::size_t>(g.x)];
      const float* pk = g.packed;
      return Launch([=](cudaStream_t st) { return launch_heads(j, B, hx, pk, st); });
    }
    if (affine_skipped_.count(u.first)) return Launch([](cudaStream_t) { return Status{}; });
    if (std::holds_alternative<ConvJob>(s.op)) {
      GpuConv* c = convs_[conv_of_unit_.at(u.first)].get();
      if (const auto in = conv_input_.find(u.first); in != conv_input_.end()) x = ptr(in->second);
      void* ws = static_cast<char*>(arena_) + ws_at_;
      const float* res = u.act.has_residual ? ptr(u.residual) : nullptr;
      return Launch([=](cudaStream_t st) { return c->run(x, y, ws, st, res); });
    }
    const std::int64_t len = p_.lens[static_cast<std::size_t>(s.out)];
    if (const auto* op = std::get_if<UnaryOp>(&s.op)) {
      const UnaryOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_unary(v, x, y, len * B, st); });
    }
    if (const auto* op = std::get_if<ChannelAffineOp>(&s.op)) {
      if (s.args.size() < 3) return invalid_argument("node '" + s.node + "': ChannelAffine operands");
      const ChannelAffineOp v = *op;
      const float *sc = ptr(s.args[1]), *sh = ptr(s.args[2]);
      const int nb = B * static_cast<int>(len / std::max<std::int64_t>(1, v.channels * v.plane));  // NHWC: B·H·W
      return Launch([=](cudaStream_t st) { return launch_channel_affine(v, nb, x, sc, sh, y, st); });
    }
    if (const auto* op = std::get_if<ChannelPreluOp>(&s.op)) {
      if (s.args.size() < 2) return invalid_argument("node '" + s.node + "': PRelu operands");
      const ChannelPreluOp v = *op;
      const float* sl = ptr(s.args[1]);
      const OperandBias xb = deferred_bias(s.args[0]);
      const int nb = B * static_cast<int>(len / std::max<std::int64_t>(1, v.channels * v.plane));  // NHWC: B·H·W
      return Launch([=](cudaStream_t st) { return launch_channel_prelu(v, nb, x, sl, y, st, xb); });
    }
    if (const auto* op = std::get_if<BinaryOp>(&s.op)) {
      if (s.args.size() < 2) return invalid_argument("node '" + s.node + "': Binary operands");
      const BinaryOp v = *op;
      const float* b = ptr(s.args[1]);
      const std::int64_t as = bstride(s.args[0]), bs = bstride(s.args[1]);
      const OperandBias ab = deferred_bias(s.args[0]), bb = deferred_bias(s.args[1]);
      return Launch([=](cudaStream_t st) { return launch_binary(v, B, x, as, b, bs, y, st, ab, bb); });
    }
    if (const auto* op = std::get_if<TransposeOp>(&s.op)) {
      const TransposeOp v = *op;
      const std::int64_t xs = bstride(s.args[0]);
      return Launch([=](cudaStream_t st) { return launch_strided_copy(v, B, x, xs, y, st); });
    }
    if (const auto* op = std::get_if<MaxPoolOp>(&s.op)) {
      const MaxPoolOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_maxpool(v, B, x, y, st); });
    }
    if (const auto* op = std::get_if<AvgPoolOp>(&s.op)) {
      const AvgPoolOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_avgpool(v, B, x, y, st); });
    }
    if (const auto* op = std::get_if<ResizeOp>(&s.op)) {
      const ResizeOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_resize(v, B, x, y, st); });
    }
    if (const auto* op = std::get_if<GlobalAverageOp>(&s.op)) {
      const GlobalAverageOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_global_average(v, B, x, y, st); });
    }
    if (const auto* op = std::get_if<SoftmaxOp>(&s.op)) {
      const SoftmaxOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_softmax(v, B, x, y, st); });
    }
    if (const auto* op = std::get_if<ReduceMeanOp>(&s.op)) {
      const ReduceMeanOp v = *op;
      return Launch([=](cudaStream_t st) { return launch_reduce_mean(v, B, x, y, st); });
    }
    if (const auto* op = std::get_if<PadOp>(&s.op)) {
      const PadOp v = *op;
      const std::int64_t xs = bstride(s.args[0]);
      return Launch([=](cudaStream_t st) { return launch_pad(v, B, x, xs, y, st); });
    }
    if (const auto* op = std::get_if<ConcatOp>(&s.op)) {
      if (op->parts.size() != s.args.size())
        return invalid_argument("node '" + s.node + "': Concat operands");
      std::int64_t total = 0;
      for (auto q : op->parts) total += q;
      std::vector<std::pair<const float*, std::int64_t>> srcs;
      for (const auto& a : s.args) srcs.emplace_back(ptr(a), bstride(a));
      const ConcatOp v = *op;
      return Launch([=](cudaStream_t st) -> Status {
        std::int64_t at = 0;
        for (std::size_t k = 0; k < srcs.size(); ++k) {
          FT_TRY(launch_concat_part(v.outer, v.parts[k], v.inner, total, at, B, srcs[k].first, srcs[k].second,
                                    y, st));
          at += v.parts[k];
        }
        return {};
      });
    }
    if (const auto* op = std::get_if<GemvOp>(&s.op)) {
      const GemvOp g = *op;
      const float* w = ptr(s.args[1]);
      const float* bias = g.has_bias ? ptr(s.args[2]) : nullptr;
      const std::int64_t xs = bstride(s.args[0]);
      if (xs != g.k)
        return Status(Code::kDeclined, "node '" + s.node + "': Gemm input of another length than k");
      return Launch([=, this](cudaStream_t st) -> Status {
        if (bias) FT_TRY(launch_fill_rows(y, bias, g.n, B, st));
        // Y[B,n] = α·X[B,k]·W(k,n) + β·bias
        return sgemm(1, B, g.n, g.k, x, 0, w, 0, g.trans_b, g.alpha, bias ? g.beta : 0.0f, y, 0);
      });
    }
    if (const auto* op = std::get_if<MatMulOp>(&s.op)) {
      const MatMulOp m = *op;
      const float* b = ptr(s.args[1]);
      const std::int64_t xa = bstride(s.args[0]), xb = bstride(s.args[1]);
      const std::int64_t out_len = m.batch * m.m * m.n;
      // the whole batch as one strided batch when every image's pairs continue the previous image's
      const bool fold_a = m.batch == 1 ? true : m.a_stride * m.batch == xa;
      const bool fold_b =
          xb == 0 ? (m.b_stride == 0 || m.batch == 1) : (m.batch == 1 || m.b_stride * m.batch == xb);
      if (fold_a && fold_b) {
        const std::int64_t sa = m.batch == 1 ? xa : m.a_stride;
        const std::int64_t sb = xb == 0 ? 0 : (m.batch == 1 ? xb : m.b_stride);
        return Launch([=, this](cudaStream_t) {
          return sgemm(m.batch * B, m.m, m.n, m.k, x, sa, b, sb, m.trans_b, 1.0f, 0.0f, y, m.m * m.n);
        });
      }
      return Launch([=, this](cudaStream_t) -> Status {
        for (int img = 0; img < B; ++img)
          FT_TRY(sgemm(m.batch, m.m, m.n, m.k, x + img * xa, m.a_stride, b + img * xb, m.b_stride, m.trans_b,
                       1.0f, 0.0f, y + img * out_len, m.m * m.n));
        return {};
      });
    }
    return Status(Code::kDeclined, "node '" + s.node + "': op " + std::string(op_name(s.op)) + " on the GPU");
  }

  std::string kernel_of(const Unit& u, const Step& s, const GpuConv* c) const {
    if (c)
      return c->algo().kernel + (plan_detail_ && !c->algo().tried.empty() ? "[" + c->algo().tried + "]" : "") + (u.kind == Unit::Kind::kConvAct && !c->algo().fused ? "+act" : "") +
             (deferred_.count(u.out) ? "+bias-deferred" : "") +
             (u.act.kind == EpilogueAct::Kind::kPrelu ? "+prelu" : "") + (u.act.has_residual ? "+add" : "") +
             (bias_moved_from_.count(u.first) ? "+bias-to-next" : "") +
             (bias_moved_to_.count(u.first) ? "+in-bias" : "") + (conv_input_.count(u.first) ? "+in-affine" : "");
    if (u.kind == Unit::Kind::kResizeBinary) return "fused:resize+binary";
    if (u.kind == Unit::Kind::kHeads)
      return "own:heads(" + std::to_string(heads_[u.heads].outs.size()) + ")";
    if (affine_skipped_.count(u.first)) return "fused:affine-into-bf16-conv";
    const bool bf = gemm_compute_ != CUBLAS_COMPUTE_32F;
    if (std::holds_alternative<GemvOp>(s.op)) return bf ? "cublas:gemm_ex/bf16" : "cublas:sgemm";
    if (std::holds_alternative<MatMulOp>(s.op))
      return bf ? "cublas:gemm_strided_batched_ex/bf16" : "cublas:sgemm_strided_batched";
    return "own:" + std::string(op_name(s.op));
  }

  Status build_launches() {
    for (const auto& u : units_) {
      if (u.kind == Unit::Kind::kHeads) {
        const HeadsGroup& g = heads_[u.heads];
        bool placed = val_[static_cast<std::size_t>(g.x)] != nullptr;
        for (auto v : g.outs) placed = placed && val_[static_cast<std::size_t>(v)] != nullptr;
        if (!placed) return internal_error("unplaced value of the heads of '" + g.node + "'");
        auto l = launch_of(u);
        if (!l) return l.status();
        launches_.push_back(std::move(*l));
        plans_.push_back(StepPlan{g.node, kernel_of(u, p_.steps[u.first], nullptr), 0.0f});
        continue;
      }
      std::vector<std::size_t> members;
      for (std::size_t i = u.first; i <= u.last; ++i) members.push_back(i);
      if (u.extra != Unit::kNoStep) members.push_back(u.extra);
      for (std::size_t k = 0; k < members.size(); ++k)
        for (const auto& a : p_.steps[members[k]].args) {
          bool inner = false;  // produced by an earlier member of the unit (never stored)
          for (std::size_t q = 0; q < k; ++q)
            inner = inner || (a.kind == Arg::Kind::kValue && a.id == p_.steps[members[q]].out);
          if (a.kind == Arg::Kind::kValue && !val_[static_cast<std::size_t>(a.id)] && !inner)
            return invalid_argument("node '" + p_.steps[members[k]].node +
                                    "' reads a value inside a fused group");
        }
      if (!val_[static_cast<std::size_t>(u.out)])
        return internal_error("unplaced output of '" + p_.steps[u.first].node + "'");
      auto l = launch_of(u);
      if (!l) return l.status();
      launches_.push_back(std::move(*l));
      const Step& s = p_.steps[u.first];
      const auto c = conv_of_unit_.find(u.first);
      const GpuConv* conv = c == conv_of_unit_.end() ? nullptr : convs_[c->second].get();
      plans_.push_back(StepPlan{s.node, kernel_of(u, s, conv), conv ? conv->algo().us : 0.0f});
    }
    return {};
  }

  Status launch_all() const {
    for (std::size_t k = 0; k < launches_.size(); ++k)
      if (Status st = launches_[k](stream_); !st.ok())
        return st.with_context("node '" + p_.steps[units_[k].first].node + "'");
    return {};
  }

  // Band fusion (docs/design/faces.md §8.1 "band kernel"): a 1×1 conv unit [with Relu/Clip] whose one reader is
  // the next unit, a depthwise 3×3 conv (stride 1, pad 1) [with Relu/Clip] and nothing else in its epilogue,
  // optionally followed by the MaxPool 2×2/2 that alone reads it, runs as one launch_band when the kernel takes
  // it, its input and output regions do not overlap, and it is faster than the units it replaces (both timed
  // here, on the arena); the replaced units' intermediate values keep their (now unused) places.
  Status choose_bands() {
    if (o_.bands == PlanOptions::Bands::kOff || stream_ == nullptr) return {};
    const int B = o_.batch;
    std::vector<int> reads(p_.lens.size(), 0);
    for (const auto& st : p_.steps)
      for (const auto& a : st.args)
        if (a.kind == Arg::Kind::kValue) ++reads[static_cast<std::size_t>(a.id)];
    for (const auto& o : p_.outputs) reads[static_cast<std::size_t>(o.value)] += 2;
    std::map<std::size_t, std::size_t> conv_index;
    for (std::size_t i = 0, c = 0; i < p_.steps.size(); ++i)
      if (std::holds_alternative<ConvJob>(p_.steps[i].op)) conv_index[i] = c++;
    auto act_of_unit = [](const Unit& u, BandAct& a) {
      if (u.extra != Unit::kNoStep || u.act.has_residual) return false;
      if (u.act.kind == EpilogueAct::Kind::kNone) a = BandAct{0, 0.0f, 0.0f};
      else if (u.act.kind == EpilogueAct::Kind::kRelu) a = BandAct{1, 0.0f, 0.0f};
      else if (u.act.kind == EpilogueAct::Kind::kClip) a = BandAct{2, u.act.lo, u.act.hi};
      else return false;
      return true;
    };
    auto conv_unit = [](const Unit& u) { return u.kind == Unit::Kind::kStep || u.kind == Unit::Kind::kConvAct; };
    auto overlap = [&](std::int32_t a, std::int32_t b) {
      const std::uint64_t oa = offset_[static_cast<std::size_t>(a)], ob = offset_[static_cast<std::size_t>(b)];
      const std::uint64_t na = static_cast<std::uint64_t>(B) * lens(a) * 4;
      const std::uint64_t nb = static_cast<std::uint64_t>(B) * lens(b) * 4;
      return oa < ob + nb && ob < oa + na;
    };
    for (std::size_t k = 0; k + 1 < units_.size(); ++k) {
      const Unit& a = units_[k];
      const Unit& b = units_[k + 1];
      const Step& ps = p_.steps[a.first];
      const Step& ds = p_.steps[b.first];
      const auto* pw = std::get_if<ConvJob>(&ps.op);
      const auto* dw = std::get_if<ConvJob>(&ds.op);
      BandJob job;
      if (!pw || !dw || !conv_unit(a) || !conv_unit(b) || !pw->is_pointwise() || !dw->is_depthwise() ||
          ps.args[0].kind != Arg::Kind::kValue || ds.args[0].kind != Arg::Kind::kValue || ds.args[0].id != a.out ||
          reads[static_cast<std::size_t>(a.out)] != 1 || dw->cin != pw->cout || dw->kh != 3 || dw->kw != 3 ||
          dw->sh != 1 || dw->sw != 1 || dw->pt != 1 || dw->pl != 1 || dw->dh != 1 || dw->dw != 1 ||
          dw->h != pw->oh || dw->w != pw->ow || dw->oh != dw->h || dw->ow != dw->w || nhwc(a.out) ||
          nhwc(b.out) || nhwc(ps.args[0].id) || deferred_.count(a.out) || deferred_.count(b.out) ||
          !act_of_unit(a, job.pw_act) || !act_of_unit(b, job.dw_act))
        continue;
      job.cin = static_cast<int>(pw->cin), job.c = static_cast<int>(pw->cout);
      job.h = static_cast<int>(dw->h), job.w = static_cast<int>(dw->w);
      std::size_t k1 = k + 1;
      if (k + 2 < units_.size()) {
        const Unit& m = units_[k + 2];
        const Step& ms = p_.steps[m.first];
        const auto* mp = std::get_if<MaxPoolOp>(&ms.op);
        if (mp && m.kind == Unit::Kind::kStep && ms.args[0].kind == Arg::Kind::kValue && ms.args[0].id == b.out &&
            reads[static_cast<std::size_t>(b.out)] == 1 && mp->kh == 2 && mp->kw == 2 && mp->sh == 2 &&
            mp->sw == 2 && mp->pt == 0 && mp->pl == 0 && mp->channels == dw->cout && mp->h == dw->oh &&
            mp->w == dw->ow && mp->oh * 2 == mp->h && mp->ow * 2 == mp->w && !nhwc(m.out)) {
          job.pool = true;
          k1 = k + 2;
        }
      }
      const std::int32_t xv = ps.args[0].id, yv = units_[k1].out;
      if (!band_fits(job, B) || !val_[static_cast<std::size_t>(xv)] || !val_[static_cast<std::size_t>(yv)] ||
          overlap(xv, yv))
        continue;
      const auto [pw_w, pw_b] = conv_w_[conv_index.at(a.first)];
      const auto [dw_w, dw_b] = conv_w_[conv_index.at(b.first)];
      const float* x = val_[static_cast<std::size_t>(xv)];
      float* y = val_[static_cast<std::size_t>(yv)];
      Launch band = [=](cudaStream_t st) { return launch_band(job, B, x, pw_w, pw_b, dw_w, dw_b, y, st); };
      auto t_band = time_launches(std::span<const Launch>(&band, 1));
      if (!t_band) return t_band.status().with_context("node '" + ps.node + "' (band)");
      auto t_old = time_launches(std::span<const Launch>(launches_.data() + k, k1 - k + 1));
      if (!t_old) return t_old.status().with_context("node '" + ps.node + "'");
      if (plan_detail_)
        plans_[k].kernel += "[band " + std::to_string(static_cast<int>(*t_band)) + " us vs " +
                            std::to_string(static_cast<int>(*t_old)) + " us]";
      if (o_.bands == PlanOptions::Bands::kTimed && *t_band >= *t_old) continue;
      Unit u = make_unit(Unit::Kind::kBand, a.first, units_[k1].last, yv);
      units_[k] = u;
      launches_[k] = std::move(band);
      plans_[k] = StepPlan{ps.node, std::string("own:band") + (job.pool ? "+pool" : ""), *t_band};
      const auto from = static_cast<std::ptrdiff_t>(k + 1), to = static_cast<std::ptrdiff_t>(k1 + 1);
      units_.erase(units_.begin() + from, units_.begin() + to);
      launches_.erase(launches_.begin() + from, launches_.begin() + to);
      plans_.erase(plans_.begin() + from, plans_.begin() + to);
    }
    return {};
  }

  // Mean time of the launches run back to back, µs: one warm-up, then 5 timed repetitions.
  Expected<float> time_launches(std::span<const Launch> ls) const {
    cudaEvent_t a = nullptr, b = nullptr;
    FT_CUDA_TRY(cudaEventCreate(&a));
    if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
      FT_CUDA_IGNORE(cudaEventDestroy(a));
      return runtime::cuda_call_status(e, "cudaEventCreate", __FILE__, __LINE__);
    }
    constexpr int kReps = 5;
    Status st;
    for (const auto& l : ls)
      if (st.ok()) st = l(stream_);
    cudaError_t e = st.ok() ? cudaEventRecord(a, stream_) : cudaSuccess;
    for (int r = 0; r < kReps && st.ok() && e == cudaSuccess; ++r)
      for (const auto& l : ls)
        if (st.ok()) st = l(stream_);
    float ms = 0.0f;
    if (st.ok() && e == cudaSuccess) e = cudaEventRecord(b, stream_);
    if (st.ok() && e == cudaSuccess) e = cudaEventSynchronize(b);
    if (st.ok() && e == cudaSuccess) e = cudaEventElapsedTime(&ms, a, b);
    FT_CUDA_IGNORE(cudaEventDestroy(a));
    FT_CUDA_IGNORE(cudaEventDestroy(b));
    if (!st.ok()) return st;
    if (e != cudaSuccess) return runtime::cuda_call_status(e, "timing a band", __FILE__, __LINE__);
    return 1000.0f * ms / kReps;
  }

  // One eager pass with an event pair around every unit: StepPlan::us of every step as it runs in the plan
  // (benchmarks rank the steps by it). Not part of a run; the graph replays without the events.
  Status time_units() {
    if (stream_ == nullptr) return {};
    cudaEvent_t a = nullptr, b = nullptr;
    FT_CUDA_TRY(cudaEventCreate(&a));
    if (const cudaError_t e = cudaEventCreate(&b); e != cudaSuccess) {
      FT_CUDA_IGNORE(cudaEventDestroy(a));
      return runtime::cuda_call_status(e, "cudaEventCreate", __FILE__, __LINE__);
    }
    Status st;
    for (std::size_t k = 0; k < launches_.size() && st.ok(); ++k) {
      float ms = 0.0f;
      cudaError_t e = cudaEventRecord(a, stream_);
      if (e == cudaSuccess) st = launches_[k](stream_);
      if (e == cudaSuccess && st.ok()) e = cudaEventRecord(b, stream_);
      if (e == cudaSuccess && st.ok()) e = cudaEventSynchronize(b);
      if (e == cudaSuccess && st.ok()) e = cudaEventElapsedTime(&ms, a, b);
      if (e != cudaSuccess) st = runtime::cuda_call_status(e, "timing a step", __FILE__, __LINE__);
      plans_[k].us = 1000.0f * ms;
    }
    FT_CUDA_IGNORE(cudaEventDestroy(a));
    FT_CUDA_IGNORE(cudaEventDestroy(b));
    return st;
  }

  Status capture() {
    FT_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    Status st = launch_all();
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream_, &g);
    if (!st.ok()) {
      if (g) FT_CUDA_IGNORE(cudaGraphDestroy(g));
      FT_CUDA_IGNORE(cudaGetLastError());
      return st.with_context("capturing the program");
    }
    if (e != cudaSuccess) return runtime::cuda_call_status(e, "cudaStreamEndCapture", __FILE__, __LINE__);
    graph_ = g;
    FT_CUDA_TRY(cudaGraphInstantiate(&exec_, graph_, 0));
    FT_CUDA_TRY(cudaGraphUpload(exec_, stream_));
    return {};
  }

  static constexpr std::uint64_t kUnplaced = ~std::uint64_t{0};

  Program p_;  // a copy (the blobs are shared): the plan outlives the caller's Program
  PlanOptions o_;
  cudaStream_t stream_;
  std::vector<bool> nhwc_;  // per value: channels-last (empty: every value NCHW)
  // FACETRACE_FACES_PLAN_DETAIL=1: each conv's kernel name lists the candidates' plan-time times
  bool plan_detail_ = [] {
    const char* v = std::getenv("FACETRACE_FACES_PLAN_DETAIL");
    return v && v[0] == '1';
  }();
  std::vector<const float*> consts_;
  std::vector<std::pair<const float*, const float*>> conv_w_;  // per conv step: weights, bias (device)
  std::vector<Unit> units_;
  std::vector<std::uint64_t> offset_;
  std::uint64_t activation_bytes_ = 0, workspace_bytes_ = 0, ws_at_ = 0, cublas_ws_at_ = 0, arena_bytes_ = 0;
  std::uint64_t weight_bytes_ = 0;
  bool needs_cublas_ = false;
  void* arena_ = nullptr;
  void* weights_ = nullptr;
  std::vector<float*> val_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cublasComputeType_t gemm_compute_ = CUBLAS_COMPUTE_32F;  // bf16: CUBLAS_COMPUTE_32F_FAST_16BF (GemmEx)
  std::vector<std::unique_ptr<GpuConv>> convs_;
  int carried_ = 0;  // conv units that took their carried choice
  std::map<std::size_t, std::size_t> conv_of_unit_;
  std::map<std::int32_t, OperandBias> deferred_;  // conv output → its bias, added by its one reader
  std::set<std::size_t> bias_moved_from_, bias_moved_to_;  // conv units of an input-bias deferral
  std::set<std::size_t> affine_skipped_;      // ChannelAffine steps applied by the next (bf16) conv
  std::map<std::size_t, Arg> conv_input_;     // conv step → the input it reads instead (the affine's input)
  std::vector<Launch> launches_;
  std::vector<StepPlan> plans_;
  std::vector<HeadsGroup> heads_;  // the fused head groups (kHeads units)
  void* heads_w_ = nullptr;        // their packed weights (owned)
  std::uint64_t heads_bytes_ = 0;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

namespace {
constexpr std::uint32_t kChoicesMagic = 0x43434654;  // "TFCC": facetrace conv choices
constexpr std::size_t kChoicesHeader = 2 * sizeof(std::uint32_t);
}  // namespace

std::vector<std::byte> encode_conv_choices(std::span<const ConvChoice> choices) {
  std::vector<std::byte> b;
  if (choices.empty() || kChoicesHeader + choices.size() * sizeof(ConvChoice) > 16 * 1024) return b;
  const std::uint32_t head[2] = {kChoicesMagic, static_cast<std::uint32_t>(choices.size())};
  b.resize(kChoicesHeader + choices.size() * sizeof(ConvChoice));
  std::memcpy(b.data(), head, sizeof head);
  std::memcpy(b.data() + kChoicesHeader, choices.data(), choices.size() * sizeof(ConvChoice));
  return b;
}

Expected<std::vector<ConvChoice>> decode_conv_choices(std::span<const std::byte> blob) {
  std::uint32_t head[2] = {0, 0};
  if (blob.size() < kChoicesHeader) return invalid_argument("plan choices: " + std::to_string(blob.size()) + " bytes, shorter than their header");
  std::memcpy(head, blob.data(), sizeof head);
  if (head[0] != kChoicesMagic) return invalid_argument("plan choices: not a conv choice blob (bad magic)");
  if (blob.size() != kChoicesHeader + std::uint64_t{head[1]} * sizeof(ConvChoice))
    return invalid_argument("plan choices: " + std::to_string(head[1]) + " choices in " +
                            std::to_string(blob.size()) + " bytes");
  std::vector<ConvChoice> c(head[1]);
  if (!c.empty()) std::memcpy(c.data(), blob.data() + kChoicesHeader, c.size() * sizeof(ConvChoice));
  return c;
}

Expected<std::unique_ptr<GpuProgram>> GpuProgram::plan(const Program& program, const ConstTable& consts,
                                                       const PlanOptions& options, CUstream_st* stream) {
  // tf32 / bf16: the channels-last form first (docs/design/faces.md §8.3); when it cannot be planned (a conv
  // cuDNN declines channels-last), the NCHW form. A lost device is not retried.
  if (options.precision != Precision::kFp32 && options.nhwc) {
    auto r = rewrite_nhwc(program, options.batch);
    if (!r) return r.status();
    if (r->nhwc_convs > 0) {
      auto plan = std::make_unique<Plan>(r->program, options, stream, std::move(r->nhwc));
      const Status st = plan->build(consts);
      if (st.ok()) return std::unique_ptr<GpuProgram>(std::move(plan));
      if (st.code() == Code::kDeviceLost) return st;
    }
  }
  auto plan = std::make_unique<Plan>(program, options, stream);
  if (Status st = plan->build(consts); !st.ok()) return st;
  return std::unique_ptr<GpuProgram>(std::move(plan));
}

}  // namespace facetrace::faces::gpu
