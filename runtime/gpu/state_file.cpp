#include "runtime/gpu/state_file.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "runtime/sha256.hpp"

namespace fp8c::runtime {
namespace {

constexpr const char* kMagic = "fp8c-state 1";

std::string hex_float(float v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a", static_cast<double>(v));
  return buffer;
}

[[noreturn]] void fail(const std::string& what, int line, const std::string& problem) {
  throw std::runtime_error(what + ":" + std::to_string(line) +
                           ": not an fp8c state file: " + problem);
}

float parse_float(const std::string& token, const std::string& what, int line) {
  char* end = nullptr;
  const double v = std::strtod(token.c_str(), &end);
  if (token.empty() || end != token.c_str() + token.size())
    fail(what, line, "'" + token + "' is not a number");
  return static_cast<float>(v);
}

}  // namespace

std::string format_state_file(const LayerStates& states) {
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
  if (text.rfind(kMagic, 0) != 0)
    fail(what, 1, "the first line is not '" + std::string(kMagic) + "'");
  if (at == std::string::npos || (at > 0 && text[at - 1] != '\n'))
    fail(what, 0, "no checksum line (truncated?)");
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
      std::string name;
      if (!(words >> name)) fail(what, number, "a layer line without a name");
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
      if (!(d.scale > 0.0f) || std::isinf(d.scale))
        fail(what, number, "scale " + scale + " of '" + key + "' is not a positive finite number");
      if (count > (1u << 24))
        fail(what, number, "history of " + std::to_string(count) + " entries");
      for (std::size_t i = 0; i < count; ++i) {
        std::string v;
        if (!(words >> v)) fail(what, number, "history of '" + key + "' is short");
        d.history.push_back(parse_float(v, what, number));
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
