/// @file
/// IsolatedExecutor: drives facetrace-gpud over a socketpair and a shared memfd arena; treats death, reported
/// sticky errors and missed deadlines as device loss; respawns on restart(). Never initialises CUDA here.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>

#include "exec/exec_internal.h"
#include "log.h"
#include "facetrace/runtime/executor.h"
#include "ipc/executor_server.h"
#include "ipc/protocol.h"
#include "ipc/session_socket.h"

extern char** environ;

namespace facetrace::runtime {
namespace {

constexpr int kChildSocketFd = 3;
constexpr int kChildArenaFd = 4;

/// True when process `pid` is stopped by a signal (SIGSTOP, SIGTSTP: state T in /proc/<pid>/stat); a stopped
/// child never answers, so waiting out its deadline would only cost time (docs/design/runtime.md §6).
bool process_stopped(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* paren = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  return paren != nullptr && paren[1] == ' ' && paren[2] == 'T';
}

// A long wait looks for a stopped child this often (docs/design/runtime.md §6).
constexpr std::chrono::milliseconds kStoppedPoll{20};
// A free warm GPU server answers an attach at once; a busy one with a refusal (docs/runtime.md).
constexpr std::chrono::milliseconds kServerHelloDeadline{2000};

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    const char* what = code == kGpudExitDeviceLost ? " (device lost)"
                       : code == kGpudExitNoGpu    ? " (no GPU)"
                       : code == kGpudExitProtocol ? " (protocol error)"
                                                   : "";
    return "exited with code " + std::to_string(code) + what;
  }
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

/// The thread every facetrace-gpud of one executor is spawned from, alive as long as the executor. The child
/// asks for SIGKILL when its parent goes (PR_SET_PDEATHSIG), and Linux sends that when the *thread* that
/// spawned it ends: spawned from a short-lived caller (a render's worker thread) it would die with that
/// thread, so no caller thread ever spawns it.
class SpawnThread {
 public:
  SpawnThread() : thread_([this] { loop(); }) {}
  ~SpawnThread() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  SpawnThread(const SpawnThread&) = delete;
  SpawnThread& operator=(const SpawnThread&) = delete;

  /// Runs `job` on the spawning thread and returns its result. One job at a time (callers hold the
  /// executor's lock).
  int run(const std::function<int()>& job) {
    std::unique_lock lock(mu_);
    job_ = &job;
    done_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_; });
    return result_;
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (job_ != nullptr) {
        const std::function<int()>* job = job_;
        job_ = nullptr;
        lock.unlock();
        const int r = (*job)();
        lock.lock();
        result_ = r;
        done_ = true;
        cv_.notify_all();
        continue;
      }
      if (stop_) return;
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<int()>* job_ = nullptr;
  int result_ = 0;
  bool done_ = false;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

/// This process's environment for a child, with CUDA_VISIBLE_DEVICES replaced when `visible` is set.
std::vector<std::string> child_environment(const std::optional<std::string>& visible) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (visible && std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) continue;
    env.emplace_back(*e);
  }
  if (visible) env.push_back("CUDA_VISIBLE_DEVICES=" + *visible);
  return env;
}

std::vector<char*> c_strings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

class IsolatedExecutor final : public Executor {
 public:
  explicit IsolatedExecutor(ExecutorOptions options) : options_(std::move(options)) {
    auto a = SharedArena::create(options_.ring_bytes, options_.transfer_bytes);
    if (a) {
      arena_ = std::move(*a);
    } else {
      FT_LOG_ERROR("isolated executor: {}", a.status().to_string());
    }
  }
  ~IsolatedExecutor() override {
    auto lock = lock_state();
    if (sock_ >= 0) {  // a child is serving: ask it to leave
      const proto::Message bye{proto::Cmd::kShutdown, ++seq_, proto::encode_payload(proto::ShutdownReq{})};
      // Either way the child is reaped below (killed after the grace period).
      if (Status st = proto::send_message(sock_, bye); !st.ok()) {
        FT_LOG_DEBUG("facetrace-gpud shutdown not sent: {}", st.to_string());
      } else if (auto ack = proto::recv_message(sock_, std::chrono::milliseconds(2000)); !ack) {
        FT_LOG_DEBUG("facetrace-gpud did not acknowledge the shutdown: {}", ack.status().to_string());
      }
    }
    stop_child_locked(std::chrono::milliseconds(2000));
  }

  ExecutorMode mode() const override { return ExecutorMode::kIsolated; }
  SharedArena& arena() override { return *arena_; }

 protected:
  Status start_locked() override { return spawn_locked(); }

  Status replace_locked() override {
    stop_child_locked(std::chrono::milliseconds(200));
    const auto t0 = std::chrono::steady_clock::now();
    if (Status st = spawn_locked(); !st.ok()) return st.with_context("respawning facetrace-gpud");
    FT_LOG_INFO("facetrace-gpud respawned (pid {}) in {:.0f} ms", pid_,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    return {};
  }

  Expected<DeviceInfo> info_locked() override { return info_; }

  Expected<OpReply> invoke_locked(const OpCall& call) override {
    if (call.args.size() > OpReply::kMaxInlineBytes)
      return invalid_argument("op args of " + std::to_string(call.args.size()) +
                              " bytes exceed the inline limit");
    proto::InvokeReq q;
    q.op = call.op;
    q.in = call.in;
    q.out = call.out;
    q.deadline_ms = static_cast<std::uint32_t>(call.deadline.count());
    q.args.assign(call.args.begin(), call.args.end());
    auto rsp = call_locked(q, call.deadline);
    if (!rsp) return rsp.status();
    return std::move(rsp->reply);
  }

  Expected<RingStats> ring_stats_locked() override {
    auto rsp = call_locked(proto::RingStatsReq{}, options_.control_deadline);
    if (!rsp) return rsp.status();
    return rsp->stats;
  }

  Status ping_locked() override { return call_locked(proto::PingReq{}, options_.control_deadline).status(); }

  Status inject_fault_locked(FaultKind kind) override {
    return call_locked(proto::InjectFaultReq{kind}, options_.control_deadline).status();
  }

  Status upload_resident_locked(const std::string& name, std::span<const std::byte> bytes) override {
    auto block = arena_->allocate(bytes.size());
    if (!block) return block.status().with_context("staging resident '" + name + "'");
    std::memcpy(block->bytes().data(), bytes.data(), bytes.size());
    const proto::PutResidentReq q{name, ArenaRange{block->range().offset, bytes.size()}};
    return call_locked(q, options_.control_deadline).status();
  }
  Status free_resident_locked(const std::string& name) override {
    return call_locked(proto::DropResidentReq{name}, options_.control_deadline).status();
  }
  Expected<ArenaRange> ring_wait_locked(const RingTicket& t, std::chrono::milliseconds deadline) override {
    // The child enforces the deadline itself; the watchdog allows a margin on top (half the deadline, 0.25–2 s).
    const proto::RingWaitReq q{t, static_cast<std::uint32_t>(deadline.count())};
    const auto margin = std::clamp<std::chrono::milliseconds>(deadline / 2, std::chrono::milliseconds(250),
                                                              std::chrono::milliseconds(2000));
    auto rsp = call_locked(q, deadline + margin);
    if (!rsp) return rsp.status();
    return rsp->range;
  }
  Status ring_release_locked(const RingTicket& t) override {
    return call_locked(proto::RingReleaseReq{t}, options_.control_deadline).status();
  }

 private:
  /// Attaches to the warm GPU server when FACETRACE_GPUD_SOCKET names one that is free (docs/runtime.md "A warm
  /// GPU server"), else spawns facetrace-gpud and waits for its hello; kNotSupported when it cannot start or
  /// reports no GPU.
  Status spawn_locked() {
    if (!arena_) return {Code::kNotSupported, "GPU child could not start: no shared arena"};
    if (!options_.gpud_socket.empty()) {
      if (!options_.gpu_device.empty() || options_.local_rank >= 0) {
        FT_LOG_DEBUG("a GPU device is selected: the warm GPU server at {} is not used", options_.gpud_socket);
      } else if (Status st = attach_locked(options_.gpud_socket); st.ok()) {
        return {};
      } else {
        FT_LOG_INFO("warm GPU server at {} not used ({}); starting a GPU child of this process",
                    options_.gpud_socket, st.what());
      }
    }
    const std::string path = find_gpud(options_);
    if (path.empty())
      return {Code::kNotSupported,
              "GPU child could not start: facetrace-gpud not found (set FACETRACE_GPUD or install it next to "
              "the executable)"};
    // The device: an index into (or a UUID from) the inherited CUDA_VISIBLE_DEVICES, by string only.
    const char* inherited = std::getenv("CUDA_VISIBLE_DEVICES");
    auto sel = select_child_device(options_.gpu_device,
                                   inherited ? std::optional<std::string_view>(inherited) : std::nullopt);
    if (!sel) {
      const Status& st = sel.status();
      return is_unsupported_device(st) ? st : unsupported_device(st.what());
    }
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      return {Code::kNotSupported,
              std::string("GPU child could not start: socketpair: ") + std::strerror(errno)};
    // Move both sources above the child's target numbers first, so one dup2 never clobbers the other's
    // source (the arena memfd may itself be fd 3).
    const int child_sock = ::fcntl(sv[1], F_DUPFD_CLOEXEC, 16);
    const int child_arena = ::fcntl(arena_->fd(), F_DUPFD_CLOEXEC, 16);
    ::close(sv[1]);
    sv[1] = child_sock;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, child_sock, kChildSocketFd);  // dup2 clears FD_CLOEXEC
    posix_spawn_file_actions_adddup2(&fa, child_arena, kChildArenaFd);
    std::vector<std::string> args = {path,
                                     "--socket-fd",
                                     std::to_string(kChildSocketFd),
                                     "--arena-fd",
                                     std::to_string(kChildArenaFd),
                                     "--ring-bytes",
                                     std::to_string(arena_->ring_bytes()),
                                     "--transfer-bytes",
                                     std::to_string(arena_->transfer_bytes()),
                                     "--parent-pid",
                                     std::to_string(::getpid())};
    if (options_.simulate_child) args.push_back("--simulate");
    if (sel->visible_devices) {
      args.push_back("--requested-device");
      args.push_back(options_.gpu_device);
    }
    if (!sel->match_uuid.empty()) {
      args.push_back("--gpu-device");
      args.push_back(sel->match_uuid);
    } else if (options_.gpu_device.empty() && options_.local_rank >= 0) {
      args.push_back("--local-rank");
      args.push_back(std::to_string(options_.local_rank));
    }
    std::vector<char*> argv = c_strings(args);
    std::vector<std::string> env_store = child_environment(sel->visible_devices);
    std::vector<char*> envp = c_strings(env_store);
    pid_t pid = -1;
    const auto t_spawn = std::chrono::steady_clock::now();
    const int rc = spawner_.run(
        [&] { return ::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), envp.data()); });
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    ::close(child_arena);
    if (rc != 0) {
      ::close(sv[0]);
      return {Code::kNotSupported,
              "GPU child could not start: posix_spawn " + path + ": " + std::strerror(rc)};
    }
    pid_ = pid;
    sock_ = sv[0];
    auto msg = proto::recv_message(sock_, options_.start_deadline);
    if (!msg || msg->cmd != proto::Cmd::kHello) {
      const std::string why = msg ? std::string("it sent no hello") : msg.status().what();
      stop_child_locked(std::chrono::milliseconds(500));
      return {Code::kNotSupported, "GPU child could not start: " + why + " (" + last_exit_ + ")"};
    }
    auto hello = proto::decode_payload<proto::HelloMsg>(msg->payload);
    if (!hello) {
      stop_child_locked(std::chrono::milliseconds(500));
      return {Code::kNotSupported, "GPU child could not start: " + hello.status().what()};
    }
    if (hello->state != ExecutorState::kReady) {
      stop_child_locked(std::chrono::milliseconds(2000));
      return {Code::kNotSupported, hello->reason.empty() ? "GPU child reported no GPU" : hello->reason};
    }
    info_ = hello->info;
    FT_LOG_INFO("facetrace-gpud started (pid {}) in {:.0f} ms: {}", pid_,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_spawn).count(),
                info_.name);
    return {};
  }

  /// A session with the warm GPU server at `path`: the arena's memfd goes over the socket, the server's hello
  /// comes back within kServerHelloDeadline. Any failure (nobody listens, busy, no GPU there) leaves nothing
  /// behind, for the caller to start a child instead.
  Status attach_locked(const std::string& path) {
    const auto t0 = std::chrono::steady_clock::now();
    auto c = proto::connect_session_socket(path);
    if (!c) return c.status();
    const int fd = *c;
    if (Status st = proto::send_attach(fd, arena_->fd(), {arena_->ring_bytes(), arena_->transfer_bytes()});
        !st.ok()) {
      ::close(fd);
      return st;
    }
    auto msg = proto::recv_message(fd, kServerHelloDeadline);
    if (!msg || msg->cmd != proto::Cmd::kHello) {
      ::close(fd);
      return {Code::kNotSupported, msg ? std::string("it sent no hello") : msg.status().what()};
    }
    auto hello = proto::decode_payload<proto::HelloMsg>(msg->payload);
    if (!hello || hello->state != ExecutorState::kReady) {
      ::close(fd);
      return {Code::kNotSupported, hello ? hello->reason : hello.status().what()};
    }
    sock_ = fd;
    pid_ = -1;
    server_pid_ = static_cast<pid_t>(hello->pid);
    info_ = hello->info;
    FT_LOG_INFO("attached to the warm GPU server at {} (pid {}) in {:.0f} ms: {}", path, server_pid_,
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(),
                info_.name);
    return {};
  }

  /// The process serving this executor: its child, or the warm GPU server (-1: none).
  pid_t serving_pid() const { return pid_ > 0 ? pid_ : server_pid_; }

  /// Closes the socket, waits up to `grace` for the child to exit, then SIGKILLs its own pid and reaps it. A
  /// session with the warm GPU server just ends (closing the socket ends it there).
  void stop_child_locked(std::chrono::milliseconds grace) {
    if (sock_ >= 0) {
      ::close(sock_);
      sock_ = -1;
    }
    if (server_pid_ > 0) {
      last_exit_ = "the session with the warm GPU server (pid " + std::to_string(server_pid_) + ") ended";
      server_pid_ = -1;
    }
    if (pid_ <= 0) return;
    int status = 0;
    const auto deadline = std::chrono::steady_clock::now() + grace;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) break;
      if (r < 0) {
        status = -1;
        break;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    last_exit_ =
        status == -1 ? std::string("already reaped") : "facetrace-gpud " + describe_wait_status(status);
    pid_ = -1;
  }

  /// One command under the watchdog: its request struct out, its response struct back. A malformed response
  /// fails this call only (kInvalidArgument).
  template <class Req>
  Expected<typename Req::Rsp> call_locked(const Req& req, std::chrono::milliseconds deadline) {
    auto reply = round_trip_locked(Req::kCmd, proto::encode_payload(req), deadline);
    if (!reply) return reply.status();
    auto rsp = proto::decode_payload<typename Req::Rsp>(reply->payload);
    if (!rsp) return rsp.status().with_context(proto::cmd_name(Req::kCmd));
    return rsp;
  }

  /// Sends one request and waits for its reply. Any loss (EOF, death, deadline, a reported sticky error)
  /// kills and reaps the child and returns kDeviceLost, which marks the executor lost.
  Expected<proto::ReplyMsg> round_trip_locked(proto::Cmd cmd, std::vector<std::byte> payload,
                                              std::chrono::milliseconds deadline) {
    using std::chrono::milliseconds;
    const std::string what(proto::cmd_name(cmd));
    const std::uint32_t seq = ++seq_;
    if (Status st = proto::send_message(sock_, {cmd, seq, std::move(payload)}); !st.ok()) {
      if (st.code() != Code::kDeviceLost) return st;
      stop_child_locked(milliseconds(200));
      return Status(Code::kDeviceLost, what + ": " + st.what() + "; " + last_exit_);
    }
    bool stopped = false;
    auto msg = recv_reply_locked(deadline, stopped);
    if (!msg && msg.status().code() == Code::kTimeout) {
      // our own child's pid, or the warm server's, which is as hung or stopped as a child would be
      if (const pid_t p = serving_pid(); p > 0) ::kill(p, SIGKILL);
      stop_child_locked(milliseconds(1000));
      if (stopped)
        return Status(Code::kDeviceLost,
                      what + ": facetrace-gpud is stopped (a signal froze it); killed facetrace-gpud");
      return Status(Code::kDeviceLost, what + " exceeded its deadline of " +
                                           std::to_string(deadline.count()) +
                                           " ms: the device hangs; killed facetrace-gpud");
    }
    if (!msg) {
      stop_child_locked(milliseconds(1000));
      return Status(Code::kDeviceLost, what + ": " + msg.status().what() + "; " + last_exit_);
    }
    if (msg->cmd != proto::Cmd::kReply || msg->seq != seq) {
      stop_child_locked(milliseconds(200));
      return Status(Code::kDeviceLost, what + ": protocol desynchronised (unexpected message)");
    }
    auto reply = proto::decode_payload<proto::ReplyMsg>(msg->payload);
    if (!reply) {
      stop_child_locked(milliseconds(200));
      return Status(Code::kDeviceLost, what + ": " + reply.status().what());
    }
    if (reply->code == Code::kDeviceLost) {
      stop_child_locked(milliseconds(2000));
      return Status(Code::kDeviceLost, "facetrace-gpud reported: " + reply->what + " (" + last_exit_ + ")");
    }
    if (reply->code != Code::kOk) return Status(reply->code, reply->what);
    return std::move(*reply);
  }

  /// Waits for the reply to the command just sent, at most `deadline` (negative: forever); kTimeout when it
  /// passes or, with `stopped` set, as soon as the child is seen stopped. Spins briefly first (short commands
  /// answer within microseconds), then polls the socket in kStoppedPoll steps, looking at the child in between.
  Expected<proto::Message> recv_reply_locked(std::chrono::milliseconds deadline, bool& stopped) {
    using std::chrono::milliseconds;
    const auto start = std::chrono::steady_clock::now();
    std::chrono::microseconds spin(100);
    for (;;) {
      milliseconds step = kStoppedPoll;
      if (deadline.count() >= 0) {
        const auto left =
            deadline - std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start);
        step = std::clamp(left, milliseconds(0), kStoppedPoll);
      }
      auto msg = proto::recv_message(sock_, step, spin);
      spin = std::chrono::microseconds(0);
      if (msg || msg.status().code() != Code::kTimeout) return msg;
      if (deadline.count() >= 0 && std::chrono::steady_clock::now() - start >= deadline) return msg;
      if (serving_pid() > 0 && process_stopped(serving_pid())) {
        stopped = true;
        return msg;
      }
    }
  }

  ExecutorOptions options_;
  std::shared_ptr<SharedArena> arena_;
  SpawnThread spawner_;  // outlives every child: the destructor reaps the child before this member goes
  // Guarded by the executor's lock (the hooks run with it held).
  std::string last_exit_;
  DeviceInfo info_;
  pid_t pid_ = -1;
  pid_t server_pid_ = -1;  // the warm GPU server serving this executor's session (never our child)
  int sock_ = -1;
  std::uint32_t seq_ = 0;
};

}  // namespace

Expected<std::vector<DeviceListing>> list_devices_through_gpud(const ExecutorOptions& options) {
  const std::string path = find_gpud(options);
  if (path.empty())
    return Status(
        Code::kNotSupported,
        "GPU child could not start: facetrace-gpud not found (set FACETRACE_GPUD or install it next to "
        "the executable)");
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    return Status(Code::kNotSupported,
                  std::string("GPU child could not start: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  std::vector<std::string> args = {path, "--list-devices", "--parent-pid", std::to_string(::getpid())};
  std::vector<char*> argv = c_strings(args);
  std::vector<std::string> env_store = child_environment(std::nullopt);
  std::vector<char*> envp = c_strings(env_store);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  if (rc != 0) {
    ::close(out[0]);
    return Status(Code::kNotSupported,
                  "GPU child could not start: posix_spawn " + path + ": " + std::strerror(rc));
  }
  std::string text;
  const auto deadline = std::chrono::steady_clock::now() + options.start_deadline;
  bool timed_out = false;
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{out[0], POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      timed_out = n == 0;
      break;
    }
    char buf[4096];
    const ssize_t got = ::read(out[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    text.append(buf, static_cast<std::size_t>(got));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);  // our own child's pid only
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (timed_out)
    return Status(Code::kTimeout, "facetrace-gpud --list-devices did not answer within " +
                                      std::to_string(options.start_deadline.count()) + " ms; killed it");
  if (text.empty())
    return Status(Code::kNotSupported,
                  "facetrace-gpud --list-devices printed nothing (" + describe_wait_status(status) + ")");
  return decode_device_listing(text);
}

std::unique_ptr<Executor> make_isolated_executor(ExecutorOptions options) {
  return std::make_unique<IsolatedExecutor>(std::move(options));
}

}  // namespace facetrace::runtime
