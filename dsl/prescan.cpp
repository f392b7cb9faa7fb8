#include "dsl/prescan.hpp"

#include <cstdio>
#include <string>

namespace fp8c::dsl {

std::size_t utf8_sequence_length(const std::string& text, std::size_t pos) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned char lead = byte(pos);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  std::uint32_t code = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    code = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    code = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    code = lead & 0x07;
  } else {
    return 0;  // continuation byte, overlong 0xC0/0xC1, or past U+10FFFF
  }
  if (pos + length > text.size()) return 0;
  for (std::size_t i = 1; i < length; ++i) {
    if ((byte(pos + i) & 0xC0) != 0x80) return 0;
    code = (code << 6) | (byte(pos + i) & 0x3F);
  }
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
  if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000)) return 0;
  if (code >= 0xD800 && code <= 0xDFFF) return 0;
  if (code > 0x10FFFF) return 0;
  return length;
}

namespace {

std::string hex_byte(unsigned char c) {
  char buffer[8];
  std::snprintf(buffer, sizeof buffer, "0x%02X", c);
  return buffer;
}

}  // namespace

bool prescan(const SourceFile& file, Diagnostics& diagnostics) {
  const std::string& text = file.text();
  const auto fail = [&](std::size_t at, std::string message) {
    const auto begin = static_cast<std::uint32_t>(at);
    diagnostics.error({begin, begin + 1}, std::move(message));
    return false;
  };

  bool in_comment = false;
  int depth = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == 0) return fail(i, "NUL byte in the file (is it a binary file?)");
    if (c >= 0x80) {
      const std::size_t length = utf8_sequence_length(text, i);
      if (length == 0) return fail(i, "invalid UTF-8 (byte " + hex_byte(c) + ")");
      if (!in_comment)
        return fail(i, "non-ASCII character outside a comment: names and values are ASCII");
      i += length;
      continue;
    }
    if (c == '\n') {
      in_comment = false;
    } else if (c == '#') {
      in_comment = true;
    } else if (!in_comment) {
      if (c < 0x20 && c != '\t' && c != '\r')
        return fail(i, "control character " + hex_byte(c) + " in the file");
      if (c == 0x7F) return fail(i, "control character 0x7F in the file");
      if (c == '{' && ++depth > kMaxBlockDepth)
        return fail(i, "blocks nested deeper than " + std::to_string(kMaxBlockDepth) + " levels");
      if (c == '}') --depth;
    }
    ++i;
  }
  return true;
}

}  // namespace fp8c::dsl
