/// @file
/// The warm GPU server's socket: connect, listen, and the attach datagram with its memfd (session_socket.h).
#include "ipc/session_socket.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

namespace facetrace::runtime::proto {
namespace {

constexpr char kAttachMagic[8] = {'F', 'T', 'A', 'T', 'T', 'C', 'H', '1'};
constexpr std::size_t kAttachBytes = 8 + 8 + 8;

Expected<sockaddr_un> address_of(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof a.sun_path)
    return invalid_argument("GPU server socket path '" + path + "' is empty or longer than " +
                            std::to_string(sizeof a.sun_path - 1) + " bytes");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

void put_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint64_t get_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

Expected<int> connect_session_socket(const std::string& path) {
  auto a = address_of(path);
  if (!a) return a.status();
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return io_error(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&*a), sizeof *a) != 0) {
    const int e = errno;
    ::close(fd);
    if (e == ENOENT || e == ECONNREFUSED)
      return Status(Code::kNotSupported, "no GPU server listens at " + path + " (" + std::strerror(e) + ")");
    if (e == EAGAIN) return Status(Code::kTimeout, "the GPU server at " + path + " has a full backlog");
    return io_error("connect to the GPU server at " + path + ": " + std::strerror(e));
  }
  // Blocking again: the protocol's receives poll with their own deadlines.
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    ::close(fd);
    return io_error(std::string("fcntl: ") + std::strerror(errno));
  }
  return fd;
}

Expected<int> listen_session_socket(const std::string& path) {
  auto a = address_of(path);
  if (!a) return a.status();
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode))
      return invalid_argument("GPU server socket path " + path + " exists and is not a socket");
    if (auto probe = connect_session_socket(path); probe) {
      ::close(*probe);
      return invalid_argument("another GPU server already listens at " + path);
    }
    if (::unlink(path.c_str()) != 0)
      return io_error("cannot replace the stale socket " + path + ": " + std::strerror(errno));
  }
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return io_error(std::string("socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&*a), sizeof *a) != 0 || ::listen(fd, 8) != 0) {
    const int e = errno;
    ::close(fd);
    return io_error("cannot listen at " + path + ": " + std::strerror(e));
  }
  return fd;
}

Status send_attach(int sock, int arena_fd, const Attach& a) {
  unsigned char body[kAttachBytes];
  std::memcpy(body, kAttachMagic, 8);
  put_u64(body + 8, a.ring_bytes);
  put_u64(body + 16, a.transfer_bytes);
  iovec iov{body, sizeof body};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &arena_fd, sizeof(int));
  ssize_t n;
  do n = ::sendmsg(sock, &m, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  if (n != static_cast<ssize_t>(sizeof body))
    return Status(Code::kDeviceLost, std::string("sending the attach to the GPU server failed: ") +
                                         (n < 0 ? std::strerror(errno) : "short write"));
  return {};
}

Expected<Attached> recv_attach(int sock, std::chrono::milliseconds timeout) {
  pollfd p{sock, POLLIN, 0};
  int r;
  do r = ::poll(&p, 1, static_cast<int>(timeout.count()));
  while (r < 0 && errno == EINTR);
  if (r == 0)
    return Status(Code::kTimeout,
                  "no attach from the client within " + std::to_string(timeout.count()) + " ms");
  if (r < 0) return io_error(std::string("poll: ") + std::strerror(errno));
  unsigned char body[kAttachBytes + 1];
  iovec iov{body, sizeof body};
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return io_error(std::string("recvmsg: ") + std::strerror(errno));
  std::vector<int> fds;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
      for (std::size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++k) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
        fds.push_back(fd);
      }
  const bool truncated = (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  if (truncated || n != static_cast<ssize_t>(kAttachBytes) || std::memcmp(body, kAttachMagic, 8) != 0 ||
      fds.size() != 1) {
    for (int fd : fds) ::close(fd);
    return invalid_argument("malformed attach from the client (" + std::to_string(n) + " bytes, " +
                            std::to_string(fds.size()) + " descriptors)");
  }
  Attached a;
  a.arena_fd = fds[0];
  a.sizes.ring_bytes = get_u64(body + 8);
  a.sizes.transfer_bytes = get_u64(body + 16);
  return a;
}

}  // namespace facetrace::runtime::proto
