/// @file
/// `facetrace-gpud --serve PATH`: the warm GPU server (docs/design/runtime.md §6.2). It starts CUDA once, then
/// serves one client process at a time on the socket at PATH, each connection a session of the ordinary protocol
/// over the client's own shared arena; a client that connects while a session runs gets a "busy" hello at once
/// (and starts a child of its own). After a device loss the server exits with code 3 like a child, so it is never
/// left serving in a poisoned state; a supervisor restarts it.
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "facetrace/runtime/testing/simulated_executor.h"
#include "ipc/executor_server.h"
#include "ipc/protocol.h"
#include "ipc/session_socket.h"
#include "log.h"

namespace facetrace::runtime {
namespace {

std::unique_ptr<Executor> make_inner(std::shared_ptr<SharedArena> arena, bool simulate,
                                     const ExecutorOptions& options) {
  return simulate ? make_simulated_executor(arena, options) : make_in_process_executor(arena, options);
}

void send_refusal(int fd, ExecutorState state, const std::string& why) {
  proto::HelloMsg hello;
  hello.pid = static_cast<std::uint32_t>(::getpid());
  hello.state = state;
  hello.reason = why;
  static_cast<void>(proto::send_message(fd, {proto::Cmd::kHello, 0, proto::encode_payload(hello)}));
}

/// One client: its attach (the arena memfd, checked against the sizes it claims), an executor over that
/// arena, the protocol until it leaves. Returns the session's exit code (kGpudExit*).
int serve_session(int fd, bool simulate, const ExecutorOptions& options) {
  auto att = proto::recv_attach(fd, std::chrono::milliseconds(5000));
  if (!att) {
    FT_LOG_WARN("facetrace-gpud: a client sent no valid attach: {}", att.status().to_string());
    return kGpudExitProtocol;
  }
  struct stat st {};
  const std::uint64_t need = att->sizes.ring_bytes + att->sizes.transfer_bytes;
  if (::fstat(att->arena_fd, &st) != 0 || static_cast<std::uint64_t>(st.st_size) < need ||
      att->sizes.ring_bytes > need) {
    ::close(att->arena_fd);
    send_refusal(fd, ExecutorState::kNone, "the attached arena is smaller than the sizes it claims");
    return kGpudExitProtocol;
  }
  auto arena = SharedArena::from_fd(att->arena_fd, att->sizes.ring_bytes, att->sizes.transfer_bytes);
  if (!arena) {
    send_refusal(fd, ExecutorState::kNone, arena.status().what());
    return kGpudExitProtocol;
  }
  std::unique_ptr<Executor> inner = make_inner(*arena, simulate, options);
  const Status started = inner->start();
  const int code = ExecutorServer::serve(fd, *inner, started);
  if (code == kGpudExitDeviceLost) {
    std::fflush(nullptr);
    std::_Exit(code);  // nothing may touch CUDA again, destructors included
  }
  inner.reset();
  return code;
}

}  // namespace

int ExecutorServer::serve_sessions(int listen_fd, const std::string& path, bool simulate,
                                   const ExecutorOptions& options) {
  {  // the driver, the context and the kernel-image check once, before any client
    auto warm = SharedArena::create(4u << 20, 4u << 20);
    if (!warm) {
      std::fprintf(stderr, "facetrace-gpud: %s\n", warm.status().to_string().c_str());
      return kGpudExitProtocol;
    }
    std::unique_ptr<Executor> inner = make_inner(*warm, simulate, options);
    if (const Status st = inner->start(); !st.ok()) {
      std::fprintf(stderr, "facetrace-gpud --serve %s: %s\n", path.c_str(), st.to_string().c_str());
      if (st.code() == Code::kDeviceLost) std::_Exit(kGpudExitDeviceLost);
      return kGpudExitNoGpu;
    }
  }
  std::fprintf(stderr, "facetrace-gpud: serving at %s (pid %d)\n", path.c_str(),
               static_cast<int>(::getpid()));
  std::fflush(stderr);
  std::atomic<bool> busy{false};
  std::thread session;
  unsigned long sessions = 0;
  for (;;) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      std::fprintf(stderr, "facetrace-gpud: accept at %s: %s\n", path.c_str(), std::strerror(errno));
      break;
    }
    if (busy.load()) {
      // Its attach read first: a socket closed with unread data resets, and the client would lose the refusal.
      if (auto att = proto::recv_attach(fd, std::chrono::milliseconds(200))) ::close(att->arena_fd);
      send_refusal(fd, ExecutorState::kNone, "the GPU server at " + path + " is serving another process");
      ::close(fd);
      continue;
    }
    if (session.joinable()) session.join();
    busy.store(true);
    const unsigned long n = ++sessions;
    session = std::thread([fd, n, simulate, &options, &busy] {
      const int code = serve_session(fd, simulate, options);
      ::close(fd);
      FT_LOG_INFO("facetrace-gpud: session {} ended (code {})", n, code);
      busy.store(false);
    });
  }
  if (session.joinable()) session.join();
  return kGpudExitProtocol;
}

}  // namespace facetrace::runtime
