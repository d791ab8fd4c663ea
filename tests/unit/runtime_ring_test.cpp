/// @file
/// ReadbackRing semantics on a fake copy engine (docs/design/runtime.md §1–§3): classes, lazy slots, free list, fail-closed
/// states, stale tickets, errors, stats, slot-count environment variable.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "facetrace/runtime/readback_ring.h"
#include "log_guard.h"

namespace facetrace::runtime {
namespace {

/// "Device" pointers are host pointers; copies happen at enqueue; completion is controlled by the test.
class FakeEngine final : public CopyEngine {
 public:
  struct Shared {
    std::map<std::uint32_t, int> result;  // id -> query code
    bool auto_complete = true;
    int created = 0;
  };
  explicit FakeEngine(Shared* s) : s_(s) {}
  Status create_slot(std::uint32_t id) override {
    s_->result[id] = 0;
    ++s_->created;
    return {};
  }
  Status enqueue_copy(std::uint32_t id, void* dst, const void* src, std::uint64_t bytes,
                      CUstream_st*) override {
    std::memcpy(dst, src, bytes);
    s_->result[id] = s_->auto_complete ? 0 : 600;
    return {};
  }
  int query(std::uint32_t id) override { return s_->result[id]; }

 private:
  Shared* s_;
};

struct RingFixture : ::testing::Test {
  std::vector<std::byte> host = std::vector<std::byte>(1 << 20);
  FakeEngine::Shared shared;
  std::unique_ptr<ReadbackRing> make(std::uint32_t slots, std::uint64_t budget = 1 << 20) {
    return std::make_unique<ReadbackRing>(std::span(host), RingOptions{budget, slots},
                                          std::make_unique<FakeEngine>(&shared));
  }
};

/// Records `n` 4-byte copies (all in the 4096-byte class) and returns their tickets; a refused one fails the
/// test and is left out.
std::vector<RingTicket> record_small(ReadbackRing& ring, int n) {
  static const int kValue = 1;
  std::vector<RingTicket> out;
  for (int i = 0; i < n; ++i) {
    auto t = ring.record_copy(&kValue, sizeof kValue, nullptr);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    if (t) out.push_back(*t);
  }
  return out;
}

TEST(ReadbackRingClass, rounds_to_4096_byte_classes) {
  EXPECT_EQ(*ReadbackRing::size_class(16), 4096u);
  EXPECT_EQ(*ReadbackRing::size_class(4096), 4096u);
  EXPECT_EQ(*ReadbackRing::size_class(4097), 8192u);
  EXPECT_EQ(*ReadbackRing::size_class(1), 4096u);
  EXPECT_FALSE(ReadbackRing::size_class(0).ok());
  EXPECT_FALSE(ReadbackRing::size_class(~std::uint64_t{0}).ok());
}

TEST(ReadbackRingEnv, clamps_the_slot_count_with_warnings) {
  ::unsetenv("FACETRACE_READBACK_RING_SLOTS");
  EXPECT_EQ(ReadbackRing::slots_from_env(), 256u);
  ::setenv("FACETRACE_READBACK_RING_SLOTS", "8", 1);
  EXPECT_EQ(ReadbackRing::slots_from_env(), 8u);
  for (const char* bad : {"0", "1", "100000", "many"}) {
    facetrace::testing::ExpectLogs logs;
    ::setenv("FACETRACE_READBACK_RING_SLOTS", bad, 1);
    const auto n = ReadbackRing::slots_from_env();
    EXPECT_EQ(n, std::string(bad) == "many" ? 256u : std::string(bad) == "100000" ? 256u : 2u) << bad;
    EXPECT_FALSE(logs.messages().empty()) << bad;
  }
  ::unsetenv("FACETRACE_READBACK_RING_SLOTS");
}

TEST_F(RingFixture, round_trips_bytes_and_frees_the_slot) {
  auto ring = make(4);
  std::vector<float> src = {1, 2, 3, 4, 5};
  auto t = ring->record_copy(src.data(), src.size() * 4, nullptr);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->size_class, 4096u);
  EXPECT_EQ(*ring->poll(*t), PollResult::kReady);
  std::vector<float> got;
  ASSERT_TRUE(ring->with_mapped(*t,
                                [&](std::span<const std::byte> b) {
                                  got.resize(b.size() / 4);
                                  std::memcpy(got.data(), b.data(), b.size());
                                })
                  .ok());
  EXPECT_EQ(got, src);
  // A collected ticket is stale.
  EXPECT_EQ(ring->poll(*t).status().code(), Code::kInvalidArgument);
  EXPECT_NE(ring->with_mapped(*t, [](auto) {}).what().find("already collected"), std::string::npos);
}

TEST_F(RingFixture, creates_slots_lazily_and_reuses_them_from_the_free_list) {
  auto ring = make(2);
  EXPECT_EQ(ring->stats().slots, 0u);
  int x = 7;
  for (int i = 0; i < 20; ++i) {
    auto t = ring->record_copy(&x, sizeof x, nullptr);
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    ASSERT_TRUE(ring->wait(*t, std::chrono::steady_clock::now() + std::chrono::seconds(1)).ok());
    ASSERT_TRUE(ring->with_mapped(*t, [](auto) {}).ok());
  }
  EXPECT_EQ(ring->stats().slots, 1u);  // LIFO free list: one slot served every round trip
  EXPECT_EQ(shared.created, 1);
  EXPECT_EQ(ring->stats().dispatches, 20u);
}

TEST_F(RingFixture, fails_closed_on_an_uncollected_ready_slot_and_counts_the_stall) {
  auto ring = make(2);
  int x = 1;
  const auto both = record_small(*ring, 2);
  ASSERT_EQ(both.size(), 2u);
  ASSERT_EQ(*ring->poll(both[0]), PollResult::kReady);
  ASSERT_EQ(*ring->poll(both[1]), PollResult::kReady);
  auto c = ring->record_copy(&x, 4, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().what().find("slot 0 of class 4096 is READY and uncollected: collect tickets before"),
            std::string::npos)
      << c.status().what();
  const auto s = ring->stats();
  EXPECT_EQ(s.stalls, 1u);
  EXPECT_EQ(s.peak_in_flight, 2u);
  EXPECT_EQ(s.dispatches, 2u);
  // Other classes are not blocked by the uncollected class.
  std::vector<std::byte> big(5000);
  EXPECT_TRUE(ring->record_copy(big.data(), big.size(), nullptr).ok());
  // Collecting one frees exactly that slot.
  ASSERT_TRUE(ring->with_mapped(both[0], [](auto) {}).ok());
  EXPECT_TRUE(ring->record_copy(&x, 4, nullptr).ok());
}

TEST_F(RingFixture, names_pending_slots_when_full_and_never_lends_pending_bytes) {
  shared.auto_complete = false;
  auto ring = make(2);
  int x = 1;
  const auto both = record_small(*ring, 2);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(*ring->poll(both[0]), PollResult::kPending);
  const Status lend = ring->with_mapped(both[0], [](auto) { ADD_FAILURE() << "visited pending bytes"; });
  EXPECT_NE(lend.what().find("is PENDING"), std::string::npos);
  auto c = ring->record_copy(&x, 4, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().what().find("PENDING (copy in flight)"), std::string::npos) << c.status().what();
  // A deadline that passes is a hang: the ring is lost.
  const Status hang = ring->wait(both[0], std::chrono::steady_clock::now() + std::chrono::milliseconds(5));
  EXPECT_EQ(hang.code(), Code::kDeviceLost);
  EXPECT_TRUE(ring->lost());
  EXPECT_EQ(ring->record_copy(&x, 4, nullptr).status().code(), Code::kDeviceLost);
}

TEST_F(RingFixture, collects_an_error_slot_as_its_error_then_reuses_it) {
  auto ring = make(2);
  int x = 1;
  auto a = ring->record_copy(&x, 4, nullptr);
  ASSERT_TRUE(a.ok());
  shared.result[0] = 1;  // cudaErrorInvalidValue: not sticky
  EXPECT_EQ(*ring->poll(*a), PollResult::kError);
  auto b = ring->record_copy(&x, 4, nullptr);
  auto c = ring->record_copy(&x, 4, nullptr);
  ASSERT_TRUE(b.ok());
  ASSERT_FALSE(c.ok());  // slot 0 is ERROR (uncollected), slot 1 READY
  EXPECT_NE(c.status().what().find("READY and uncollected"), std::string::npos);
  const Status err = ring->with_mapped(*a, [](auto) { ADD_FAILURE(); });
  EXPECT_EQ(err.code(), Code::kDeclined);
  EXPECT_NE(err.what().find("ERROR"), std::string::npos);
  EXPECT_FALSE(ring->lost());
  EXPECT_TRUE(ring->record_copy(&x, 4, nullptr).ok());
}

TEST_F(RingFixture, stays_within_the_byte_budget) {
  auto ring = make(256, 3 * 4096);
  std::vector<std::byte> v(8192);
  auto a = ring->record_copy(v.data(), 8192, nullptr);
  ASSERT_TRUE(a.ok());
  auto b = ring->record_copy(v.data(), 8192, nullptr);  // would exceed 12 KiB
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kOutOfMemory);
  EXPECT_TRUE(ring->record_copy(v.data(), 100, nullptr).ok());  // 4 KiB still fits
  EXPECT_EQ(ring->stats().pinned_bytes, 3u * 4096u);
}

// A render's chunks change size with its timing (tracer.md §10.2), so every chunk may open a new class: FREE slots
// of other classes must give their bytes back, or the budget fills with idle classes and the GPU declines.
TEST_F(RingFixture, reclaims_free_slots_of_other_classes_when_sizes_keep_changing) {
  constexpr std::uint64_t kPage = 4096;
  // 18 pages: one slot of up to 6 pages in flight leaves 12 in at most two gaps, one of them ≥ 6 pages; the
  // classes 1..6 pages together (21) do not fit, so the ring must reclaim.
  auto ring = make(256, 18 * kPage);
  const int pages[] = {1, 4, 6, 2, 5, 3, 6, 1, 5, 2, 4, 3};
  std::optional<RingTicket> in_flight;
  std::vector<std::uint32_t> payload;
  std::uint32_t in_flight_tag = 0;
  for (std::uint32_t round = 0; round < 120; ++round) {
    const std::uint64_t bytes = pages[round % 12] * kPage - 4 * (round % 5);  // a class's lengths vary too
    payload.assign(bytes / 4, round);
    auto t = ring->record_copy(payload.data(), bytes, nullptr);
    ASSERT_TRUE(t.ok()) << "round " << round << ": " << t.status().to_string();
    if (in_flight) {
      ASSERT_TRUE(ring->with_mapped(*in_flight, [&](std::span<const std::byte> b) {
                        std::vector<std::uint32_t> got(b.size() / 4);
                        std::memcpy(got.data(), b.data(), got.size() * 4);
                        for (std::uint32_t v : got) ASSERT_EQ(v, in_flight_tag);
                      }).ok());
    }
    in_flight = *t;
    in_flight_tag = round;
  }
  const RingStats s = ring->stats();
  EXPECT_EQ(s.dispatches, 120u);
  EXPECT_EQ(s.stalls, 0u);
  EXPECT_GT(s.reclaimed, 0u);
  EXPECT_LE(s.pinned_bytes, 18 * kPage);
  EXPECT_LE(shared.created, 18);  // engine slots (CUDA events) are reused, not created per class
}

TEST_F(RingFixture, a_reclaimed_slot_turns_its_old_tickets_stale_and_full_names_the_held_bytes) {
  auto ring = make(256, 3 * 4096);
  std::vector<std::byte> v(3 * 4096);
  auto a = ring->record_copy(v.data(), 4096, nullptr);
  auto b = ring->record_copy(v.data(), 8192, nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(ring->with_mapped(*a, [](auto) {}).ok());
  ASSERT_TRUE(ring->with_mapped(*b, [](auto) {}).ok());
  auto c = ring->record_copy(v.data(), 3 * 4096, nullptr);  // both FREE slots give their pages back
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(ring->stats().reclaimed, 2u);
  EXPECT_EQ(ring->stats().slots, 1u);
  EXPECT_EQ(ring->stats().pinned_bytes, 3u * 4096u);
  for (const RingTicket& old : {*a, *b}) {
    const Status st = ring->poll(old).status();
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.to_string();
  }
  // c is held (uncollected): a new class finds no room and the message says who holds the budget.
  auto d = ring->record_copy(v.data(), 4096, nullptr);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kOutOfMemory);
  EXPECT_NE(d.status().what().find("held by 1 uncollected"), std::string::npos) << d.status().what();
  ASSERT_TRUE(ring->with_mapped(*c, [](auto) {}).ok());
  EXPECT_TRUE(ring->record_copy(v.data(), 4096, nullptr).ok());  // collected: its pages serve again
}

TEST_F(RingFixture, rejects_stale_tickets_after_reuse) {
  auto ring = make(2);
  int x = 1;
  auto a = ring->record_copy(&x, 4, nullptr);
  ASSERT_TRUE(ring->with_mapped(*a, [](auto) {}).ok());
  auto b = ring->record_copy(&x, 4, nullptr);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->slot, a->slot);
  const auto st = ring->poll(*a).status();
  EXPECT_NE(st.what().find("stale ticket"), std::string::npos) << st.what();
  RingTicket longer = *b;  // a ticket claiming more bytes than the slot's copy is refused, not lent
  longer.byte_len = 4096;
  const auto bad = ring->host_offset(longer).status();
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.what().find("holds 4 bytes, the ticket says 4096"), std::string::npos) << bad.what();
  EXPECT_TRUE(ring->with_mapped(*b, [](auto) {}).ok());
}

}  // namespace
}  // namespace facetrace::runtime
