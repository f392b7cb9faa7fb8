#include "runtime/ptx_compiler.hpp"

#include <cuda.h>
#include <nvJitLink.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {
namespace {

// nvJitLink.h's functions are inline wrappers on versioned symbols
// (__nvJitLinkCreate_13_0); the library exports the plain names too, and
// those are what is loaded, with these signatures.
struct NvJitLinkApi {
  nvJitLinkResult (*create)(nvJitLinkHandle*, std::uint32_t, const char**) = nullptr;
  nvJitLinkResult (*destroy)(nvJitLinkHandle*) = nullptr;
  nvJitLinkResult (*add_data)(nvJitLinkHandle, nvJitLinkInputType, const void*, std::size_t,
                              const char*) = nullptr;
  nvJitLinkResult (*complete)(nvJitLinkHandle) = nullptr;
  nvJitLinkResult (*cubin_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*cubin)(nvJitLinkHandle, void*) = nullptr;
  nvJitLinkResult (*error_log_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*error_log)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*info_log_size)(nvJitLinkHandle, std::size_t*) = nullptr;
  nvJitLinkResult (*info_log)(nvJitLinkHandle, char*) = nullptr;
  nvJitLinkResult (*version)(unsigned*, unsigned*) = nullptr;
  unsigned major = 0, minor = 0;
  std::string soname;
};

NvJitLinkApi load() {
  const DynamicLibrary library = DynamicLibrary::open(
      "nvJitLink (PTX to CUBIN for backend = llvm)",
      {"libnvJitLink.so." + std::to_string(CUDA_VERSION / 1000), "libnvJitLink.so"});
  NvJitLinkApi api;
  api.soname = library.soname();
  const auto get = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(library.symbol(name));
  };
  get(api.create, "nvJitLinkCreate");
  get(api.destroy, "nvJitLinkDestroy");
  get(api.add_data, "nvJitLinkAddData");
  get(api.complete, "nvJitLinkComplete");
  get(api.cubin_size, "nvJitLinkGetLinkedCubinSize");
  get(api.cubin, "nvJitLinkGetLinkedCubin");
  get(api.error_log_size, "nvJitLinkGetErrorLogSize");
  get(api.error_log, "nvJitLinkGetErrorLog");
  get(api.info_log_size, "nvJitLinkGetInfoLogSize");
  get(api.info_log, "nvJitLinkGetInfoLog");
  get(api.version, "nvJitLinkVersion");
  if (api.version(&api.major, &api.minor) != NVJITLINK_SUCCESS)
    throw Unavailable("nvJitLink (" + api.soname + ") did not report its version");
  return api;
}

const NvJitLinkApi& api() {
  static std::once_flag once;
  static NvJitLinkApi loaded;
  static std::string error;
  std::call_once(once, [] {
    try {
      loaded = load();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Unavailable(error);
  return loaded;
}

std::string read_log(const NvJitLinkApi& a, nvJitLinkHandle h, bool errors) {
  std::size_t size = 0;
  if ((errors ? a.error_log_size : a.info_log_size)(h, &size) != NVJITLINK_SUCCESS || size == 0)
    return {};
  std::string log(size, '\0');
  if ((errors ? a.error_log : a.info_log)(h, log.data()) != NVJITLINK_SUCCESS) return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

std::string ptx_compiler_version() {
  const NvJitLinkApi& a = api();
  return "nvJitLink " + std::to_string(a.major) + "." + std::to_string(a.minor);
}

NvrtcOutput compile_ptx_to_cubin(const std::string& ptx, const std::string& name,
                                 const std::string& entry, const std::string& arch) {
  const NvJitLinkApi& a = api();
  // -Xptxas=-v: ptxas's resource report, read as NVRTC's is.
  const std::string arch_option = "-arch=" + arch;
  const char* options[] = {arch_option.c_str(), "-O3", "-Xptxas=-v"};
  nvJitLinkHandle handle = nullptr;
  if (const nvJitLinkResult r = a.create(&handle, 3, options); r != NVJITLINK_SUCCESS)
    throw std::runtime_error("nvJitLinkCreate failed for " + name + " (" + arch + "): error " +
                             std::to_string(static_cast<int>(r)));
  struct Destroy {
    const NvJitLinkApi& a;
    nvJitLinkHandle* h;
    ~Destroy() { a.destroy(h); }
  } destroy{a, &handle};

  const auto t0 = std::chrono::steady_clock::now();
  nvJitLinkResult r = a.add_data(handle, NVJITLINK_INPUT_PTX, ptx.data(), ptx.size(), name.c_str());
  if (r == NVJITLINK_SUCCESS) r = a.complete(handle);
  NvrtcOutput out;
  out.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  out.log = read_log(a, handle, false);
  if (r != NVJITLINK_SUCCESS) {
    const std::string errors = read_log(a, handle, true);
    throw std::runtime_error("nvJitLink could not assemble " + name + " for " + arch + ": error " +
                             std::to_string(static_cast<int>(r)) + "\n" + errors +
                             (out.log.empty() ? "" : "\n" + out.log));
  }
  std::size_t size = 0;
  if (a.cubin_size(handle, &size) != NVJITLINK_SUCCESS || size == 0)
    throw std::runtime_error("nvJitLink gave no CUBIN for " + name);
  out.cubin.resize(size);
  if (a.cubin(handle, out.cubin.data()) != NVJITLINK_SUCCESS)
    throw std::runtime_error("nvJitLink could not hand over the CUBIN of " + name);
  NvrtcOutput resources = entry_resources(out.cubin, out.log, entry, {entry});
  resources.cubin = std::move(out.cubin);
  resources.milliseconds = out.milliseconds;
  resources.log = out.log + (out.log.empty() || resources.log.empty() ? "" : "\n") + resources.log;
  return resources;
}

}  // namespace fp8c::runtime
