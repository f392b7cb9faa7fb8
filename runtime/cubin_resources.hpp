// What a kernel uses, read from the cubin itself: its register count and its
// stack frame. ptxas -v prints both, but from CUDA 12.9 NVRTC can serve a
// repeated compile from the driver's compute cache without running ptxas, and
// then the log has no resource lines (seen on the H200: whole test runs where
// every kernel came back that way). The cubin carries them either way.
#pragma once

#include <string>
#include <vector>

namespace fp8c::runtime {

struct CubinResources {
  int registers = 0;          // per thread
  long long stack_frame = 0;  // bytes of local memory per thread (spills live here)
  // The largest frame of any function in the cubin: a callee that was not
  // inlined has its own.
  long long largest_frame = 0;
};

// Reads the resources of kernel `entry` from an ELF cubin (the global
// .nv.info section's per-function REGCOUNT and FRAME_SIZE attributes, keyed
// by the index of the function's symbol in the table .nv.info links to).
// Throws std::runtime_error naming the problem when the bytes are not a
// 64-bit little-endian ELF, are truncated, or hold no kernel `entry`.
CubinResources read_cubin_resources(const std::vector<char>& cubin, const std::string& entry);

}  // namespace fp8c::runtime
