// Several generated kernels compiled as one NVRTC program. Each program pays
// a fixed cost (NVRTC's start, its built-in declarations, ptxas's start:
// about 25 ms of the 45-250 ms a kernel takes on this project's kernels), so
// when there are more kernels to compile than threads, one program per
// thread is cheaper than one per kernel (gpt_mlp's nine kernels on 2 cores:
// measured in the README's start-up paragraph).
//
// Each kernel's source stays as generated: it goes into a namespace of its
// own (its helpers and typedefs do not collide with the next kernel's), and
// the macros it defines are undefined after it. The extern "C" entries keep
// their names, so the CUBIN of a batch loads and launches like a kernel's own.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "codegen/kernels/kernel_source.hpp"

namespace fp8c::runtime {

// One program's source holding every kernel of `kernels`.
std::string batch_source(const std::vector<const KernelSource*>& kernels);

// Splits kernels (given by their estimated costs) into at most `bins` groups
// of about equal total cost (longest first, each to the lightest group), in
// input order within a group. Returns the groups' indices; none is empty.
std::vector<std::vector<std::size_t>> balance_batches(const std::vector<double>& costs,
                                                      std::size_t bins);

}  // namespace fp8c::runtime
