#include "runtime/cubin_resources.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>

namespace fp8c::runtime {
namespace {

// ELF64 layout (System V gABI); cubins are little-endian, as is the host.
constexpr std::size_t kSectionHeaderOffset = 0x28;  // e_shoff
constexpr std::size_t kSectionHeaderSize = 0x3a;    // e_shentsize, then e_shnum, e_shstrndx
constexpr std::uint32_t kSymbolTable = 2;           // SHT_SYMTAB
constexpr std::size_t kSymbolSize = 24;             // sizeof(Elf64_Sym)

// NVIDIA's attribute records in .nv.info: u8 format, u8 attribute, then
// either a value within the 4-byte record (formats 1-3: none, byte, half) or,
// for format 4, a u16 size and that many bytes. The per-function attributes
// used here are sized, holding {u32 symbol index, u32 value}.
constexpr std::uint8_t kFormatNoValue = 0x01;
constexpr std::uint8_t kFormatSized = 0x04;
constexpr std::uint8_t kFrameSize = 0x11;  // EIATTR_FRAME_SIZE
constexpr std::uint8_t kRegCount = 0x2f;   // EIATTR_REGCOUNT

struct Section {
  std::uint32_t name;
  std::uint32_t type;
  std::uint64_t offset;
  std::uint64_t size;
  std::uint32_t link;
};

class ElfReader {
 public:
  ElfReader(const std::vector<char>& bytes, const std::string& entry)
      : bytes_(bytes), entry_(entry) {}

  template <typename T>
  T read(std::uint64_t at) const {
    if (at > bytes_.size() || bytes_.size() - at < sizeof(T))
      fail("truncated (a field at byte " + std::to_string(at) + " lies past its " +
           std::to_string(bytes_.size()) + " bytes)");
    T value;
    std::memcpy(&value, bytes_.data() + at, sizeof(T));
    return value;
  }

  std::string_view string_at(std::uint64_t at) const {
    if (at >= bytes_.size()) fail("truncated (a name lies past the end)");
    const void* end = std::memchr(bytes_.data() + at, '\0', bytes_.size() - at);
    if (!end) fail("truncated (an unterminated name)");
    return {bytes_.data() + at,
            static_cast<std::size_t>(static_cast<const char*>(end) - (bytes_.data() + at))};
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw std::runtime_error("cannot read the resources of kernel " + entry_ +
                             " from its cubin: " + why);
  }

 private:
  const std::vector<char>& bytes_;
  const std::string& entry_;
};

}  // namespace

CubinResources read_cubin_resources(const std::vector<char>& cubin, const std::string& entry) {
  const ElfReader elf(cubin, entry);
  if (cubin.size() < 0x40 || std::memcmp(cubin.data(),
                                         "\x7f"
                                         "ELF",
                                         4) != 0)
    elf.fail("not an ELF file");
  if (cubin[4] != 2 || cubin[5] != 1) elf.fail("not a 64-bit little-endian ELF");

  const auto section_headers = elf.read<std::uint64_t>(kSectionHeaderOffset);
  const auto entry_size = elf.read<std::uint16_t>(kSectionHeaderSize);
  const auto count = elf.read<std::uint16_t>(kSectionHeaderSize + 2);
  const auto names_index = elf.read<std::uint16_t>(kSectionHeaderSize + 4);
  if (entry_size < 0x40) elf.fail("section headers of " + std::to_string(entry_size) + " bytes");
  if (names_index >= count) elf.fail("no section-name table");
  const auto section = [&](std::uint32_t i) {
    const std::uint64_t at = section_headers + std::uint64_t{i} * entry_size;
    return Section{elf.read<std::uint32_t>(at), elf.read<std::uint32_t>(at + 4),
                   elf.read<std::uint64_t>(at + 0x18), elf.read<std::uint64_t>(at + 0x20),
                   elf.read<std::uint32_t>(at + 0x28)};
  };
  // A name at `offset` within string table `table`, never past its end.
  const auto name_in = [&](const Section& table, std::uint64_t offset) {
    if (offset >= table.size) elf.fail("a name lies outside its string table");
    const std::string_view name = elf.string_at(table.offset + offset);
    if (name.size() >= table.size - offset) elf.fail("a name runs past its string table");
    return name;
  };
  const Section names = section(names_index);

  // The global attribute section; its link is the symbol table it indexes.
  std::optional<Section> info;
  for (std::uint32_t i = 0; i < count; ++i) {
    const Section s = section(i);
    if (name_in(names, s.name) == ".nv.info") info = s;
  }
  if (!info) elf.fail("no .nv.info section");
  if (info->link >= count) elf.fail(".nv.info links to no symbol table");
  const Section symbols = section(info->link);
  if (symbols.type != kSymbolTable || symbols.link >= count)
    elf.fail(".nv.info links to no symbol table");
  const Section strings = section(symbols.link);
  std::optional<std::uint32_t> symbol;
  for (std::uint64_t k = 0; k < symbols.size / kSymbolSize; ++k) {
    const auto name = elf.read<std::uint32_t>(symbols.offset + k * kSymbolSize);
    if (name_in(strings, name) == entry) symbol = static_cast<std::uint32_t>(k);
  }
  if (!symbol) elf.fail("no symbol of that name");

  std::optional<std::uint32_t> registers;
  CubinResources out;
  const std::uint64_t end = info->offset + info->size;
  if (end < info->offset) elf.fail(".nv.info's size overflows");
  for (std::uint64_t at = info->offset; at < end;) {
    const auto format = elf.read<std::uint8_t>(at);
    const auto attribute = elf.read<std::uint8_t>(at + 1);
    std::uint64_t length = 4;  // formats 1-3: the value lies within the record
    if (format == kFormatSized) {
      length += elf.read<std::uint16_t>(at + 2);
    } else if (format < kFormatNoValue || format > kFormatSized) {
      elf.fail("an .nv.info record of unknown format " + std::to_string(format));
    }
    if (length > end - at) elf.fail("an .nv.info record runs past the section");
    if (format == kFormatSized && length >= 12) {
      const auto function = elf.read<std::uint32_t>(at + 4);
      const auto value = elf.read<std::uint32_t>(at + 8);
      if (attribute == kFrameSize) {
        out.largest_frame = std::max<long long>(out.largest_frame, value);
        if (function == *symbol) out.stack_frame = value;
      }
      if (attribute == kRegCount && function == *symbol) registers = value;
    }
    at += length;
  }
  if (!registers) elf.fail("no register count for it in .nv.info");
  // A thread has at most 255 registers on every architecture fp8c targets.
  if (*registers == 0 || *registers > 255)
    elf.fail("an implausible register count " + std::to_string(*registers));
  out.registers = static_cast<int>(*registers);
  return out;
}

}  // namespace fp8c::runtime
