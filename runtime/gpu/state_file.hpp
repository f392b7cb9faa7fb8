// The file a Session's FP8 state saves to: every layer's delayed-scaling
// scales and amax histories, as text with exact hexadecimal floats and a
// SHA-256 checksum of everything before it.
//
//   fp8c-state 1
//   layer fc1
//   tensor x scale 0x1.2p+6 history 3 0x1p+0 0x0p+0 0x0p+0
//   ...
//   checksum <64 hex digits>
//
// parse_state_file reads and checks all of it (format, version, checksum,
// numbers) before returning, so a caller can validate a whole file before
// changing anything.
#pragma once

#include <map>
#include <string>

#include "runtime/cpu/executor.hpp"

namespace fp8c::runtime {

using LayerStates = std::map<std::string, cpu::LayerState>;  // by layer name

std::string format_state_file(const LayerStates& states);

// Throws std::runtime_error naming `what` (the path) and the problem.
LayerStates parse_state_file(const std::string& text, const std::string& what);

}  // namespace fp8c::runtime
