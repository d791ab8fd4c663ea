/// @file
/// Private: the warm GPU server's socket (docs/design/runtime.md §6.2 "A warm facetrace-gpud"). A long-lived
/// `facetrace-gpud --serve PATH` listens on a UNIX SOCK_SEQPACKET socket at PATH; a process whose
/// FACETRACE_GPUD_SOCKET names PATH connects, sends one attach datagram that carries its shared-arena memfd
/// (SCM_RIGHTS) and the arena's sizes, and then speaks the ordinary protocol (protocol.h) on that connection,
/// exactly as with a child of its own, starting with the server's hello.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "facetrace/core/status.h"

namespace facetrace::runtime::proto {

/// What an attach datagram carries besides the memfd.
struct Attach {
  std::uint64_t ring_bytes = 0;
  std::uint64_t transfer_bytes = 0;
};

/// A received attach: the memfd (owned by the caller, close-on-exec) and the sizes.
struct Attached {
  int arena_fd = -1;
  Attach sizes;
};

/// Connects to the server at `path` without waiting: kNotSupported when nothing listens there (no file, or a
/// stale socket file), kTimeout when its backlog is full; every error names the path.
Expected<int> connect_session_socket(const std::string& path);
/// Binds and listens at `path`, replacing a stale socket file (one nobody listens on); refuses to replace
/// anything that is not a socket, or a socket another server listens on.
Expected<int> listen_session_socket(const std::string& path);
/// Sends the attach datagram with `arena_fd` as its SCM_RIGHTS.
Status send_attach(int sock, int arena_fd, const Attach& a);
/// Receives the attach datagram within `timeout`; kInvalidArgument for anything else (a wrong size or magic,
/// no descriptor, more than one).
Expected<Attached> recv_attach(int sock, std::chrono::milliseconds timeout);

}  // namespace facetrace::runtime::proto
