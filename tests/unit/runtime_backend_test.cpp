/// @file
/// GpuBackend over the simulated executor with a manual clock: outcomes, write-only-on-Done, loss mid-request,
/// recovery limits, one recovering thread, cancellation, batches, scratch pool, residents.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "facetrace/runtime/backend.h"
#include "facetrace/runtime/testing/fault.h"
#include "facetrace/runtime/testing/ramp_workload.h"
#include "facetrace/runtime/testing/simulated_executor.h"
#include "log_guard.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;
using facetrace::testing::ExpectLogs;

struct Harness {
  ManualClock clock;
  SimulatedExecutor* sim = nullptr;
  std::unique_ptr<GpuBackend> backend;
  explicit Harness(RecoveryConfig config = {}) {
    auto ex = make_simulated_executor();
    sim = ex.get();
    backend = GpuBackend::with_executor(std::move(ex), clock, config);
  }
};

std::vector<float> expected_ramp(std::vector<float> start, float base, float step) {
  for (std::size_t i = 0; i < start.size(); ++i) start[i] += base + step * static_cast<float>(i);
  return start;
}

TEST(GpuBackend, names_outcomes_executor_states_and_modes) {
  EXPECT_EQ(outcome_name(Outcome::kDone), "Done");
  EXPECT_EQ(outcome_name(Outcome::kDeclined), "Declined");
  EXPECT_EQ(outcome_name(Outcome::kCancelled), "Cancelled");
  EXPECT_EQ(executor_state_name(ExecutorState::kNotStarted), "not started");
  EXPECT_EQ(executor_state_name(ExecutorState::kReady), "ready");
  EXPECT_EQ(executor_state_name(ExecutorState::kLost), "lost");
  EXPECT_EQ(executor_state_name(ExecutorState::kNone), "none");
  EXPECT_EQ(executor_mode_name(ExecutorMode::kInProcess), "in-process");
  EXPECT_EQ(executor_mode_name(ExecutorMode::kIsolated), "isolated");
  EXPECT_EQ(executor_mode_name(ExecutorMode::kSimulated), "simulated");
}

TEST(GpuBackend, done_adds_the_workload_into_the_callers_buffer) {
  Harness h;
  std::vector<float> out(1000, 1.0f);
  RampWorkload w(out, 2.0f, 0.5f, 64);  // 16 chunks: 8 turns
  EXPECT_EQ(h.backend->accumulate(w), Outcome::kDone);
  EXPECT_EQ(out, expected_ramp(std::vector<float>(1000, 1.0f), 2.0f, 0.5f));
  EXPECT_EQ(w.chunks_run(), 16);
  EXPECT_EQ(h.backend->state(), BackendState::kReady);
  EXPECT_TRUE(h.backend->adapter_label().has_value());
}

TEST(GpuBackend, a_loss_mid_request_declines_and_leaves_the_buffer_untouched) {
  Harness h;
  std::vector<float> out(640, 3.0f);
  const auto before = out;
  h.sim->arm_loss_on_invoke(5);  // third turn
  RampWorkload w(out, 1.0f, 1.0f, 64);
  {
    ExpectLogs logs;
    EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);
    EXPECT_TRUE(logs.contains("GPU device lost"));
  }
  EXPECT_EQ(out, before);
  EXPECT_TRUE(h.backend->is_lost());
  EXPECT_EQ(h.backend->state(), BackendState::kLost);
  EXPECT_FALSE(h.backend->adapter_label().has_value());
  ASSERT_TRUE(h.backend->last_lost_reason().has_value());
  EXPECT_NE(h.backend->last_lost_reason()->find("simulated device loss"), std::string::npos);
  // The first replacement starts at once: the next request recovers and runs.
  RampWorkload w2(out, 1.0f, 1.0f, 64);
  EXPECT_EQ(h.backend->accumulate(w2), Outcome::kDone);
  EXPECT_EQ(h.sim->restarts(), 1);
  EXPECT_EQ(out, expected_ramp(before, 1.0f, 1.0f));
  EXPECT_FALSE(h.backend->is_lost());
  EXPECT_TRUE(h.backend->last_lost_reason().has_value());  // kept after recovery
  // Lost again within the cool-down of that attempt: every call declines without touching the device.
  h.sim->arm_loss_on_invoke(1);
  {
    ExpectLogs logs;
    RampWorkload w3(out, 1.0f, 1.0f, 64);
    EXPECT_EQ(h.backend->accumulate(w3), Outcome::kDeclined);
  }
  const int invokes = h.sim->invokes();
  RampWorkload w4(out, 1.0f, 1.0f, 64);
  EXPECT_EQ(h.backend->accumulate(w4), Outcome::kDeclined);
  EXPECT_EQ(h.sim->invokes(), invokes);
  EXPECT_EQ(h.sim->restarts(), 1);
  // After the cool-down the next request recovers and runs.
  h.clock.advance(30s);
  RampWorkload w5(out, 1.0f, 1.0f, 64);
  EXPECT_EQ(h.backend->accumulate(w5), Outcome::kDone);
  EXPECT_EQ(h.sim->restarts(), 2);
  EXPECT_EQ(out, expected_ramp(expected_ramp(before, 1.0f, 1.0f), 1.0f, 1.0f));
}

TEST(GpuBackend, refuses_the_seventh_recovery_attempt_within_an_hour) {
  Harness h;
  ExpectLogs logs;
  h.sim->set_restart_fails(true);
  ASSERT_EQ(h.sim->inject_fault(FaultKind::kSimulatedLoss).code(), Code::kDeviceLost);
  std::vector<float> out(64);
  RampWorkload w(out, 1, 1, 64);
  EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);  // marks the backend lost
  ASSERT_TRUE(h.backend->is_lost());
  for (int i = 0; i < 6; ++i) {
    h.clock.advance(30s);
    EXPECT_FALSE(h.backend->try_recover());
    EXPECT_EQ(h.backend->recovery().attempts_in_window(), i + 1);
  }
  h.sim->set_restart_fails(false);
  h.clock.advance(30s);
  EXPECT_FALSE(h.backend->try_recover());  // 7th within the hour: refused without an attempt
  EXPECT_EQ(h.backend->recovery().attempts_in_window(), 6);
  h.clock.advance(1h);
  EXPECT_TRUE(h.backend->try_recover());
}

TEST(GpuBackend, counts_losses_by_reason_and_every_recovery_attempt) {
  // The counters behind `render --metrics-file` (docs/cli.md "Metrics").
  Harness h;
  ExpectLogs logs;
  EXPECT_TRUE(h.backend->losses_by_reason().empty());
  EXPECT_EQ(h.backend->recovery_attempts(), 0u);
  std::vector<float> out(64);
  for (int loss = 0; loss < 2; ++loss) {
    h.sim->arm_loss_on_invoke(1);
    RampWorkload w(out, 1, 1, 64);
    EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);
    ASSERT_TRUE(h.backend->is_lost());
    if (loss == 0) {  // one failed replacement before the good one
      h.sim->set_restart_fails(true);
      h.clock.advance(30s);
      EXPECT_FALSE(h.backend->try_recover());
      h.sim->set_restart_fails(false);
    }
    h.clock.advance(30s);
    EXPECT_TRUE(h.backend->try_recover());
  }
  std::uint64_t total = 0;
  for (const auto& [reason, n] : h.backend->losses_by_reason()) {
    EXPECT_NE(reason.find("simulated device loss"), std::string::npos) << reason;
    total += n;
  }
  EXPECT_EQ(total, 2u);
  EXPECT_EQ(h.backend->recovery_attempts(), 3u);
  EXPECT_EQ(h.backend->recoveries(), 2u);
}

TEST(GpuBackend, start_recovery_returns_at_once_and_replaces_the_device_in_the_background) {
  Harness h;
  ExpectLogs logs;
  h.sim->set_restart_delay(300ms);
  std::vector<float> out(64);
  h.sim->arm_loss_on_invoke(1);
  RampWorkload w(out, 1, 1, 64);
  EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);
  ASSERT_TRUE(h.backend->is_lost());
  const auto t0 = std::chrono::steady_clock::now();
  h.backend->start_recovery();
  h.backend->start_recovery();  // one replacement at a time
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_TRUE(h.backend->is_lost());
  while (h.backend->recovering_in_background()) std::this_thread::sleep_for(1ms);
  EXPECT_FALSE(h.backend->is_lost());
  EXPECT_EQ(h.sim->restarts(), 1);
  EXPECT_EQ(h.backend->recovery_attempts(), 1u);
  h.backend->start_recovery();  // not lost: nothing to do
  EXPECT_FALSE(h.backend->recovering_in_background());
  RampWorkload w2(out, 1, 1, 64);
  EXPECT_EQ(h.backend->accumulate(w2), Outcome::kDone);
}

TEST(GpuBackend, the_hang_deadline_is_ten_times_the_expected_wait_and_at_least_a_second) {
  using ms = std::chrono::duration<double, std::milli>;
  EXPECT_EQ(hang_deadline(ms(0.0)), 1000ms);
  EXPECT_EQ(hang_deadline(ms(99.0)), 1000ms);
  EXPECT_EQ(hang_deadline(ms(150.0)), 1500ms);
  EXPECT_EQ(hang_deadline(ms(2500.0)), 25000ms);
}

TEST(GpuBackend, only_one_thread_attempts_recovery) {
  RecoveryConfig c;
  c.cool_down = std::chrono::duration<double>(0.0);
  Harness h(c);
  ExpectLogs logs;
  h.sim->set_restart_delay(200ms);
  ASSERT_EQ(h.sim->inject_fault(FaultKind::kSimulatedLoss).code(), Code::kDeviceLost);
  std::vector<float> out(64);
  RampWorkload w(out, 1, 1, 64);
  EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);
  std::atomic<int> recovered{0}, declined{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] { (h.backend->try_recover() ? recovered : declined)++; });
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.sim->restarts(), 1);
  EXPECT_GE(recovered.load(), 1);
  EXPECT_GE(declined.load(), 1);
}

TEST(GpuBackend, a_backend_without_a_gpu_never_retries) {
  auto ex = make_simulated_executor();
  ex->set_no_gpu(true);
  auto* sim = ex.get();
  ManualClock clock;
  auto b = GpuBackend::with_executor(std::move(ex), clock);
  EXPECT_EQ(b->state(), BackendState::kNone);
  ASSERT_TRUE(b->unavailable_reason().has_value());
  EXPECT_NE(b->unavailable_reason()->find("no GPU"), std::string::npos);
  std::vector<float> out(10);
  RampWorkload w(out, 1, 1, 4);
  EXPECT_EQ(b->accumulate(w), Outcome::kDeclined);
  clock.advance(2h);
  EXPECT_FALSE(b->try_recover());
  EXPECT_EQ(sim->restarts(), 0);
  EXPECT_EQ(sim->invokes(), 0);

  auto d = GpuBackend::disabled("built without CUDA");
  EXPECT_EQ(d->accumulate(w), Outcome::kDeclined);
  EXPECT_EQ(*d->unavailable_reason(), "built without CUDA");
  EXPECT_FALSE(d->adapter_label().has_value());
}

TEST(GpuBackend, cancellation_adds_nothing) {
  Harness h;
  std::vector<float> out(512, 5.0f);
  const auto before = out;
  std::atomic<bool> cancel{true};
  RampWorkload w(out, 1, 1, 64);
  EXPECT_EQ(h.backend->accumulate(w, &cancel), Outcome::kCancelled);
  EXPECT_EQ(w.chunks_run(), 0);
  EXPECT_EQ(out, before);
  // Cancelled in the middle: an op that raises the flag while the third chunk runs.
  cancel = false;
  int calls = 0;
  h.sim->add_op(ops::kFillRamp, [&](SimDevice& dev, const OpArgs& a) -> Status {
    if (++calls == 3) cancel = true;
    FillRampArgs f;
    FT_TRY(a.args_as(f));
    std::vector<float> v(f.count, 1.0f);
    auto t = dev.emit(std::as_bytes(std::span(v)));
    if (!t) return t.status();
    a.reply.tickets.push_back(*t);
    return {};
  });
  RampWorkload w2(out, 1, 1, 64);
  EXPECT_EQ(h.backend->accumulate(w2, &cancel), Outcome::kCancelled);
  EXPECT_EQ(w2.chunks_run(), 3);
  EXPECT_EQ(out, before);
  EXPECT_EQ(h.sim->ring_stats()->in_flight, 0u);  // the chunk in flight was drained
}

TEST(GpuBackend, concurrent_requests_alternate_turns_of_two_chunks) {
  Harness h;
  std::mutex mu;
  std::vector<float> order;  // the base of each chunk, in device order
  h.sim->add_op(ops::kFillRamp, [&](SimDevice& dev, const OpArgs& a) -> Status {
    FillRampArgs f;
    FT_TRY(a.args_as(f));
    {
      std::lock_guard lock(mu);
      order.push_back(f.base);
    }
    std::this_thread::sleep_for(2ms);
    std::vector<float> v(f.count, f.base);
    auto t = dev.emit(std::as_bytes(std::span(v)));
    if (!t) return t.status();
    a.reply.tickets.push_back(*t);
    return {};
  });
  std::vector<float> a_out(16 * 20, 0.0f), b_out(16 * 20, 0.0f);
  RampWorkload a(a_out, 1.0f, 0.0f, 16), b(b_out, 2.0f, 0.0f, 16);
  std::atomic<int> started{0};
  auto run = [&](RampWorkload& w) {
    started.fetch_add(1);
    while (started.load() < 2) std::this_thread::yield();
    EXPECT_EQ(h.backend->accumulate(w), Outcome::kDone);
  };
  std::thread ta(run, std::ref(a)), tb(run, std::ref(b));
  ta.join();
  tb.join();
  ASSERT_EQ(order.size(), 40u);
  // While both wait, the turn alternates: no request runs more than kChunksPerTurn chunks in a row except at
  // the start (before the other queued) and at the end (after the other finished).
  std::size_t first_switch = 1;
  while (first_switch < order.size() && order[first_switch] == order[0]) ++first_switch;
  std::size_t last_switch = order.size() - 1;
  while (last_switch > 0 && order[last_switch - 1] == order.back()) --last_switch;
  ASSERT_LT(first_switch, last_switch) << "the two requests never interleaved";
  int run_len = 1;
  for (std::size_t i = first_switch + 1; i < last_switch; ++i) {
    run_len = order[i] == order[i - 1] ? run_len + 1 : 1;
    EXPECT_LE(run_len, kChunksPerTurn) << "at chunk " << i;
  }
}

/// Declines in can_run when told to.
class PickyRamp final : public Workload {
 public:
  PickyRamp(std::span<float> out, bool refuse) : inner_(out, 1, 1, 16), refuse_(refuse) {}
  Status can_run(const DeviceInfo&) override {
    return refuse_ ? Status(Code::kDeclined, "needs Tier 3") : Status{};
  }
  std::size_t scratch_bytes() const override { return inner_.scratch_bytes(); }
  void seed_scratch(std::span<std::byte> s) override { inner_.seed_scratch(s); }
  Expected<bool> run_chunk(Executor& ex, std::span<std::byte> s) override { return inner_.run_chunk(ex, s); }
  Status drain(Executor& ex, std::span<std::byte> s, bool d) override { return inner_.drain(ex, s, d); }
  void commit(std::span<const std::byte> s) override { inner_.commit(s); }

 private:
  RampWorkload inner_;
  bool refuse_;
};

TEST(GpuBackend, batch_outcomes_arrive_in_input_order_exactly_once) {
  Harness h;
  std::vector<std::vector<float>> outs(5, std::vector<float>(100, 0.0f));
  std::vector<std::unique_ptr<Workload>> items;
  for (int i = 0; i < 5; ++i) items.push_back(std::make_unique<PickyRamp>(outs[i], i == 2));
  std::vector<Workload*> ptrs;
  for (auto& w : items) ptrs.push_back(w.get());
  std::vector<std::pair<std::size_t, Outcome>> seen;
  h.backend->accumulate_batch(ptrs, nullptr, [&](std::size_t i, Outcome o) { seen.emplace_back(i, o); });
  ASSERT_EQ(seen.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(seen[i].first, i);
    EXPECT_EQ(seen[i].second, i == 2 ? Outcome::kDeclined : Outcome::kDone) << i;
  }
  EXPECT_EQ(outs[0], expected_ramp(std::vector<float>(100, 0.0f), 1, 1));
  EXPECT_EQ(outs[2], std::vector<float>(100, 0.0f));
}

TEST(GpuBackend, batch_loss_declines_the_rest_and_cancel_cancels_the_rest) {
  Harness h;
  ExpectLogs logs;
  std::vector<std::vector<float>> outs(4, std::vector<float>(64, 0.0f));
  std::vector<std::unique_ptr<RampWorkload>> items;
  std::vector<Workload*> ptrs;
  for (auto& o : outs) {
    items.push_back(std::make_unique<RampWorkload>(o, 1, 1, 16));  // 4 chunks each
    ptrs.push_back(items.back().get());
  }
  h.sim->arm_loss_on_invoke(6);  // inside item 1
  std::vector<std::pair<std::size_t, Outcome>> seen;
  h.backend->accumulate_batch(ptrs, nullptr, [&](std::size_t i, Outcome o) { seen.emplace_back(i, o); });
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0].second, Outcome::kDone);
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(seen[i].first, i);
    EXPECT_EQ(seen[i].second, Outcome::kDeclined);
    EXPECT_EQ(outs[i], std::vector<float>(64, 0.0f));
  }

  Harness h2;
  std::vector<std::vector<float>> outs2(3, std::vector<float>(64, 0.0f));
  std::vector<std::unique_ptr<RampWorkload>> items2;
  std::vector<Workload*> ptrs2;
  for (auto& o : outs2) {
    items2.push_back(std::make_unique<RampWorkload>(o, 1, 1, 16));
    ptrs2.push_back(items2.back().get());
  }
  std::atomic<bool> cancel{false};
  std::vector<Outcome> got;
  h2.backend->accumulate_batch(ptrs2, &cancel, [&](std::size_t, Outcome o) {
    got.push_back(o);
    cancel = true;  // cancel after the first picture is done
  });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], Outcome::kDone);
  EXPECT_EQ(got[1], Outcome::kCancelled);
  EXPECT_EQ(got[2], Outcome::kCancelled);
  EXPECT_EQ(outs2[1], std::vector<float>(64, 0.0f));
}

TEST(GpuBackend, concurrent_requests_all_finish_and_the_pool_keeps_at_most_two) {
  Harness h;
  std::vector<std::vector<float>> outs(8, std::vector<float>(300, 0.0f));
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      RampWorkload w(outs[i], static_cast<float>(i), 1, 32);
      if (h.backend->accumulate(w) == Outcome::kDone) ++done;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), 8);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(outs[i], expected_ramp(std::vector<float>(300, 0.0f), static_cast<float>(i), 1)) << i;
  EXPECT_LE(h.backend->pooled_scratch(), kMaxPooledScratch);
}

TEST(GpuBackend, residents_are_reuploaded_after_recovery) {
  RecoveryConfig c;
  c.cool_down = std::chrono::duration<double>(0.0);
  Harness h(c);
  ExpectLogs logs;
  std::vector<float> weights = {1, 2, 3, 4};
  ASSERT_TRUE(h.backend->executor()->put_resident("weights", std::as_bytes(std::span(weights))).ok());
  ASSERT_EQ(h.sim->inject_fault(FaultKind::kSimulatedLoss).code(), Code::kDeviceLost);
  std::vector<float> out(16);
  RampWorkload w(out, 1, 1, 16);
  EXPECT_EQ(h.backend->accumulate(w), Outcome::kDeclined);  // finds the loss
  RampWorkload w2(out, 1, 1, 16);
  EXPECT_EQ(h.backend->accumulate(w2), Outcome::kDone);  // recovers first (cool-down 0)
  EXPECT_EQ(h.sim->resident_uploads(), 2);
  const std::string name = "weights";
  OpCall call;
  call.op = ops::kResidentSum;
  call.args = std::as_bytes(std::span(name.data(), name.size()));
  auto r = h.backend->executor()->invoke(call);
  ASSERT_TRUE(r.ok());
  double sum = 0;
  ASSERT_TRUE(r->get(sum));
  EXPECT_EQ(sum, 10.0);
}

}  // namespace
}  // namespace facetrace::runtime
