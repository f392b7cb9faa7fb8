// NCCL, loaded at run time (libnccl.so.2 with dlopen; fp8c never links it),
// and the translation of collectives' types into NCCL's. Type mapping and
// version rules are plain functions so that CI checks them without a GPU.
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

#include "collectives/dtype.hpp"

namespace fp8c::runtime {

// Entry points fp8c uses. All exist since NCCL 2.14.3, the oldest fp8c
// accepts (ncclCommInitRankConfig with non-blocking communicators and
// ncclCommFinalize arrived then; ncclSend and ncclRecv, used by
// ring_shift, in 2.7).
#define FP8C_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)            \
  X(ncclGetErrorString)        \
  X(ncclGetUniqueId)           \
  X(ncclCommInitRank)          \
  X(ncclCommInitRankConfig)    \
  X(ncclCommFinalize)          \
  X(ncclCommDestroy)           \
  X(ncclCommAbort)             \
  X(ncclCommGetAsyncError)     \
  X(ncclAllGather)             \
  X(ncclReduceScatter)         \
  X(ncclAllReduce)             \
  X(ncclBroadcast)             \
  X(ncclSend)                  \
  X(ncclRecv)                  \
  X(ncclGroupStart)            \
  X(ncclGroupEnd)

struct NcclApi {
#define FP8C_DECLARE(name) decltype(&::name) name = nullptr;
  FP8C_NCCL_FUNCTIONS(FP8C_DECLARE)
#undef FP8C_DECLARE
  // ncclGetLastError (2.13): the text behind the last error; may be null.
  const char* (*ncclGetLastError)(ncclComm_t) = nullptr;
  int version = 0;  // ncclGetVersion's code of the library loaded, e.g. 22809
  std::string soname;
};

inline constexpr int kMinimumNcclVersion = 21403;       // 2.14.3
inline constexpr int kFirstNcclVersionWithFp8 = 22403;  // 2.24.3: ncclFloat8e4m3/e5m2

// Where libnccl is looked for: $FP8C_NCCL_LIBRARY alone when set (a soname
// or a path; tests point it at a missing file), else libnccl.so.2.
std::vector<std::string> nccl_library_names();

// Opens the first of `sonames` that loads and fetches every entry point.
// Throws Unavailable naming libnccl and every name tried, or a library
// older than kMinimumNcclVersion. Not cached: nccl() is.
NcclApi load_nccl(const std::vector<std::string>& sonames);

// load_nccl(nccl_library_names()) once per process; the failure, if any,
// is rethrown on every call.
const NcclApi& nccl();

// "2.28.9" for 22809 (and the pre-2.9 scheme, 2708 -> "2.7.8").
std::string nccl_version_text(int version);

bool nccl_has_fp8(int version);

// The ncclDataType_t moving `dtype` on a library of `version`. Before
// 2.24.3, FP8 travels as ncclUint8: right for gathers and broadcasts, the
// only collectives FP8 takes part in. E8M0 scale codes always travel as
// ncclUint8 (NCCL has no such type; they are only moved too).
ncclDataType_t nccl_data_type(ElemType dtype, int version);

ncclRedOp_t nccl_reduce_op(collectives::ReduceOp op);

// "ncclRemoteError (remote process exited or there was a network error)"
// plus ncclGetLastError's text when there is one.
std::string nccl_error_text(const NcclApi& api, ncclResult_t result, ncclComm_t comm);

}  // namespace fp8c::runtime
