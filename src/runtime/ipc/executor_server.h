/// @file
/// Private: facetrace-gpud's side of the protocol: serves an inner executor (CUDA in-process, or simulated)
/// over the socket.
#pragma once

#include "facetrace/core/status.h"
#include "facetrace/runtime/executor.h"

namespace facetrace::runtime {

class ExecutorServer {
 public:
  /// Sends the hello (state of `inner` after `start_status`) and serves requests until shutdown, EOF or a
  /// device loss. Returns the process exit code: 0 shutdown/EOF, 2 no GPU, 3 device lost, 4 protocol error.
  static int serve(int fd, Executor& inner, const Status& start_status);
};

}  // namespace facetrace::runtime
