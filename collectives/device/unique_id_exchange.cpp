#include "collectives/device/unique_id_exchange.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "collectives/collective_error.hpp"

namespace fp8c::runtime {

using collectives::CollectiveError;
using collectives::FailureKind;
using Clock = std::chrono::steady_clock;

namespace {

constexpr char kOperation[] = "NCCL unique id exchange";
constexpr char kMagic[8] = {'F', 'P', '8', 'C', 'N', 'I', 'D', '1'};
constexpr std::size_t kHelloBytes = 16;
constexpr std::size_t kReplyBytes = 8 + 1 + kUniqueIdBytes;
enum Status : unsigned char { kOk = 0, kWorldSizeDiffers = 1, kRankOutOfRange = 2 };
// Between connection attempts while rank 0 is not listening yet.
constexpr auto kRetryPause = std::chrono::milliseconds(50);
// How long rank 0 waits for one connected peer to say who it is.
constexpr auto kClientPatience = std::chrono::seconds(5);

std::string errno_text(int error) {
  return std::strerror(error);
}

// An owned file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

int milliseconds_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1'000'000));
}

// Waits until `fd` is ready for `events` or the deadline passes.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, milliseconds_until(deadline));
    if (n > 0) return true;
    if (n == 0) return false;
    if (errno != EINTR) return false;
  }
}

// Non-blocking I/O on whole buffers, bounded by the deadline. False on
// timeout, error or end of stream.
bool write_all(int fd, const char* data, std::size_t bytes, Clock::time_point deadline) {
  while (bytes > 0) {
    const ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL);
    if (n > 0) {
      data += n;
      bytes -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_ready(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

bool read_all(int fd, char* data, std::size_t bytes, Clock::time_point deadline) {
  while (bytes > 0) {
    const ssize_t n = ::recv(fd, data, bytes, 0);
    if (n > 0) {
      data += n;
      bytes -= static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_ready(fd, POLLIN, deadline)) return false;
    } else {
      return false;
    }
  }
  return true;
}

void put_u32(char* at, std::uint32_t value) {
  const std::uint32_t big = htonl(value);
  std::memcpy(at, &big, 4);
}

std::uint32_t get_u32(const char* at) {
  std::uint32_t big = 0;
  std::memcpy(&big, at, 4);
  return ntohl(big);
}

void set_non_blocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// A listening socket on every local address: IPv6 dual-stack when the host
// has IPv6, else IPv4. Returns the socket or -1 with `error` set.
int listen_any(std::uint16_t port, std::string& error) {
  Fd v6(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const int on = 1, off = 0;
  if (v6.get() >= 0) {
    ::setsockopt(v6.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    ::setsockopt(v6.get(), IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof off);
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    address.sin6_port = htons(port);
    if (::bind(v6.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
        ::listen(v6.get(), SOMAXCONN) == 0) {
      return v6.release();
    }
    error = errno_text(errno);
    if (errno == EADDRINUSE) return -1;  // IPv4 would collide with the same listener
  }
  Fd v4(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (v4.get() < 0) {
    error = errno_text(errno);
    return -1;
  }
  ::setsockopt(v4.get(), SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(port);
  if (::bind(v4.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(v4.get(), SOMAXCONN) != 0) {
    error = errno_text(errno);
    return -1;
  }
  return v4.release();
}

std::uint16_t bound_port(int fd) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) return 0;
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&address)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&address)->sin_port);
}

std::string ranks_text(const std::set<int>& ranks) {
  std::string text;
  for (const int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

// One connection attempt to `address`; returns the connected socket or -1
// with `error` set.
int connect_to(const addrinfo& address, Clock::time_point deadline, std::string& error) {
  Fd fd(::socket(address.ai_family, address.ai_socktype | SOCK_CLOEXEC, address.ai_protocol));
  if (fd.get() < 0) {
    error = errno_text(errno);
    return -1;
  }
  set_non_blocking(fd.get());
  if (::connect(fd.get(), address.ai_addr, address.ai_addrlen) == 0) return fd.release();
  if (errno != EINPROGRESS) {
    error = errno_text(errno);
    return -1;
  }
  if (!wait_ready(fd.get(), POLLOUT, deadline)) {
    error = "connection attempt timed out";
    return -1;
  }
  int status = 0;
  socklen_t length = sizeof status;
  ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &status, &length);
  if (status != 0) {
    error = errno_text(status);
    return -1;
  }
  return fd.release();
}

}  // namespace

UniqueIdServer::UniqueIdServer(std::uint16_t port, int world_size) : world_size_(world_size) {
  std::string error;
  fd_ = listen_any(port, error);
  if (fd_ < 0) {
    throw CollectiveError(FailureKind::kTransport, kOperation, 0, world_size,
                          "rank 0 cannot listen on port " + std::to_string(port) + ": " + error +
                              " (the id is served on MASTER_PORT + 1 unless FP8C_NCCL_ID_PORT "
                              "names another port)");
  }
  set_non_blocking(fd_);
  port_ = bound_port(fd_);
}

UniqueIdServer::~UniqueIdServer() {
  if (fd_ >= 0) ::close(fd_);
}

void UniqueIdServer::serve(const UniqueIdBytes& id, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::set<int> missing;
  for (int r = 1; r < world_size_; ++r) missing.insert(r);
  const auto fail = [&](FailureKind kind, const std::string& detail) {
    return CollectiveError(kind, kOperation, 0, world_size_, detail);
  };
  while (!missing.empty()) {
    if (!wait_ready(fd_, POLLIN, deadline)) {
      throw fail(FailureKind::kTimeout,
                 "rank(s) " + ranks_text(missing) + " did not fetch the id from port " +
                     std::to_string(port_) + " within " + std::to_string(timeout.count()) +
                     " ms; are they running, with the same MASTER_ADDR and MASTER_PORT?");
    }
    const Fd client(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (client.get() < 0) continue;  // the peer gave up already, or EAGAIN
    // A stalled, broken or foreign connection is not fatal (a real rank
    // retries), and may hold up the others only briefly.
    const auto client_deadline = std::min(deadline, Clock::now() + kClientPatience);
    char hello[kHelloBytes];
    if (!read_all(client.get(), hello, sizeof hello, client_deadline)) continue;
    if (std::memcmp(hello, kMagic, sizeof kMagic) != 0) continue;
    const std::uint32_t rank = get_u32(hello + 8), world_size = get_u32(hello + 12);
    char reply[kReplyBytes] = {};
    std::memcpy(reply, kMagic, sizeof kMagic);
    Status status = kOk;
    if (world_size != static_cast<std::uint32_t>(world_size_)) {
      status = kWorldSizeDiffers;
    } else if (rank == 0 || rank >= world_size) {
      status = kRankOutOfRange;
    } else {
      std::memcpy(reply + 9, id.data(), id.size());
    }
    reply[8] = static_cast<char>(status);
    const bool sent = write_all(client.get(), reply, sizeof reply, client_deadline);
    if (status == kWorldSizeDiffers) {
      throw fail(FailureKind::kMismatch, "a peer claiming rank " + std::to_string(rank) +
                                             " has WORLD_SIZE=" + std::to_string(world_size) +
                                             " but rank 0 has " + std::to_string(world_size_));
    }
    if (status == kRankOutOfRange) {
      throw fail(FailureKind::kMismatch, "a peer claims rank " + std::to_string(rank) +
                                             ", which is not a rank 1.." +
                                             std::to_string(world_size_ - 1));
    }
    if (sent) missing.erase(static_cast<int>(rank));
  }
}

UniqueIdBytes fetch_unique_id(const std::string& host, std::uint16_t port, int rank, int world_size,
                              std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  const std::string where = host + ":" + std::to_string(port);
  char hello[kHelloBytes];
  std::memcpy(hello, kMagic, sizeof kMagic);
  put_u32(hello + 8, static_cast<std::uint32_t>(rank));
  put_u32(hello + 12, static_cast<std::uint32_t>(world_size));
  std::string last_error = "no attempt was made";
  do {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int resolved = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
    if (resolved != 0) {
      last_error = std::string("cannot resolve host: ") + ::gai_strerror(resolved);
    }
    for (const addrinfo* a = resolved == 0 ? found : nullptr; a != nullptr; a = a->ai_next) {
      const Fd fd(connect_to(*a, deadline, last_error));
      if (fd.get() < 0) continue;
      char reply[kReplyBytes];
      if (!write_all(fd.get(), hello, sizeof hello, deadline) ||
          !read_all(fd.get(), reply, sizeof reply, deadline) ||
          std::memcmp(reply, kMagic, sizeof kMagic) != 0) {
        last_error = "the connection closed before the id arrived";
        continue;
      }
      if (reply[8] != kOk) {
        ::freeaddrinfo(found);
        throw CollectiveError(FailureKind::kMismatch, kOperation, rank, world_size,
                              "rank 0 at " + where + " refused rank " + std::to_string(rank) +
                                  " of " + std::to_string(world_size) +
                                  (reply[8] == kWorldSizeDiffers ? ": its WORLD_SIZE differs"
                                                                 : ": the rank is out of range"));
      }
      UniqueIdBytes id;
      std::memcpy(id.data(), reply + 9, id.size());
      ::freeaddrinfo(found);
      return id;
    }
    if (found != nullptr) ::freeaddrinfo(found);
    std::this_thread::sleep_for(std::min<Clock::duration>(kRetryPause, deadline - Clock::now()));
  } while (Clock::now() < deadline);
  throw CollectiveError(FailureKind::kTimeout, kOperation, rank, world_size,
                        "no NCCL unique id from rank 0 at " + where + " within " +
                            std::to_string(timeout.count()) + " ms (last error: " + last_error +
                            "); check MASTER_ADDR and MASTER_PORT (rank 0 serves the id on "
                            "MASTER_PORT + 1 unless FP8C_NCCL_ID_PORT is set) and that rank 0 "
                            "is running");
}

UniqueIdBytes exchange_unique_id(const NcclBootstrap& bootstrap,
                                 const std::function<UniqueIdBytes()>& make_id,
                                 std::chrono::milliseconds timeout) {
  if (bootstrap.world_size == 1) return make_id();
  if (bootstrap.rank != 0) {
    return fetch_unique_id(bootstrap.master_addr, bootstrap.id_port, bootstrap.rank,
                           bootstrap.world_size, timeout);
  }
  // Listen before making the id, so that a busy port fails fast.
  UniqueIdServer server(bootstrap.id_port, bootstrap.world_size);
  const UniqueIdBytes id = make_id();
  server.serve(id, timeout);
  return id;
}

}  // namespace fp8c::runtime
