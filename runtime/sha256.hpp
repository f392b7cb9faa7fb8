// SHA-256 (FIPS 180-4), for content-keyed cache entries and their checksums.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8c::runtime {

using Digest = std::array<std::uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  Sha256& update(const void* data, std::size_t size);
  Sha256& update(std::string_view text) { return update(text.data(), text.size()); }
  Digest finish();

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t buffered_ = 0;
  std::uint64_t length_ = 0;  // bytes
};

Digest sha256(std::string_view text);
std::string to_hex(const Digest& digest);

}  // namespace fp8c::runtime
