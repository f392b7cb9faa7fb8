#include "runtime/cubin_cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fp8c::runtime {
namespace {

// Entry layout, little-endian:
//   char[8] magic "FP8CCUB1" | u32 format | i32 registers | i32 spill stores |
//   i32 spill loads | u64 payload bytes | u8[32] key | u8[32] SHA-256 of payload | payload
constexpr char kMagic[8] = {'F', 'P', '8', 'C', 'C', 'U', 'B', '1'};
constexpr std::uint32_t kFormat = 1;

struct Header {
  char magic[8];
  std::uint32_t format;
  std::int32_t registers;
  std::int32_t spill_stores;
  std::int32_t spill_loads;
  std::uint64_t payload_bytes;
  std::uint8_t key[32];
  std::uint8_t checksum[32];
};
static_assert(sizeof(Header) == 96, "the header is written as raw bytes");

// No CUBIN is anywhere near this; a header claiming more is corrupt.
constexpr std::uint64_t kMaxPayload = std::uint64_t{1} << 30;

}  // namespace

CubinCache::CubinCache(std::string directory) : directory_(std::move(directory)) {}

std::string CubinCache::default_directory() {
  if (const char* dir = std::getenv("FP8C_CACHE_DIR"); dir && *dir) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/fp8c";
  if (const char* home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/fp8c";
  return "/tmp/fp8c-cache-" + std::to_string(getuid());
}

std::string CubinCache::path_of(const Digest& key) const {
  const std::string hex = to_hex(key);
  return directory_ + "/" + hex.substr(0, 2) + "/" + hex + ".cubin";
}

CacheLookup CubinCache::load(const Digest& key, CacheEntry& entry) const {
  std::ifstream in(path_of(key), std::ios::binary);
  if (!in) return CacheLookup::miss;
  Header header{};
  if (!in.read(reinterpret_cast<char*>(&header), sizeof header)) return CacheLookup::corrupt;
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0 || header.format != kFormat ||
      header.payload_bytes > kMaxPayload || std::memcmp(header.key, key.data(), key.size()) != 0)
    return CacheLookup::corrupt;
  std::vector<char> payload(header.payload_bytes);
  if (!in.read(payload.data(), static_cast<std::streamsize>(payload.size())))
    return CacheLookup::corrupt;                                                // truncated
  if (in.peek() != std::char_traits<char>::eof()) return CacheLookup::corrupt;  // trailing bytes
  const Digest checksum = Sha256().update(payload.data(), payload.size()).finish();
  if (std::memcmp(header.checksum, checksum.data(), checksum.size()) != 0)
    return CacheLookup::corrupt;
  entry.cubin = std::move(payload);
  entry.registers = header.registers;
  entry.spill_stores = header.spill_stores;
  entry.spill_loads = header.spill_loads;
  return CacheLookup::hit;
}

std::optional<std::string> CubinCache::store(const Digest& key, const CacheEntry& entry) const {
  const std::string path = path_of(key);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return "cannot create " + directory_ + ": " + ec.message();

  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.format = kFormat;
  header.registers = entry.registers;
  header.spill_stores = entry.spill_stores;
  header.spill_loads = entry.spill_loads;
  header.payload_bytes = entry.cubin.size();
  std::memcpy(header.key, key.data(), key.size());
  const Digest checksum = Sha256().update(entry.cubin.data(), entry.cubin.size()).finish();
  std::memcpy(header.checksum, checksum.data(), checksum.size());

  // A name no other writer, in this process or another, can pick.
  static std::atomic<unsigned> counter{0};
  const std::string temporary =
      path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(counter.fetch_add(1)) + "." +
      std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot write " + temporary + ": " + std::strerror(errno);
  const auto write_all = [fd](const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::write(fd, p, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      size -= static_cast<std::size_t>(n);
    }
    return true;
  };
  const bool written = write_all(&header, sizeof header) &&
                       write_all(entry.cubin.data(), entry.cubin.size()) && ::fsync(fd) == 0;
  const int saved_errno = errno;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(written ? errno : saved_errno);
    ::unlink(temporary.c_str());
    return "cannot write " + path + ": " + reason;
  }
  return std::nullopt;
}

}  // namespace fp8c::runtime
