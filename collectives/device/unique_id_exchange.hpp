// Hands rank 0's NCCL unique id (128 opaque bytes) to the other ranks over
// TCP, before NCCL exists: rank 0 listens on the id port, every other rank
// connects (retrying until rank 0 is up), says who it is, and receives the
// id. Bounded by a timeout on both sides, and errors name the address and
// port, since a wrong MASTER_ADDR or a blocked port otherwise looks like a
// hang. No NCCL and no GPU here: CI tests it on loopback.
//
// Wire format (network byte order): the client sends "FP8CNID1", its rank
// (u32) and world size (u32); the server answers "FP8CNID1", a status byte
// (0 ok, 1 world size differs, 2 rank out of range) and the 128 id bytes.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "collectives/collective_error.hpp"
#include "collectives/device/nccl_bootstrap.hpp"

namespace fp8c::runtime {

inline constexpr std::size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
using UniqueIdBytes = std::array<char, kUniqueIdBytes>;

// Rank 0's side.
class UniqueIdServer {
 public:
  // Listens on `port` of every local address (IPv6 dual-stack where the host
  // has IPv6, else IPv4); port 0 picks a free one. Throws CollectiveError
  // (kTransport) naming the port when it cannot listen.
  UniqueIdServer(std::uint16_t port, int world_size);
  ~UniqueIdServer();
  UniqueIdServer(const UniqueIdServer&) = delete;
  UniqueIdServer& operator=(const UniqueIdServer&) = delete;

  std::uint16_t port() const { return port_; }

  // Returns once ranks 1..world_size-1 have each received `id` (a rank may
  // ask again after a broken connection). Throws CollectiveError: kTimeout
  // naming the ranks that never came, kMismatch when a peer reports another
  // world size or a rank out of range (the peer is told too).
  void serve(const UniqueIdBytes& id, std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  int world_size_;
};

// Rank `rank`'s side: the id from rank 0 at host:port. Throws CollectiveError:
// kTimeout naming host:port and the last error when no id came within
// `timeout`, kMismatch when rank 0 refused this rank or world size.
UniqueIdBytes fetch_unique_id(const std::string& host, std::uint16_t port, int rank, int world_size,
                              std::chrono::milliseconds timeout);

// The whole exchange for `bootstrap`: rank 0 starts listening on
// bootstrap.id_port, calls make_id and serves it; the others fetch it from
// master_addr:id_port. With one rank it is make_id() and nothing else.
UniqueIdBytes exchange_unique_id(const NcclBootstrap& bootstrap,
                                 const std::function<UniqueIdBytes()>& make_id,
                                 std::chrono::milliseconds timeout);

}  // namespace fp8c::runtime
