/// @file
/// The GPU tracer's request logic (TraceWorkload + render loop) on the simulated executor: the sim runs the
/// tracer op with the CPU physics, so chunking, seeding, batches, cancellation and device loss are checked
/// bit for bit against the CPU tracer without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "facetrace/runtime/testing/simulated_executor.h"
#include "facetrace/tracer/cpu_tracer.h"
#include "facetrace/tracer/renderer.h"
#include "log_guard.h"
#include "sim_trace_op.h"
#include "gpu/ops.h"
#include "physics/transport.h"
#include "cpu/trace_params.h"

namespace facetrace::tracer {
namespace {

using facetrace::testing::ExpectLogs;
using runtime::Outcome;

/// The kernel configuration of the last chunk the simulated op ran.
KernelConfig& last_kernel_config() {
  static KernelConfig config{0, 0, 0};
  return config;
}

/// The tracer op on the simulated device (tests/support/sim_trace_op.h), recording each chunk's kernel
/// configuration.
Status sim_trace_chunk(runtime::SimDevice& dev, const runtime::OpArgs& a) {
  return testing::sim_trace_chunk(dev, a, &last_kernel_config());
}

Scene tiny_scene(std::uint32_t w = 19, std::uint32_t h = 13) {
  Scene s = builtin_diamond_scene();
  s.width = w;
  s.height = h;
  s.max_bounces = 8;
  return s;
}

struct Harness {
  runtime::ManualClock clock;
  runtime::SimulatedExecutor* sim = nullptr;
  std::unique_ptr<runtime::GpuBackend> backend;
  /// `max_attempts`: replacements allowed per hour (the soak-like tests lose the device many times).
  /// `ring_bytes`: the readback ring's budget (0: the executor's default).
  explicit Harness(int max_attempts = 6, std::uint64_t ring_bytes = 0) {
    runtime::ExecutorOptions options;
    if (ring_bytes > 0) options.ring_bytes = ring_bytes;
    auto ex = runtime::make_simulated_executor(options);
    sim = ex.get();
    sim->add_op(kOpTraceChunk, sim_trace_chunk);
    runtime::RecoveryConfig config;
    config.cool_down = std::chrono::duration<double>(0.0);
    config.max_attempts = max_attempts;
    backend = runtime::GpuBackend::with_executor(std::move(ex), clock, config);
  }
};

Film cpu_film(const Scene& s, std::uint32_t first, std::uint32_t n) {
  Film f(s.width, s.height);
  EXPECT_TRUE(cpu_accumulate(s, first, n, f, {}).ok());
  return f;
}

void expect_same_film(const Film& a, const Film& b) {
  ASSERT_EQ(a.xyz.size(), b.xyz.size());
  EXPECT_EQ(0, std::memcmp(a.xyz.data(), b.xyz.data(), a.xyz.size() * sizeof(float))) << "sums differ";
  EXPECT_EQ(a.samples, b.samples);
  EXPECT_EQ(a.nonfinite, b.nonfinite);
}

TEST(TraceWorkload, chunked_equals_whole_frame_and_the_cpu_bit_for_bit) {
  Harness h;
  const Scene s = tiny_scene();
  Film whole(s.width, s.height), chunked(s.width, s.height);
  TraceWorkload w1(s, 0, 6, whole);
  ASSERT_EQ(h.backend->accumulate(w1), Outcome::kDone);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 7;  // 36 chunks over 18 turns
  TraceWorkload w2(s, 0, 6, chunked, tiny);
  ASSERT_EQ(h.backend->accumulate(w2), Outcome::kDone);
  EXPECT_GT(w2.chunks(), 30);
  expect_same_film(whole, chunked);
  expect_same_film(whole, cpu_film(s, 0, 6));
}

// A render's chunk sizes follow its timing (docs/design/tracer.md §10.2), so chunk after chunk may open a new ring
// size class; the idle classes must give their bytes back (docs/design/runtime.md §2 "Reclaiming") or, once they
// fill the budget, the GPU declines (a 2048² farm job did, session 18). 40 requests, each of its own chunk size
// (a new 4 KiB class: 12 bytes a pixel), through a 2 MiB ring that their classes together overflow.
TEST(TraceWorkload, chunk_sizes_that_keep_changing_never_fill_the_readback_ring) {
  Harness h(6, 2ull << 20);
  const Scene s = tiny_scene(128, 128);
  Film f(s.width, s.height);
  for (std::uint32_t k = 1; k <= 40; ++k) {
    GpuChunkOptions o;
    o.max_chunk_pixels = 341 * k + 1;
    TraceWorkload w(s, k - 1, 1, f, o);
    ASSERT_EQ(h.backend->accumulate(w), Outcome::kDone) << "request " << k;
  }
  expect_same_film(f, cpu_film(s, 0, 40));
  auto stats = h.sim->ring_stats();
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();
  EXPECT_GT(stats->reclaimed, 0u);
  EXPECT_LE(stats->pinned_bytes, 2ull << 20);
}

TEST(TraceWorkload, continues_the_callers_running_sums) {
  Harness h;
  const Scene s = tiny_scene();
  Film f = cpu_film(s, 0, 5);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 11;
  TraceWorkload w(s, 5, 4, f, tiny);
  ASSERT_EQ(h.backend->accumulate(w), Outcome::kDone);
  expect_same_film(f, cpu_film(s, 0, 9));  // [0,5) then [5,9) == [0,9) (docs/design/tracer.md §9 G3)
}

TEST(TraceWorkload, interleaved_requests_on_two_films_keep_them_apart) {
  // Requests swap their pooled sums buffer into the film on Done and return the film's old buffer to the pool:
  // two films of one size, requests alternating between them (one cancelled), must each hold their own sums.
  Harness h;
  const Scene s = tiny_scene();
  Film a(s.width, s.height), b(s.width, s.height);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 9;
  const std::uint32_t ranges[][3] = {{0, 0, 3}, {1, 0, 2}, {0, 3, 3}, {1, 2, 3}, {0, 6, 1}};
  for (const auto& r : ranges) {
    TraceWorkload w(s, r[1], r[2], r[0] == 0 ? a : b, tiny);
    ASSERT_EQ(h.backend->accumulate(w), Outcome::kDone);
    if (r[0] == 1) {
      std::atomic<bool> cancel{true};
      TraceWorkload c(s, 100, 4, a, tiny);  // cancelled before its first chunk: a is untouched
      EXPECT_EQ(h.backend->accumulate(c, &cancel), Outcome::kCancelled);
    }
  }
  expect_same_film(a, cpu_film(s, 0, 7));
  expect_same_film(b, cpu_film(s, 0, 5));
}

TEST(TraceWorkload, returns_every_tuple_in_test_mode) {
  Harness h;
  const Scene s = tiny_scene(5, 4);
  Film f(s.width, s.height);
  GpuChunkOptions o;
  o.return_tuples = true;
  o.max_chunk_pixels = 3;
  TraceWorkload w(s, 10, 3, f, o);
  ASSERT_EQ(h.backend->accumulate(w), Outcome::kDone);
  ASSERT_EQ(w.tuples().size(), 20u * 3 * 3);
  const auto params = make_trace_params(s);
  const auto planes = make_facet_planes(s);
  for (std::uint32_t p = 0; p < 20; ++p)
    for (std::uint32_t k = 0; k < 3; ++k) {
      const auto r = physics::trace_sample(params, planes.data(), p % 5, p / 5, 10 + k);
      EXPECT_EQ(w.tuples()[(p * 3 + k) * 3 + 1], r.y) << "pixel " << p << " sample " << 10 + k;
    }
}

TEST(TraceWorkload, a_loss_mid_request_declines_and_the_render_falls_back_without_double_counting) {
  Harness h;
  const Scene s = tiny_scene();
  Film f(s.width, s.height);
  h.sim->arm_loss_on_invoke(4);
  RenderOptions o;
  o.device = RenderDevice::kGpu;
  o.backend = h.backend.get();
  o.samples_per_request = 3;
  o.chunk.max_chunk_pixels = 50;
  ExpectLogs logs;  // the loss is logged at warn
  auto report = render(s, 0, 9, f, o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_GE(report->declined, 1u);
  EXPECT_EQ(report->gpu_samples + report->cpu_samples, 9u);
  for (auto n : f.samples) ASSERT_EQ(n, 9u);
  expect_same_film(f, cpu_film(s, 0, 9));  // the sim's GPU results equal the CPU's bit for bit
  EXPECT_TRUE(logs.contains("lost"));
  EXPECT_EQ(report->declined_by_loss, report->declined);  // a loss may fall back even under --device gpu
  ASSERT_EQ(report->decline_reasons.size(), report->declined);
  EXPECT_NE(report->decline_reasons[0].find("GPU lost"), std::string::npos) << report->decline_reasons[0];
}

TEST(TraceWorkload, a_decline_other_than_a_loss_fails_gpu_and_warns_once_under_auto_saying_why) {
  Harness h;
  const Scene s = tiny_scene();
  int calls = 0;
  h.sim->add_op(kOpTraceChunk, [&](runtime::SimDevice& d, const runtime::OpArgs& a) -> Status {
    if (++calls == 2) return {Code::kDeclined, "simulated: no kernel image for this chunk"};
    return sim_trace_chunk(d, a);
  });
  RenderOptions o;
  o.backend = h.backend.get();
  o.samples_per_request = 3;
  o.chunk.max_chunk_pixels = 50;
  o.device = RenderDevice::kGpu;
  Film f(s.width, s.height);
  auto gpu = render(s, 0, 9, f, o);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), Code::kDeclined);
  EXPECT_NE(gpu.status().what().find("samples [0, 3)"), std::string::npos) << gpu.status().what();
  EXPECT_NE(gpu.status().what().find("no kernel image for this chunk"), std::string::npos)
      << gpu.status().what();

  o.device = RenderDevice::kAuto;
  calls = 0;
  Film g(s.width, s.height);
  ExpectLogs logs;
  auto r = render(s, 0, 9, g, o);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->declined, 1u);
  EXPECT_EQ(r->declined_by_loss, 0u);
  ASSERT_EQ(r->decline_reasons.size(), 1u);
  EXPECT_NE(r->decline_reasons[0].find("samples [0, 3): "), std::string::npos) << r->decline_reasons[0];
  expect_same_film(g, cpu_film(s, 0, 9));
  calls = 1;  // decline the next request's first chunk too: no second warning in this process
  Film g2(s.width, s.height);
  ASSERT_TRUE(render(s, 0, 3, g2, o).ok());
  ASSERT_EQ(logs.messages().size(), 1u);
  EXPECT_TRUE(logs.contains("rendering on the CPU (said once)"));
}

TEST(TraceWorkload, cancellation_leaves_the_film_untouched) {
  Harness h;
  const Scene s = tiny_scene();
  Film f = cpu_film(s, 0, 2);
  const Film before = f;
  std::atomic<bool> cancel{false};
  int calls = 0;
  h.sim->add_op(kOpTraceChunk, [&](runtime::SimDevice& d, const runtime::OpArgs& a) {
    if (++calls == 3) cancel.store(true);
    return sim_trace_chunk(d, a);
  });
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 10;
  TraceWorkload w(s, 2, 3, f, tiny);
  EXPECT_EQ(h.backend->accumulate(w, &cancel), Outcome::kCancelled);
  expect_same_film(f, before);
}

TEST(TraceWorkload, batch_equals_single_and_an_unsupported_picture_is_declined_alone) {
  Harness h;
  Scene a = tiny_scene(), b = tiny_scene(11, 17), bad = tiny_scene();
  b.yaw = 0.7f;
  bad.lighting_preset = LightingPreset::kUvLamp365;  // needs fluorescence: the GPU declines it
  Film fa(a.width, a.height), fb(b.width, b.height), fbad(bad.width, bad.height), fb2(b.width, b.height);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 40;
  TraceWorkload wa(a, 0, 4, fa, tiny), wbad(bad, 0, 4, fbad, tiny), wb(b, 0, 4, fb, tiny);
  std::vector<runtime::Workload*> items{&wa, &wbad, &wb};
  std::vector<std::pair<std::size_t, Outcome>> seen;
  h.backend->accumulate_batch(items, nullptr, [&](std::size_t i, Outcome o) { seen.emplace_back(i, o); });
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0], std::make_pair(std::size_t{0}, Outcome::kDone));
  EXPECT_EQ(seen[1], std::make_pair(std::size_t{1}, Outcome::kDeclined));
  EXPECT_EQ(seen[2], std::make_pair(std::size_t{2}, Outcome::kDone));
  for (auto n : fbad.samples) EXPECT_EQ(n, 0u);
  TraceWorkload single(b, 0, 4, fb2, tiny);
  ASSERT_EQ(h.backend->accumulate(single), Outcome::kDone);
  expect_same_film(fb, fb2);
  expect_same_film(fa, cpu_film(a, 0, 4));
}

TEST(TraceWorkload, a_batch_is_one_chunk_stream_and_reports_in_order) {
  Harness h;
  Scene a = tiny_scene(), b = tiny_scene(11, 17), c = tiny_scene(7, 5);
  Film fa(a.width, a.height), fb(b.width, b.height), fc(c.width, c.height);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 60;
  TraceWorkload wa(a, 0, 3, fa, tiny), wb(b, 0, 3, fb, tiny), wc(c, 0, 3, fc, tiny);
  std::vector<runtime::Workload*> items{&wa, &wb, &wc};
  std::vector<int> invokes_at_report;
  std::vector<std::size_t> order;
  h.backend->accumulate_batch(items, nullptr, [&](std::size_t i, Outcome o) {
    EXPECT_EQ(o, Outcome::kDone);
    order.push_back(i);
    invokes_at_report.push_back(h.sim->invokes());
  });
  ASSERT_EQ(order, (std::vector<std::size_t>{0, 1, 2}));
  // Picture i is reported only after picture i+1's first chunk was queued (docs/design/tracer.md §10.6).
  EXPECT_EQ(invokes_at_report[0], wa.chunks() + 1);
  EXPECT_EQ(invokes_at_report[1], wa.chunks() + wb.chunks() + 1);
  EXPECT_EQ(invokes_at_report[2], wa.chunks() + wb.chunks() + wc.chunks());
  expect_same_film(fa, cpu_film(a, 0, 3));
  expect_same_film(fb, cpu_film(b, 0, 3));
  expect_same_film(fc, cpu_film(c, 0, 3));
}

TEST(TraceWorkload, a_loss_between_pictures_declines_every_picture_not_yet_reported) {
  Harness h;
  Scene a = tiny_scene(), b = tiny_scene(11, 17);
  Film fa(a.width, a.height), fb(b.width, b.height);
  GpuChunkOptions tiny;
  tiny.max_chunk_pixels = 60;
  TraceWorkload wa(a, 0, 3, fa, tiny), wb(b, 0, 3, fb, tiny);
  const int a_chunks = static_cast<int>((a.width * a.height + 59) / 60);
  h.sim->arm_loss_on_invoke(a_chunks + 1);  // b's first chunk: a's last chunk is still pending
  std::vector<runtime::Workload*> items{&wa, &wb};
  std::vector<Outcome> seen;
  {
    ExpectLogs logs;
    h.backend->accumulate_batch(items, nullptr, [&](std::size_t, Outcome o) { seen.push_back(o); });
  }
  EXPECT_EQ(seen, (std::vector<Outcome>{Outcome::kDeclined, Outcome::kDeclined}));
  for (auto n : fa.samples) EXPECT_EQ(n, 0u);
  for (auto n : fb.samples) EXPECT_EQ(n, 0u);
}

TEST(TraceWorkload, the_kernel_configuration_travels_in_the_chunk_arguments_and_never_changes_the_sums) {
  Harness h;
  const Scene s = tiny_scene();
  const Film cpu = cpu_film(s, 0, 3);
  const std::pair<const char*, KernelConfig> cases[] = {
      {"b128_r128", {128, 4, 0}}, {"b256_r64_s5", {256, 4, 5}}, {"b64", {64, 1, 0}}};
  for (const auto& [name, expected] : cases) {
    GpuChunkOptions o;
    o.kernel = name;
    o.max_chunk_pixels = 50;
    Film f(s.width, s.height);
    TraceWorkload w(s, 0, 3, f, o);
    ASSERT_EQ(h.backend->accumulate(w), Outcome::kDone) << name;
    EXPECT_TRUE(same_kernel_config(last_kernel_config(), expected)) << name;
    expect_same_film(f, cpu);
  }
  if (std::getenv("FACETRACE_TRACER_KERNEL") == nullptr) {  // no name, no variable: the default
    Film f(s.width, s.height);
    TraceWorkload w(s, 0, 3, f);
    ASSERT_EQ(h.backend->accumulate(w), Outcome::kDone);
    EXPECT_TRUE(same_kernel_config(last_kernel_config(), KernelConfig{256, 4, 6}));
  }
  GpuChunkOptions unknown;
  unknown.kernel = "b512";
  Film f(s.width, s.height);
  TraceWorkload w(s, 0, 3, f, unknown);
  EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);
  for (auto n : f.samples) EXPECT_EQ(n, 0u);
}

/// The tracer op that answers call `bad` (1-based) with a readback one float short: the chunk's collect then
/// fails without a device loss (an error of this request alone).
runtime::SimOpHandler short_reply_on_call(int bad, int& calls) {
  return [bad, &calls](runtime::SimDevice& d, const runtime::OpArgs& a) -> Status {
    if (++calls != bad) return sim_trace_chunk(d, a);
    TraceChunkArgs t;
    FT_TRY(a.args_as(t));
    std::vector<std::byte> out(a.in.begin(),
                               a.in.begin() + static_cast<std::ptrdiff_t>(t.chunk.range.pixel_count * 12));
    auto ticket = d.emit(out);  // no counter: 4 bytes short
    if (!ticket) return ticket.status();
    a.reply.tickets.push_back(*ticket);
    return {};
  };
}

/// Consecutive sample ranges of one film as chained requests in one batch (docs/design/tracer.md §10.7).
struct Chain {
  std::vector<std::unique_ptr<TraceWorkload>> work;
  std::vector<runtime::Workload*> items;
  Chain(const Scene& s, Film& f, const std::vector<std::pair<std::uint32_t, std::uint32_t>>& ranges,
        const std::vector<std::uint32_t>& max_chunk_pixels) {
    auto m = max_chunk_pixels.begin();
    for (const auto& [first, n] : ranges) {
      GpuChunkOptions o;
      o.max_chunk_pixels = *m++;
      work.push_back(std::make_unique<TraceWorkload>(s, first, n, f, o));
      if (work.size() > 1) work.back()->follow(*work[work.size() - 2]);
      items.push_back(work.back().get());
    }
  }
  std::vector<Outcome> run(runtime::GpuBackend& b) {
    std::vector<Outcome> seen;
    b.accumulate_batch(items, nullptr, [&](std::size_t, Outcome o) { seen.push_back(o); });
    return seen;
  }
};

TEST(TraceWorkload, chained_requests_in_one_batch_equal_the_whole_range_bit_for_bit) {
  // 247 pixels. Chunks of 100: the follower's first chunk never meets the previous request's last one (in
  // flight at 200..247). One chunk each (0: sized by the rule): the follower collects that chunk first. 100
  // then 230: the follower's first chunk stops short of the pending chunk.
  const Scene s = tiny_scene();
  const Film cpu = cpu_film(s, 0, 9);
  const std::vector<std::vector<std::uint32_t>> configs = {
      {100, 100, 100, 100}, {0, 0, 0, 0}, {100, 230, 100, 230}, {7, 0, 230, 11}};
  for (const auto& chunks : configs) {
    Harness h;
    Film f(s.width, s.height);
    Chain c(s, f, {{0, 2}, {2, 3}, {5, 1}, {6, 3}}, chunks);
    EXPECT_EQ(c.run(*h.backend), std::vector<Outcome>(4, Outcome::kDone)) << chunks[1];
    expect_same_film(f, cpu);
  }
}

TEST(TraceWorkload, a_chained_request_whose_previous_did_not_finish_declines_so_a_batch_commits_a_prefix) {
  const Scene s = tiny_scene();
  {
    // Call 3 is request 0's last chunk, still pending when request 1's first chunk read its seeds from
    // request 0's sums: request 0 fails at its drain, so request 1 (and 2 after it) must not commit.
    Harness h;
    int calls = 0;
    h.sim->add_op(kOpTraceChunk, short_reply_on_call(3, calls));
    Film f = cpu_film(s, 0, 1);
    const Film before = f;
    Chain c(s, f, {{1, 2}, {3, 2}, {5, 2}}, {100, 100, 100});
    EXPECT_EQ(c.run(*h.backend), std::vector<Outcome>(3, Outcome::kDeclined));
    expect_same_film(f, before);
  }
  {
    // Call 4 is request 1's first chunk: request 0 is done, 1 fails, 2 declines without running.
    Harness h;
    int calls = 0;
    h.sim->add_op(kOpTraceChunk, short_reply_on_call(4, calls));
    Film f(s.width, s.height);
    Chain c(s, f, {{0, 2}, {2, 2}, {4, 2}}, {100, 100, 100});
    EXPECT_EQ(c.run(*h.backend),
              (std::vector<Outcome>{Outcome::kDone, Outcome::kDeclined, Outcome::kDeclined}));
    expect_same_film(f, cpu_film(s, 0, 2));
    EXPECT_EQ(calls, 5);  // request 2 issued nothing
  }
}

TEST(Renderer, renders_sized_requests_in_chained_batches_and_redoes_a_failed_one_on_the_cpu) {
  const Scene s = tiny_scene();
  for (int bad : {0, 3, 8}) {
    Harness h;
    int calls = 0;
    h.sim->add_op(kOpTraceChunk, short_reply_on_call(bad, calls));
    Film f(s.width, s.height);
    RenderOptions o;
    o.device = RenderDevice::kAuto;  // a decline other than a device loss falls back (and may warn once)
    o.backend = h.backend.get();
    o.samples_per_request = 2;
    o.chunk.max_chunk_pixels = 100;  // 3 chunks per request
    // progress comes from the CPU tracer's workers, concurrently and not in order (CpuOptions::progress): one
    // worker makes the plain double and the non-decreasing check below valid (a data race under TSan with more)
    o.threads = 1;
    ExpectLogs logs;
    double progress = 0;
    o.progress = [&](double p) {
      EXPECT_GE(p, progress);
      progress = p;
    };
    auto report = render(s, 0, 11, f, o);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(progress, 1.0);
    EXPECT_EQ(report->gpu_samples + report->cpu_samples, 11u);
    EXPECT_EQ(report->declined, bad ? 1u : 0u) << bad;
    EXPECT_EQ(report->cpu_samples, bad ? 2u : 0u) << bad;
    EXPECT_EQ(report->request_samples, (std::vector<std::uint32_t>{2, 2, 2, 2, 2, 1})) << bad;
    if (!bad) {
      EXPECT_EQ(calls, 18);  // 6 requests x 3 chunks: every request ran once
    }
    expect_same_film(f, cpu_film(s, 0, 11));
  }
}

TEST(Renderer, cancellation_inside_a_batch_keeps_whole_requests_only) {
  Harness h;
  const Scene s = tiny_scene();
  std::atomic<bool> cancel{false};
  int calls = 0;
  h.sim->add_op(kOpTraceChunk, [&](runtime::SimDevice& d, const runtime::OpArgs& a) {
    if (++calls == 8) cancel.store(true);  // inside request 2 (chunks 7..9)
    return sim_trace_chunk(d, a);
  });
  Film f(s.width, s.height);
  RenderOptions o;
  o.device = RenderDevice::kGpu;
  o.backend = h.backend.get();
  o.cancel = &cancel;
  o.samples_per_request = 2;
  o.chunk.max_chunk_pixels = 100;
  auto report = render(s, 0, 12, f, o);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), Code::kCancelled);
  const std::uint32_t kept = f.samples[0];
  EXPECT_LT(kept, 12u);
  EXPECT_EQ(kept % 2, 0u);
  expect_same_film(f, cpu_film(s, 0, kept));
}

TEST(Renderer, parses_device_names) {
  EXPECT_EQ(*parse_render_device("auto"), RenderDevice::kAuto);
  EXPECT_EQ(*parse_render_device("gpu"), RenderDevice::kGpu);
  const auto bad = parse_render_device("tpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().what().find("tpu"), std::string::npos);
}

TEST(Renderer, gpu_without_a_gpu_is_a_clear_error_and_auto_uses_the_cpu) {
  auto none = runtime::GpuBackend::disabled("no GPU in this test");
  const Scene s = tiny_scene(6, 5);
  Film f(s.width, s.height);
  RenderOptions o;
  o.backend = none.get();
  o.device = RenderDevice::kGpu;
  auto r = render(s, 0, 2, f, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotSupported);
  EXPECT_NE(r.status().what().find("no GPU in this test"), std::string::npos);
  o.device = RenderDevice::kAuto;
  auto r2 = render(s, 0, 2, f, o);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->device, "cpu");
  expect_same_film(f, cpu_film(s, 0, 2));
}

// --- lanes over one sample cursor (docs/design/tracer.md §10.7) ------------------------------------------------

/// The tracer op, but every `period`-th call loses the device (counted in `losses`).
runtime::SimOpHandler lose_every(int period, int& calls, int& losses) {
  return [period, &calls, &losses](runtime::SimDevice& d, const runtime::OpArgs& a) -> Status {
    if (++calls % period == 0) {
      ++losses;
      return Status(Code::kDeviceLost, "simulated loss on call " + std::to_string(calls));
    }
    return sim_trace_chunk(d, a);
  };
}

/// Waits until the backend's background replacement (GpuBackend::start_recovery) has finished.
void wait_for_recovery(const runtime::GpuBackend& b) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (b.recovering_in_background() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_FALSE(b.recovering_in_background()) << "the replacement did not finish within 10 s";
}

TEST(Renderer, a_lost_range_goes_back_to_the_cursor_and_the_replacement_takes_over_again) {
  const Scene s = tiny_scene();
  const Film whole = cpu_film(s, 0, 30);
  for (int lost_on :
       {1, 2, 6, 13, 27, 44}) {  // first chunk, mid request, request edges, inside later batches
    Harness h;
    h.sim->arm_loss_on_invoke(lost_on);
    RenderOptions o;
    o.device = RenderDevice::kGpu;  // a loss may fall back under --device gpu
    o.backend = h.backend.get();
    o.samples_per_request = 3;
    o.chunk.max_chunk_pixels = 50;  // 5 chunks per request
    // The schedule made deterministic: the replacement is up before the CPU lane's first slice ends.
    o.progress = [&](double) { wait_for_recovery(*h.backend); };
    Film f(s.width, s.height);
    ExpectLogs logs;  // the loss is logged at warn
    auto report = render(s, 0, 30, f, o);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    EXPECT_EQ(report->declined, 1u) << lost_on;
    EXPECT_EQ(report->declined_by_loss, 1u) << lost_on;
    EXPECT_EQ(report->gpu_samples + report->cpu_samples, 30u) << lost_on;
    std::uint64_t sum = 0;
    for (auto n : report->request_samples) sum += n;
    EXPECT_EQ(sum, 30u) << lost_on;
    // The CPU took the one slice after the loss (1 sample: its first), not the lost request.
    EXPECT_EQ(report->cpu_samples, 1u) << lost_on;
    EXPECT_GT(report->gpu_samples, 0u) << lost_on;
    // After the loss the replacement served GPU requests again.
    const auto lost = std::find(report->outcomes.begin(), report->outcomes.end(), Outcome::kDeclined);
    ASSERT_NE(lost, report->outcomes.end());
    EXPECT_NE(std::find(lost, report->outcomes.end(), Outcome::kDone), report->outcomes.end()) << lost_on;
    EXPECT_EQ(h.sim->restarts(), 1) << lost_on;
    for (auto n : f.samples) ASSERT_EQ(n, 30u) << lost_on;
    expect_same_film(f, whole);  // every sample once, in ascending order: the fault-free sums bit for bit
  }
}

TEST(Renderer, many_losses_lose_no_sample_count_none_twice_and_keep_the_sums_bit_exact) {
  const Scene s = tiny_scene();
  const Film whole = cpu_film(s, 0, 40);
  for (int period : {2, 3, 5, 7, 11}) {
    Harness h(1000);
    int calls = 0, losses = 0;
    h.sim->add_op(kOpTraceChunk, lose_every(period, calls, losses));
    RenderOptions o;
    o.backend = h.backend.get();
    o.samples_per_request = 4;
    o.chunk.max_chunk_pixels = 50;
    Film f(s.width, s.height);
    ExpectLogs logs;
    auto report = render(s, 0, 40, f, o);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    wait_for_recovery(*h.backend);  // the last loss's replacement may still be starting
    EXPECT_GT(losses, 0) << period;
    EXPECT_EQ(report->declined_by_loss, static_cast<std::uint32_t>(losses)) << period;
    EXPECT_EQ(report->declined, report->declined_by_loss) << period;
    EXPECT_EQ(h.sim->restarts(), losses) << period;  // every loss replaced, nothing else restarted
    EXPECT_EQ(report->gpu_samples + report->cpu_samples, 40u) << period;
    for (auto n : f.samples) ASSERT_EQ(n, 40u) << period;
    expect_same_film(f, whole);
  }
}

TEST(Renderer, a_hung_chunk_is_lost_after_the_measured_deadline_and_the_render_completes) {
  const Scene s = tiny_scene();
  Harness h;
  // Request 1 measures the stream (start-up deadline); the hang is in request 3 of the same batch, whose chunks
  // wait at most runtime::hang_deadline(10 x the slowest chunk so far): the 1 s floor on this fast simulation.
  h.sim->arm_hang_on_invoke(12);
  RenderOptions o;
  o.backend = h.backend.get();
  o.samples_per_request = 3;
  o.chunk.max_chunk_pixels = 50;
  o.progress = [&](double) { wait_for_recovery(*h.backend); };  // the replacement is up after one CPU slice
  Film f(s.width, s.height);
  ExpectLogs logs;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = render(s, 0, 30, f, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_GE(seconds, 0.9);  // the hung chunk waited out its deadline ...
  EXPECT_LT(seconds, 4.0);  // ... of about a second, not the start-up deadline of 10 s
  EXPECT_EQ(report->declined_by_loss, 1u);
  ASSERT_EQ(report->decline_reasons.size(), 1u);
  EXPECT_NE(report->decline_reasons[0].find("deadline of 1000 ms"), std::string::npos)
      << report->decline_reasons[0];
  EXPECT_EQ(h.sim->restarts(), 1);
  EXPECT_EQ(report->cpu_samples, 1u);  // one slice while the replacement came up
  // The new child's first request has the start-up deadline; the requests chained after it the measured one.
  EXPECT_EQ(h.sim->last_ring_wait_deadline(), std::chrono::milliseconds(1000));
  for (auto n : f.samples) ASSERT_EQ(n, 30u);
  expect_same_film(f, cpu_film(s, 0, 30));
}

TEST(Renderer, the_next_render_on_the_same_child_starts_with_the_measured_hang_deadline) {
  const Scene s = tiny_scene();
  Harness h;
  RenderOptions o;
  o.backend = h.backend.get();
  o.samples_per_request = 3;
  o.chunk.max_chunk_pixels = 50;
  Film first(s.width, s.height);
  ASSERT_TRUE(render(s, 0, 12, first, o).ok());
  h.sim->arm_hang_on_invoke(1);  // the next render's very first chunk
  o.progress = [&](double) { wait_for_recovery(*h.backend); };
  Film f(s.width, s.height);
  ExpectLogs logs;
  const auto t0 = std::chrono::steady_clock::now();
  auto report = render(s, 0, 12, f, o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_EQ(report->decline_reasons.size(), 1u);
  EXPECT_NE(report->decline_reasons[0].find("deadline of 1000 ms"), std::string::npos)
      << report->decline_reasons[0];
  EXPECT_LT(seconds, 4.0);  // not the start-up deadline of 10 s
  expect_same_film(f, first);
}

TEST(Renderer, a_device_that_stays_lost_leaves_the_rest_to_cpu_slices) {
  const Scene s = tiny_scene();
  Harness h;
  h.sim->set_restart_fails(true);
  h.sim->arm_loss_on_invoke(7);
  RenderOptions o;
  o.backend = h.backend.get();
  o.samples_per_request = 3;
  o.chunk.max_chunk_pixels = 50;
  Film f(s.width, s.height);
  ExpectLogs logs;  // the loss and the failed replacement are logged at warn
  auto report = render(s, 0, 20, f, o);
  wait_for_recovery(*h.backend);  // its failure is logged while `logs` expects it
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->declined_by_loss, 1u);
  EXPECT_TRUE(h.backend->is_lost());
  EXPECT_GE(h.backend->recovery_attempts(), 1u);
  EXPECT_EQ(report->gpu_samples, 3u);  // request 1 (chunks 1-5) was done; request 2 lost on its 2nd chunk
  EXPECT_EQ(report->cpu_samples, 17u);
  for (std::size_t i = 1; i < report->request_samples.size(); ++i) EXPECT_LE(report->request_samples[i], 3u);
  EXPECT_EQ(report->device, "gpu+cpu");
  expect_same_film(f, cpu_film(s, 0, 20));
}

/// Hybrid renders over the simulated executor: requests of 4, small chunks, a one-thread CPU lane judged with
/// `min_gain` (RenderOptions::hybrid_min_gain).
RenderOptions hybrid_options(Harness& h, double min_gain) {
  RenderOptions o;
  o.backend = h.backend.get();
  o.samples_per_request = 4;
  o.chunk.max_chunk_pixels = 50;
  o.hybrid = true;
  o.hybrid_threads = 1;
  o.hybrid_min_gain = min_gain;
  return o;
}

TEST(Renderer, hybrid_cpu_lanes_take_samples_after_each_batch_and_keep_the_gpu_only_bits) {
  const Scene s = tiny_scene();
  const Film whole = cpu_film(s, 0, 200);
  // 200 samples in requests of 4: the first batch (10 requests, ≈ 1 s by the 100 ms default) leaves room for a
  // CPU lane next to it
  for (int period : {0, 3, 7}) {  // 0: no loss; else a loss every `period`-th chunk
    Harness h(1000);
    int calls = 0, losses = 0;
    if (period) h.sim->add_op(kOpTraceChunk, lose_every(period, calls, losses));
    const RenderOptions o = hybrid_options(h, 0.0);  // the lane to the end, however the timing falls
    Film f(s.width, s.height);
    ExpectLogs logs;
    auto report = render(s, 0, 200, f, o);
    ASSERT_TRUE(report.ok()) << report.status().to_string();
    wait_for_recovery(*h.backend);
    EXPECT_EQ(report->gpu_samples + report->cpu_samples, 200u) << period;
    ASSERT_EQ(report->request_on_gpu.size(), report->request_samples.size());
    std::uint64_t on_cpu = 0;
    for (std::size_t i = 0; i < report->request_samples.size(); ++i)
      if (!report->request_on_gpu[i]) on_cpu += report->request_samples[i];
    EXPECT_EQ(on_cpu, report->cpu_samples) << period;
    if (!period) {
      // no loss: every CPU range is a hybrid lane's, and the GPU's first batch (alone: the baseline) came first
      EXPECT_GT(report->cpu_samples, 0u);
      EXPECT_EQ(report->declined, 0u);
      ASSERT_GE(report->request_samples.size(), 2u);
      EXPECT_TRUE(report->request_on_gpu[0]);
    }
    for (auto n : f.samples) ASSERT_EQ(n, 200u) << period;
    expect_same_film(f, whole);  // per-sample films committed in order: the CPU-only (= GPU-only) bits
    if (!period) {
      EXPECT_EQ(report->hybrid_stopped, "");  // hybrid_min_gain 0: never judged out
    }
  }
}

TEST(Renderer, a_hybrid_lane_that_does_not_pay_stops_after_two_batches_and_keeps_the_bits) {
  const Scene s = tiny_scene();
  // Enough samples for a baseline batch and two lane batches however fast the lane is against the simulated
  // GPU (under TSan the lane takes a much larger share of each batch).
  constexpr std::uint32_t kSamples = 2000;
  Harness h(1000);
  const RenderOptions o = hybrid_options(h, 1e12);  // no lane saves a trillion times its cost
  Film f(s.width, s.height);
  auto report = render(s, 0, kSamples, f, o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  std::vector<std::size_t> cpu_ranges;
  std::string pattern;  // for failure messages: " g4 g4 c1 g4 …"
  for (std::size_t i = 0; i < report->request_on_gpu.size(); ++i) {
    if (!report->request_on_gpu[i]) cpu_ranges.push_back(i);
    pattern += (report->request_on_gpu[i] ? " g" : " c") + std::to_string(report->request_samples[i]);
  }
  // The lane's first batch has one sample, to measure the CPU. Where the CPU is that fast against the simulated
  // GPU (a plain build), the second batch is judged too and the lane stops there: CPU ranges next to the first two
  // lane batches only. Where one CPU sample is slower than its share of a batch (TSan), it stops after the first.
  ASSERT_GE(cpu_ranges.size(), 1u) << pattern;
  ASSERT_LE(cpu_ranges.size(), 2u) << pattern;
  EXPECT_NE(report->hybrid_stopped.find(cpu_ranges.size() == 2 ? "did not pay" : "does not fit"),
            std::string::npos)
      << report->hybrid_stopped << " —" << pattern;
  EXPECT_LT(cpu_ranges.back() + 1, report->request_on_gpu.size()) << pattern;  // GPU requests followed
  EXPECT_GT(report->gpu_samples, 0u);
  for (auto n : f.samples) ASSERT_EQ(n, kSamples);
  expect_same_film(f, cpu_film(s, 0, kSamples));
}

}  // namespace
}  // namespace facetrace::tracer
