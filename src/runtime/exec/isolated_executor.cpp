/// @file
/// IsolatedExecutor: drives facetrace-gpud over a socketpair and a shared memfd arena; treats death, reported
/// sticky errors and missed deadlines as device loss; respawns on restart(). Never initialises CUDA here.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "log.h"
#include "facetrace/runtime/executor.h"
#include "ipc/protocol.h"

extern char** environ;

namespace facetrace::runtime {
namespace {

using proto::MsgType;
constexpr int kChildSocketFd = 3;
constexpr int kChildArenaFd = 4;

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) {
    const int code = WEXITSTATUS(status);
    const char* what = code == 3 ? " (device lost)" : code == 2 ? " (no GPU)" : code == 4 ? " (protocol error)" : "";
    return "exited with code " + std::to_string(code) + what;
  }
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended with wait status " + std::to_string(status);
}

class IsolatedExecutor final : public Executor {
 public:
  explicit IsolatedExecutor(ExecutorOptions options) : options_(std::move(options)) {}
  ~IsolatedExecutor() override {
    std::lock_guard lock(mu_);
    if (pid_ > 0 && state_ == ExecutorState::kReady) {
      (void)proto::send_message(sock_, {MsgType::kShutdown, ++seq_, {}});
      (void)proto::recv_message(sock_, std::chrono::milliseconds(2000));
    }
    stop_child_locked(std::chrono::milliseconds(2000));
  }

  ExecutorMode mode() const override { return ExecutorMode::kIsolated; }

  Status start() override {
    std::lock_guard lock(mu_);
    if (state_ == ExecutorState::kReady) return {};
    Status st = spawn_locked();
    if (!st.ok() && state_ != ExecutorState::kLost) {
      state_ = ExecutorState::kNone;
      reason_ = st.what();
    }
    return st;
  }

  Status restart() override {
    {
      std::lock_guard lock(mu_);
      if (state_ == ExecutorState::kReady) return {};
      if (state_ == ExecutorState::kNone || state_ == ExecutorState::kNotStarted)
        return {Code::kNotSupported, "no GPU to restart: " + reason_};
      stop_child_locked(std::chrono::milliseconds(200));
      const auto t0 = std::chrono::steady_clock::now();
      if (Status st = spawn_locked(); !st.ok()) {
        state_ = ExecutorState::kLost;
        return st.with_context("respawning facetrace-gpud");
      }
      FT_LOG_INFO("facetrace-gpud respawned (pid {}) in {:.0f} ms", pid_,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return reupload_residents();
  }

  ExecutorState state() const override {
    std::lock_guard lock(mu_);
    return state_;
  }
  std::string state_reason() const override {
    std::lock_guard lock(mu_);
    return reason_;
  }
  Expected<DeviceInfo> info() override {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    return info_;
  }
  SharedArena& arena() override {
    std::lock_guard lock(mu_);
    ensure_arena_locked();
    return *arena_;
  }

  Expected<OpReply> invoke(const OpCall& call) override {
    if (call.args.size() > OpReply::kMaxInlineBytes)
      return invalid_argument("op args of " + std::to_string(call.args.size()) + " bytes exceed the inline limit");
    proto::InvokeRequest q;
    q.op = call.op;
    q.in = call.in;
    q.out = call.out;
    q.deadline_ms = static_cast<std::uint32_t>(call.deadline.count());
    q.args.assign(call.args.begin(), call.args.end());
    auto reply = request(MsgType::kInvoke, proto::encode_invoke(q), call.deadline, "invoke");
    if (!reply) return reply.status();
    return proto::decode_op_reply(reply->payload);
  }

  Expected<RingStats> ring_stats() override {
    auto reply = request(MsgType::kRingStats, {}, options_.control_deadline, "ring_stats");
    if (!reply) return reply.status();
    proto::Reader r(reply->payload);
    RingStats s = proto::read_stats(r);
    if (!r.done()) return invalid_argument("protocol: malformed ring stats");
    return s;
  }

  Status ping() override { return request(MsgType::kPing, {}, options_.control_deadline, "ping").status(); }

  Status inject_fault(FaultKind kind) override {
    proto::Writer w;
    w.u8(static_cast<std::uint8_t>(kind));
    return request(MsgType::kInjectFault, w.take(), options_.control_deadline, "inject_fault").status();
  }

 protected:
  Status upload_resident(const std::string& name, std::span<const std::byte> bytes) override {
    auto block = arena().allocate(bytes.size());
    if (!block) return block.status().with_context("staging resident '" + name + "'");
    std::memcpy(block->bytes().data(), bytes.data(), bytes.size());
    proto::Writer w;
    w.str(name);
    proto::write_range(w, ArenaRange{block->range().offset, bytes.size()});
    return request(MsgType::kPutResident, w.take(), options_.control_deadline, "put_resident").status();
  }
  Status free_resident(const std::string& name) override {
    proto::Writer w;
    w.str(name);
    return request(MsgType::kDropResident, w.take(), options_.control_deadline, "drop_resident").status();
  }
  Expected<ArenaRange> ring_wait(const RingTicket& t, std::chrono::milliseconds deadline) override {
    proto::Writer w;
    proto::write_ticket(w, t);
    w.u32(static_cast<std::uint32_t>(deadline.count()));
    // The child enforces the deadline itself; the watchdog allows a margin on top.
    auto reply = request(MsgType::kRingWait, w.take(), deadline + std::chrono::milliseconds(2000), "ring_wait");
    if (!reply) return reply.status();
    proto::Reader r(reply->payload);
    ArenaRange range = proto::read_range(r);
    if (!r.done()) return invalid_argument("protocol: malformed ring_wait reply");
    return range;
  }
  Status ring_release(const RingTicket& t) override {
    proto::Writer w;
    proto::write_ticket(w, t);
    return request(MsgType::kRingRelease, w.take(), options_.control_deadline, "ring_release").status();
  }

 private:
  void ensure_arena_locked() {
    if (arena_) return;
    auto a = SharedArena::create(options_.ring_bytes, options_.transfer_bytes);
    if (a) {
      arena_ = std::move(*a);
    } else {
      FT_LOG_ERROR("isolated executor: {}", a.status().to_string());
    }
  }

  Status not_ready_locked() const {
    if (state_ == ExecutorState::kLost) return {Code::kDeviceLost, "GPU child lost: " + reason_};
    if (state_ == ExecutorState::kNone) return {Code::kNotSupported, reason_};
    return {Code::kDeclined, "isolated executor not started"};
  }

  Status spawn_locked() {
    ensure_arena_locked();
    if (!arena_) return {Code::kNotSupported, "GPU child could not start: no shared arena"};
    const std::string path = find_gpud(options_);
    if (path.empty())
      return {Code::kNotSupported,
              "GPU child could not start: facetrace-gpud not found (set FACETRACE_GPUD or install it next to "
              "the executable)"};
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      return {Code::kNotSupported, std::string("GPU child could not start: socketpair: ") + std::strerror(errno)};
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
    std::vector<std::string> args = {path, "--socket-fd", std::to_string(kChildSocketFd), "--arena-fd",
                                     std::to_string(kChildArenaFd), "--ring-bytes",
                                     std::to_string(arena_->ring_bytes()), "--transfer-bytes",
                                     std::to_string(arena_->transfer_bytes())};
    if (options_.simulate_child) args.push_back("--simulate");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_store;
    for (char** e = environ; *e != nullptr; ++e) {
      if (options_.device >= 0 && std::strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) == 0) continue;
      env_store.emplace_back(*e);
    }
    if (options_.device >= 0) env_store.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(options_.device));
    std::vector<char*> envp;
    for (auto& e : env_store) envp.push_back(e.data());
    envp.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, path.c_str(), &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    ::close(child_arena);
    if (rc != 0) {
      ::close(sv[0]);
      return {Code::kNotSupported, "GPU child could not start: posix_spawn " + path + ": " + std::strerror(rc)};
    }
    pid_ = pid;
    sock_ = sv[0];
    auto msg = proto::recv_message(sock_, options_.start_deadline);
    if (!msg || msg->type != MsgType::kHello) {
      const std::string why = msg ? std::string("it sent no hello") : msg.status().what();
      stop_child_locked(std::chrono::milliseconds(500));
      return {Code::kNotSupported, "GPU child could not start: " + why + " (" + last_exit_ + ")"};
    }
    auto hello = proto::decode_hello(msg->payload);
    if (!hello) {
      stop_child_locked(std::chrono::milliseconds(500));
      return {Code::kNotSupported, "GPU child could not start: " + hello.status().what()};
    }
    if (hello->state != ExecutorState::kReady) {
      stop_child_locked(std::chrono::milliseconds(2000));
      return {Code::kNotSupported, hello->reason.empty() ? "GPU child reported no GPU" : hello->reason};
    }
    info_ = hello->info;
    state_ = ExecutorState::kReady;
    reason_.clear();
    FT_LOG_INFO("facetrace-gpud started (pid {}): {}", pid_, info_.name);
    return {};
  }

  /// Closes the socket, waits up to `grace` for the child to exit, then SIGKILLs its own pid and reaps it.
  void stop_child_locked(std::chrono::milliseconds grace) {
    if (sock_ >= 0) {
      ::close(sock_);
      sock_ = -1;
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
    last_exit_ = status == -1 ? std::string("already reaped") : "facetrace-gpud " + describe_wait_status(status);
    pid_ = -1;
  }

  void lose_locked(std::string why) {
    state_ = ExecutorState::kLost;
    reason_ = std::move(why);
    FT_LOG_WARN("GPU child lost: {}", reason_);
  }

  /// One command under the watchdog. Any loss (EOF, death, deadline, a reported sticky error) kills and reaps
  /// the child and marks the executor lost.
  Expected<proto::Reply> request(MsgType type, std::vector<std::byte> payload, std::chrono::milliseconds deadline,
                                 const char* what) {
    std::lock_guard lock(mu_);
    if (state_ != ExecutorState::kReady) return not_ready_locked();
    const std::uint32_t seq = ++seq_;
    if (Status st = proto::send_message(sock_, {type, seq, std::move(payload)}); !st.ok()) {
      if (st.code() != Code::kDeviceLost) return st;
      stop_child_locked(std::chrono::milliseconds(200));
      lose_locked(std::string(what) + ": " + st.what() + "; " + last_exit_);
      return Status(Code::kDeviceLost, reason_);
    }
    // Spin briefly first: short commands answer within microseconds.
    auto msg = proto::recv_message(sock_, deadline, std::chrono::microseconds(100));
    if (!msg) {
      if (msg.status().code() == Code::kTimeout) {
        ::kill(pid_, SIGKILL);  // our own child's pid only
        stop_child_locked(std::chrono::milliseconds(1000));
        lose_locked(std::string(what) + " exceeded its deadline of " + std::to_string(deadline.count()) +
                    " ms: the device hangs; killed facetrace-gpud");
      } else {
        stop_child_locked(std::chrono::milliseconds(1000));
        lose_locked(std::string(what) + ": " + msg.status().what() + "; " + last_exit_);
      }
      return Status(Code::kDeviceLost, reason_);
    }
    if (msg->type != MsgType::kReply || msg->seq != seq) {
      stop_child_locked(std::chrono::milliseconds(200));
      lose_locked(std::string(what) + ": protocol desynchronised (unexpected message)");
      return Status(Code::kDeviceLost, reason_);
    }
    auto reply = proto::decode_reply(msg->payload);
    if (!reply) {
      stop_child_locked(std::chrono::milliseconds(200));
      lose_locked(std::string(what) + ": " + reply.status().what());
      return Status(Code::kDeviceLost, reason_);
    }
    if (reply->code == Code::kDeviceLost) {
      stop_child_locked(std::chrono::milliseconds(2000));
      lose_locked("facetrace-gpud reported: " + reply->what + " (" + last_exit_ + ")");
      return Status(Code::kDeviceLost, reason_);
    }
    if (reply->code != Code::kOk) return Status(reply->code, reply->what);
    return std::move(*reply);
  }

  ExecutorOptions options_;
  mutable std::mutex mu_;
  std::shared_ptr<SharedArena> arena_;
  ExecutorState state_ = ExecutorState::kNotStarted;
  std::string reason_;
  std::string last_exit_;
  DeviceInfo info_;
  pid_t pid_ = -1;
  int sock_ = -1;
  std::uint32_t seq_ = 0;
};

}  // namespace

std::unique_ptr<Executor> make_isolated_executor(ExecutorOptions options) {
  return std::make_unique<IsolatedExecutor>(std::move(options));
}

}  // namespace facetrace::runtime
