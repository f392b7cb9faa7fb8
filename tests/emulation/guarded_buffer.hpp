// A host buffer for emulated kernels' outputs: the data `misalign` bytes
// past a 16-byte boundary, between guards that must come back untouched; and
// a byte-for-byte comparison that names the first differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp8c::emulation {

// A buffer with `offset` bytes before the data (to misalign it) and a guard
// after it that must come back untouched.
struct Buffer {
  static constexpr std::size_t kGuard = 64;
  std::vector<unsigned char> bytes;
  std::size_t offset, size;
  Buffer(std::size_t n, std::size_t misalign, unsigned char fill)
      : bytes(16 + n + kGuard, 0xA5), offset(16 + misalign), size(n) {
    std::fill(bytes.begin() + offset, bytes.begin() + offset + n, fill);
  }
  unsigned char* data() {
    // The vector's storage is 16-byte aligned; data() is 16 + misalign past it.
    return bytes.data() + offset;
  }
  std::vector<unsigned char> contents() const {
    return {bytes.begin() + offset, bytes.begin() + offset + size};
  }
  bool guards_intact() const {
    for (std::size_t i = 0; i < bytes.size(); ++i)
      if ((i < offset || i >= offset + size) && bytes[i] != 0xA5) return false;
    return true;
  }
};

// Outputs equal to the reference byte for byte; the first five differences
// are reported with their offsets.
inline void check_bytes(const std::vector<unsigned char>& got,
                        const std::vector<std::uint8_t>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && ++bad <= 5)
      ADD_FAILURE() << what << " byte " << i << ": 0x" << std::hex << int(got[i]) << ", want 0x"
                    << int(want[i]);
  EXPECT_EQ(bad, 0u) << what;
}

}  // namespace fp8c::emulation
