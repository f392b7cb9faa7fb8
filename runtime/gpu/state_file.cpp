#include "runtime/gpu/state_file.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "runtime/sha256.hpp"

namespace fp8c::runtime {
namespace {

constexpr const char* kMagic = "fp8c-state 1";

// Exact and locale-independent: std::to_chars / from_chars in hex, never
// printf's %a or strtod, which follow LC_NUMERIC.
std::string hex_float(float v) {
  char buffer[64];
  const auto r = std::to_chars(buffer, buffer + sizeof buffer, v, std::chars_format::hex);
  return std::string(buffer, r.ptr);
}

[[noreturn]] void fail(const std::string& what, int line, const std::string& problem) {
  throw std::runtime_error(what + ":" + std::to_string(line) +
                           ": not an fp8c state file: " + problem);
}

float parse_float(const std::string& token, const std::string& what, int line) {
  float v = 0.0f;
  const auto r =
      std::from_chars(token.data(), token.data() + token.size(), v, std::chars_format::hex);
  if (token.empty() || r.ec != std::errc() || r.ptr != token.data() + token.size())
    fail(what, line, "'" + token + "' is not a hexadecimal float");
  return v;
}

bool usable_scale(float v) {
  return v > 0.0f && std::isfinite(v);
}

bool usable_amax(float v) {
  return v >= 0.0f && std::isfinite(v);
}

}  // namespace

std::string format_state_file(const LayerStates& states) {
  // What parse_state_file would refuse is not written either: a state that
  // cannot be loaded back is not a checkpoint.
  for (const auto& [layer, state] : states)
    for (const auto& [key, d] : state.delayed) {
      if (!usable_scale(d.scale))
        throw std::runtime_error("layer '" + layer + "' tensor '" + key + "' has scale " +
                                 hex_float(d.scale) + " (not a positive finite number)");
      for (float h : d.history)
        if (!usable_amax(h))
          throw std::runtime_error("layer '" + layer + "' tensor '" + key +
                                   "' has an amax history entry " + hex_float(h));
    }
  std::ostringstream body;
  body << kMagic << "\n";
  for (const auto& [layer, state] : states) {
    body << "layer " << layer << "\n";
    for (const auto& [key, d] : state.delayed) {
      body << "tensor " << key << " scale " << hex_float(d.scale) << " history "
           << d.history.size();
      for (float h : d.history) body << " " << hex_float(h);
      body << "\n";
    }
  }
  const std::string text = body.str();
  return text + "checksum " + to_hex(sha256(text)) + "\n";
}

LayerStates parse_state_file(const std::string& text, const std::string& what) {
  const auto at = text.rfind("checksum ");
  const std::string first_line = std::string(kMagic) + "\n";
  if (text.compare(0, first_line.size(), first_line) != 0)
    fail(what, 1, "the first line is not '" + std::string(kMagic) + "'");
  if (at == std::string::npos || (at > 0 && text[at - 1] != '\n'))
    fail(what, static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1,
         "no checksum line at the end (truncated?)");
  const std::string body = text.substr(0, at);
  std::string stored = text.substr(at + 9);
  while (!stored.empty() && (stored.back() == '\n' || stored.back() == '\r')) stored.pop_back();
  if (stored != to_hex(sha256(body)))
    throw std::runtime_error(what +
                             ": the state file's checksum does not match its contents "
                             "(corrupt or edited)");
  LayerStates states;
  std::istringstream in(body);
  std::string line;
  int number = 0;
  cpu::LayerState* current = nullptr;
  while (std::getline(in, line)) {
    ++number;
    if (number == 1) continue;
    std::istringstream words(line);
    std::string word;
    words >> word;
    if (word == "layer") {
      std::string name, extra;
      if (!(words >> name)) fail(what, number, "a layer line without a name");
      if (words >> extra) fail(what, number, "unexpected '" + extra + "' after the layer name");
      if (states.count(name)) fail(what, number, "layer '" + name + "' appears twice");
      current = &states[name];
    } else if (word == "tensor") {
      if (!current) fail(what, number, "a tensor line before any layer line");
      std::string key, scale_word, scale, history_word;
      std::size_t count = 0;
      if (!(words >> key >> scale_word >> scale >> history_word >> count) ||
          scale_word != "scale" || history_word != "history")
        fail(what, number, "expected 'tensor NAME scale S history N V...'");
      cpu::DelayedScale d;
      d.scale = parse_float(scale, what, number);
      if (!usable_scale(d.scale))
        fail(what, number, "scale " + scale + " of '" + key + "' is not a positive finite number");
      if (count > (1u << 24))
        fail(what, number, "history of " + std::to_string(count) + " entries");
      for (std::size_t i = 0; i < count; ++i) {
        std::string v;
        if (!(words >> v)) fail(what, number, "history of '" + key + "' is short");
        const float h = parse_float(v, what, number);
        if (!usable_amax(h))
          fail(what, number,
               "amax history entry " + v + " of '" + key + "' is not finite and non-negative");
        d.history.push_back(h);
      }
      if (words >> word) fail(what, number, "unexpected '" + word + "' after the history");
      if (current->delayed.count(key)) fail(what, number, "tensor '" + key + "' appears twice");
      current->delayed[key] = std::move(d);
    } else if (!word.empty()) {
      fail(what, number, "unexpected '" + word + "'");
    }
  }
  return states;
}

}  // namespace fp8c::runtime
