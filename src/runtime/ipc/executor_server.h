/// @file
/// Private: facetrace-gpud's side of the protocol: serves an inner executor (CUDA in-process, or simulated)
/// over the socket, and the exit codes by which the parent learns how the child ended.
#pragma once

#include <cstdio>
#include <string>

#include "facetrace/core/status.h"
#include "facetrace/runtime/executor.h"
#include "ipc/protocol.h"

namespace facetrace::runtime {

/// facetrace-gpud's exit codes (the isolated executor names them in its loss reasons).
inline constexpr int kGpudExitOk = 0;          ///< shutdown, or the parent closed the socket
inline constexpr int kGpudExitNoGpu = 2;       ///< the inner executor found no GPU
inline constexpr int kGpudExitDeviceLost = 3;  ///< a device loss: the process is never left serving
inline constexpr int kGpudExitProtocol = 4;    ///< bad arguments or a malformed message

class ExecutorServer {
 public:
  /// Sends the hello (state of `inner` after `start_status`) and serves requests until shutdown, EOF or a
  /// device loss. Returns the process exit code (kGpudExit*).
  static int serve(int fd, Executor& inner, const Status& start_status);
  /// `facetrace-gpud --serve PATH`: starts the device once, then serves one client process at a time on the
  /// listening socket `listen_fd` (session_socket.h), each over the arena it attaches; a second client meanwhile
  /// gets a "busy" hello. Exits the process with kGpudExitDeviceLost after a device loss; returns only when
  /// accepting fails (kGpudExitProtocol) or the device cannot start (kGpudExitNoGpu).
  static int serve_sessions(int listen_fd, const std::string& path, bool simulate,
                            const ExecutorOptions& options);
  /// `facetrace-gpud --list-devices`: enumerates the visible devices in this process and prints them to `out`
  /// in the form list_devices() parses. Returns the process exit code.
  static int print_device_listing(std::FILE* out);

 private:
  /// Runs one request on `inner` and returns its reply.
  static proto::ReplyMsg dispatch(Executor& inner, const proto::Message& msg);
};

}  // namespace facetrace::runtime
