// Device code kept as real CUDA headers under codegen/kernels/device/, as
// strings for NVRTC: codegen/CMakeLists.txt embeds each file at build time
// (embed_source.cmake), so what is compiled is what the file says.
#pragma once

#include <string_view>

namespace fp8c::device_source {

extern const std::string_view fp8_gemm_params_h;
extern const std::string_view fp8_gemm_sm90_cuh;

}  // namespace fp8c::device_source
