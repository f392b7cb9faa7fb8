#include "collectives/device/nccl_library.hpp"

#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {

using collectives::ReduceOp;

std::vector<std::string> nccl_library_names() {
  if (const char* name = std::getenv("FP8C_NCCL_LIBRARY"); name != nullptr && *name != '\0')
    return {name};
  return {"libnccl.so.2"};
}

NcclApi load_nccl(const std::vector<std::string>& sonames) {
  // The library's own name in the message, whatever the caller tried.
  const DynamicLibrary library = DynamicLibrary::open("NCCL (libnccl)", sonames);
  NcclApi api;
  api.soname = library.soname();
  // The version first: an old library lacks later entry points, and "too
  // old" is the clearer error.
  api.ncclGetVersion =
      reinterpret_cast<decltype(api.ncclGetVersion)>(library.symbol("ncclGetVersion"));
  if (api.ncclGetVersion(&api.version) != ncclSuccess)
    throw Unavailable("NCCL (" + api.soname + ") did not report its version");
  if (api.version < kMinimumNcclVersion) {
    throw Unavailable("NCCL (" + api.soname + ") is version " + nccl_version_text(api.version) +
                      "; fp8c needs " + nccl_version_text(kMinimumNcclVersion) + " or newer");
  }
#define FP8C_LOAD(name) api.name = reinterpret_cast<decltype(api.name)>(library.symbol(#name));
  FP8C_NCCL_FUNCTIONS(FP8C_LOAD)
#undef FP8C_LOAD
  api.ncclGetLastError =
      reinterpret_cast<decltype(api.ncclGetLastError)>(library.symbol_or_null("ncclGetLastError"));
  return api;
}

const NcclApi& nccl() {
  static std::once_flag once;
  static NcclApi api;
  static std::string error;
  std::call_once(once, [] {
    try {
      api = load_nccl(nccl_library_names());
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Unavailable(error);
  return api;
}

std::string nccl_version_text(int version) {
  // NCCL_VERSION(): X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z after.
  const bool old_scheme = version < 10000;
  const int major = old_scheme ? version / 1000 : version / 10000;
  const int minor = old_scheme ? version % 1000 / 100 : version % 10000 / 100;
  const int patch = version % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

bool nccl_has_fp8(int version) {
  return version >= kFirstNcclVersionWithFp8;
}

ncclDataType_t nccl_data_type(ElemType dtype, int version) {
  switch (dtype) {
    case ElemType::fp32:
      return ncclFloat32;
    case ElemType::bf16:
      return ncclBfloat16;
    case ElemType::fp16:
      return ncclFloat16;
    case ElemType::e4m3:
      return nccl_has_fp8(version) ? ncclFloat8e4m3 : ncclUint8;
    case ElemType::e5m2:
      return nccl_has_fp8(version) ? ncclFloat8e5m2 : ncclUint8;
    case ElemType::e8m0:  // scale codes: only moved, as bytes
    case ElemType::u8:
      return ncclUint8;
    case ElemType::i32:
      return ncclInt32;
    case ElemType::fp64:
      return ncclFloat64;
  }
  throw std::invalid_argument("nccl_data_type: invalid dtype " + std::string(to_string(dtype)));
}

ncclRedOp_t nccl_reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
  }
  throw std::invalid_argument("nccl_reduce_op: invalid op");
}

std::string nccl_error_text(const NcclApi& api, ncclResult_t result, ncclComm_t comm) {
  std::string text = "NCCL error " + std::to_string(static_cast<int>(result));
  if (api.ncclGetErrorString) {
    if (const char* s = api.ncclGetErrorString(result)) text += std::string(" (") + s + ")";
  }
  if (api.ncclGetLastError) {
    const char* last = api.ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') text += ": " + std::string(last);
  }
  return text;
}

}  // namespace fp8c::runtime
