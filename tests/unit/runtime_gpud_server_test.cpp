/// @file
/// The warm GPU server (`facetrace-gpud --serve PATH`, docs/runtime.md "A warm GPU server") serving a simulated
/// device: an executor attaches to it instead of starting a child, one process at a time (a second one starts a
/// child of its own), a server that dies or loses its device is a device loss whose restart falls back to a child,
/// and hostile clients do not take the server down.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "facetrace/runtime/executor.h"
#include "facetrace/runtime/testing/fault.h"
#include "ipc/protocol.h"
#include "ipc/session_socket.h"
#include "log_guard.h"

extern char** environ;

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;
using facetrace::testing::ExpectLogs;

/// `facetrace-gpud --serve <socket> --simulate` for one test, its stderr in a file; killed and reaped at the end.
class Server {
 public:
  Server() {
    static int n = 0;
    dir_ = std::filesystem::temp_directory_path() /
           ("ft-gpud-server-" + std::to_string(::getpid()) + "-" + std::to_string(n++));
    std::filesystem::create_directories(dir_);
    path_ = (dir_ / "gpud.sock").string();
    log_ = (dir_ / "server.log").string();
  }
  ~Server() {
    stop(SIGKILL);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  /// Starts it and waits until it accepts connections.
  ::testing::AssertionResult start() {
    const std::string gpud = find_gpud(ExecutorOptions{});
    std::vector<std::string> args = {gpud, "--serve", path_, "--simulate"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = ::posix_spawn(&pid_, gpud.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) return ::testing::AssertionFailure() << "posix_spawn " << gpud << ": " << std::strerror(rc);
    for (int i = 0; i < 500; ++i) {
      if (text().find("serving at") != std::string::npos) return ::testing::AssertionSuccess();
      std::this_thread::sleep_for(10ms);
    }
    return ::testing::AssertionFailure() << "the server did not come up: " << text();
  }
  /// Sends `sig` and reaps it; its wait status.
  int stop(int sig) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, sig);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  /// Waits up to `limit` for it to exit by itself; its wait status, or -1.
  int wait_exit(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return status;
      }
      std::this_thread::sleep_for(5ms);
    }
    return -1;
  }
  bool alive() const { return pid_ > 0 && ::kill(pid_, 0) == 0; }
  const std::string& path() const { return path_; }
  std::string text() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::filesystem::path dir_;
  std::string path_, log_;
  pid_t pid_ = -1;
};

ExecutorOptions options_for(const Server& s) {
  ExecutorOptions o;
  o.ring_bytes = 8ull << 20;
  o.transfer_bytes = 8ull << 20;
  o.simulate_child = true;  // only when a child is started
  o.start_deadline = 10s;
  o.control_deadline = 5s;
  o.gpud_socket = s.path();
  return o;
}

double sum_through_the_arena(Executor& ex) {
  std::vector<float> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  auto block = ex.arena().allocate(v.size() * 4);
  EXPECT_TRUE(block.ok());
  if (!block) return -1;
  std::memcpy(block->bytes().data(), v.data(), v.size() * 4);
  OpCall call;
  call.op = ops::kSumFloats;
  call.in = ArenaRange{block->range().offset, v.size() * 4};
  auto r = ex.invoke(call);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  double sum = -1;
  if (r) {
    EXPECT_TRUE(r->get(sum));
  }
  return sum;
}

TEST(GpudServer, an_executor_attaches_to_a_free_server_instead_of_starting_a_child) {
  Server s;
  ASSERT_TRUE(s.start());
  for (int round = 0; round < 2; ++round) {  // one session after the other
    ExecutorOptions o = options_for(s);
    o.gpud_path = "/nonexistent/facetrace-gpud";  // a child could not start: only the server can serve
    auto ex = make_isolated_executor(o);
    // The server notices the previous session's end when its socket closes, asynchronously: until then it
    // refuses (busy) and, without a child binary, the start fails. Give it up to 2 s (under load).
    bool started = ex->start().ok();
    for (int i = 0; !started && round > 0 && i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ex = make_isolated_executor(o);
      started = ex->start().ok();
    }
    ASSERT_TRUE(started) << ex->state_reason();
    EXPECT_EQ(ex->state(), ExecutorState::kReady);
    auto info = ex->info();
    ASSERT_TRUE(info.ok());
    EXPECT_TRUE(info->simulated);
    EXPECT_EQ(sum_through_the_arena(*ex), 999.0 * 1000.0 / 2.0) << "round " << round;
    std::vector<float> w = {1, 2, 3};
    ASSERT_TRUE(ex->put_resident("w", std::as_bytes(std::span(w))).ok());
  }
  EXPECT_TRUE(s.alive());
}

TEST(GpudServer, a_busy_server_sends_the_second_process_to_a_child_of_its_own) {
  Server s;
  ASSERT_TRUE(s.start());
  auto first = make_isolated_executor(options_for(s));
  ASSERT_TRUE(first->start().ok()) << first->state_reason();
  {  // while it is served, the server refuses the next one at once; without a child binary that one has no GPU
    ExecutorOptions o = options_for(s);
    o.gpud_path = "/nonexistent/facetrace-gpud";
    auto second = make_isolated_executor(o);
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(second->start().ok());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
    EXPECT_NE(second->state_reason().find("facetrace-gpud not found"), std::string::npos)
        << second->state_reason();
  }
  auto third = make_isolated_executor(options_for(s));  // with the child binary: a child of its own
  ASSERT_TRUE(third->start().ok()) << third->state_reason();
  EXPECT_EQ(sum_through_the_arena(*third), 999.0 * 1000.0 / 2.0);
  EXPECT_EQ(sum_through_the_arena(*first), 999.0 * 1000.0 / 2.0);
}

TEST(GpudServer, a_server_that_dies_mid_session_is_a_loss_and_the_restart_starts_a_child) {
  Server s;
  ASSERT_TRUE(s.start());
  auto ex = make_isolated_executor(options_for(s));
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  s.stop(SIGKILL);
  ExpectLogs logs;
  EXPECT_EQ(ex->ping().code(), Code::kDeviceLost);
  EXPECT_EQ(ex->state(), ExecutorState::kLost);
  EXPECT_NE(ex->state_reason().find("warm GPU server"), std::string::npos) << ex->state_reason();
  ASSERT_TRUE(ex->restart().ok()) << ex->state_reason();  // nobody listens any more: a child
  EXPECT_EQ(sum_through_the_arena(*ex), 999.0 * 1000.0 / 2.0);
}

TEST(GpudServer, a_device_loss_in_a_session_ends_the_server_with_code_3) {
  Server s;
  ASSERT_TRUE(s.start());
  auto ex = make_isolated_executor(options_for(s));
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  {
    ExpectLogs logs;
    EXPECT_EQ(ex->inject_fault(FaultKind::kSimulatedLoss).code(), Code::kDeviceLost);
  }
  const int status = s.wait_exit(5s);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 3);
  ASSERT_TRUE(ex->restart().ok()) << ex->state_reason();  // the stale socket refuses: a child
  EXPECT_TRUE(ex->ping().ok());
}

TEST(GpudServer, no_server_at_the_path_starts_a_child) {
  Server s;  // never started
  auto ex = make_isolated_executor(options_for(s));
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason();
  EXPECT_EQ(sum_through_the_arena(*ex), 999.0 * 1000.0 / 2.0);
}

TEST(GpudServer, hostile_clients_do_not_take_the_server_down) {
  Server s;
  ASSERT_TRUE(s.start());
  {  // a datagram that is no attach, and no descriptor
    auto c = proto::connect_session_socket(s.path());
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    const char junk[5] = "junk";
    ASSERT_EQ(::send(*c, junk, sizeof junk, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof junk));
    ::close(*c);
    std::this_thread::sleep_for(100ms);  // that session ends (else the next one is told "busy")
  }
  {  // an attach that claims more bytes than its memfd has: refused with a reason
    auto c = proto::connect_session_socket(s.path());
    ASSERT_TRUE(c.ok());
    auto small = SharedArena::create(1u << 20, 1u << 20);
    ASSERT_TRUE(small.ok());
    ASSERT_TRUE(proto::send_attach(*c, (*small)->fd(), {1ull << 30, 1ull << 30}).ok());
    auto msg = proto::recv_message(*c, 2000ms);
    ASSERT_TRUE(msg.ok()) << msg.status().to_string();
    auto hello = proto::decode_payload<proto::HelloMsg>(msg->payload);
    ASSERT_TRUE(hello.ok());
    EXPECT_NE(hello->state, ExecutorState::kReady);
    EXPECT_NE(hello->reason.find("smaller than the sizes it claims"), std::string::npos) << hello->reason;
    ::close(*c);
  }
  {  // connected and silent, then gone
    auto c = proto::connect_session_socket(s.path());
    ASSERT_TRUE(c.ok());
    ::close(*c);
  }
  std::this_thread::sleep_for(50ms);
  ASSERT_TRUE(s.alive()) << s.text();
  ExecutorOptions o = options_for(s);
  o.gpud_path = "/nonexistent/facetrace-gpud";
  auto ex = make_isolated_executor(o);
  ASSERT_TRUE(ex->start().ok()) << ex->state_reason() << "\n" << s.text();
  EXPECT_EQ(sum_through_the_arena(*ex), 999.0 * 1000.0 / 2.0);
}

TEST(GpudServer, the_socket_path_is_checked_before_listening) {
  const auto dir = std::filesystem::temp_directory_path() / ("ft-gpud-listen-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "not-a-socket").string();
  std::ofstream(file) << "x";
  auto r = proto::listen_session_socket(file);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().what().find("is not a socket"), std::string::npos) << r.status().to_string();
  const std::string sock = (dir / "s.sock").string();
  auto a = proto::listen_session_socket(sock);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = proto::listen_session_socket(sock);  // someone listens: refused
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().what().find("already listens"), std::string::npos) << b.status().to_string();
  ::close(*a);  // now stale: replaced
  auto c = proto::listen_session_socket(sock);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  if (c) ::close(*c);
  EXPECT_FALSE(proto::connect_session_socket((dir / "nothing.sock").string()).ok());
  EXPECT_FALSE(proto::listen_session_socket(std::string(200, 'x')).ok());  // longer than sun_path
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace facetrace::runtime
