// The on-disk cache of compiled kernels. An entry's name is the SHA-256 of
// everything that decides the CUBIN (the generated source, the compile
// options, the NVRTC version, the architecture) and nothing else, so no
// absolute path or time stamp can split or poison it. Entries are written to
// a temporary file and renamed into place, so a reader sees a whole entry or
// none, and several processes starting at once at worst compile the same
// kernel twice. Each entry carries a checksum of its payload: a truncated or
// corrupt entry is detected on read, reported, and rebuilt.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/sha256.hpp"

namespace fp8c::runtime {

struct CacheEntry {
  std::vector<char> cubin;
  int registers = -1;
  int spill_stores = 0;
  int spill_loads = 0;
};

enum class CacheLookup { hit, miss, corrupt };

class CubinCache {
 public:
  // `directory` is created on first write. default_directory() reads
  // FP8C_CACHE_DIR, then $XDG_CACHE_HOME/fp8c, then $HOME/.cache/fp8c.
  explicit CubinCache(std::string directory);
  static std::string default_directory();

  const std::string& directory() const { return directory_; }
  std::string path_of(const Digest& key) const;

  // Reads an entry. `corrupt` means a file was there but failed its checks
  // (it is left for store() to replace).
  CacheLookup load(const Digest& key, CacheEntry& entry) const;

  // Writes an entry atomically. Failures (a read-only directory, a full disk)
  // are returned as a message, not thrown: the cache is an optimisation.
  std::optional<std::string> store(const Digest& key, const CacheEntry& entry) const;

 private:
  std::string directory_;
};

}  // namespace fp8c::runtime
