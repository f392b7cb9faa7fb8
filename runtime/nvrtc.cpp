#include "runtime/nvrtc.hpp"

#include <cuda.h>

#include <chrono>
#include <mutex>
#include <regex>
#include <stdexcept>

#include "runtime/cubin_resources.hpp"
#include "runtime/dynamic_library.hpp"

namespace fp8c::runtime {
namespace {

NvrtcApi load_nvrtc() {
  // The soname of the CUDA major version fp8c was built with first, then
  // the unversioned name a toolkit install provides.
  const DynamicLibrary library = DynamicLibrary::open(
      "NVRTC", {"libnvrtc.so." + std::to_string(CUDA_VERSION / 1000), "libnvrtc.so"});
  NvrtcApi api;
  api.soname = library.soname();
#define FP8C_LOAD(name) api.name = reinterpret_cast<decltype(&::name)>(library.symbol(#name));
  FP8C_NVRTC_FUNCTIONS(FP8C_LOAD)
#undef FP8C_LOAD
  if (api.nvrtcVersion(&api.major, &api.minor) != NVRTC_SUCCESS)
    throw Unavailable("NVRTC (" + api.soname + ") did not report its version");
  return api;
}

// ptxas -v prints, per kernel, lines such as
//   0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// (registers come from the cubin, which has them even when ptxas did not run).
void parse_resource_usage(NvrtcOutput& out) {
  std::smatch m;
  out.resources_in_log = out.log.find("bytes spill stores") != std::string::npos;
  if (out.resources_in_log) out.spill_stores = out.spill_loads = 0;
  static const std::regex spills(R"((\d+) bytes spill stores, (\d+) bytes spill loads)");
  for (auto from = out.log.cbegin(); std::regex_search(from, out.log.cend(), m, spills);) {
    out.spill_stores += std::stoi(m[1]);
    out.spill_loads += std::stoi(m[2]);
    from = m.suffix().first;
  }
}

}  // namespace

const NvrtcApi& nvrtc() {
  static std::once_flag once;
  static NvrtcApi api;
  static std::string error;
  std::call_once(once, [] {
    try {
      api = load_nvrtc();
    } catch (const std::exception& e) {
      error = e.what();
    }
  });
  if (!error.empty()) throw Unavailable(error);
  return api;
}

namespace {

NvrtcOutput compile_once(const std::string& source, const std::string& name,
                         const std::string& arch, const std::vector<std::string>& options) {
  const NvrtcApi& api = nvrtc();
  const auto check = [&](nvrtcResult r, const char* call) {
    if (r != NVRTC_SUCCESS)
      throw std::runtime_error(std::string(call) + " failed for " + name + ": " +
                               api.nvrtcGetErrorString(r));
  };
  nvrtcProgram program = nullptr;
  check(api.nvrtcCreateProgram(&program, source.c_str(), name.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  struct Destroy {
    const NvrtcApi& api;
    nvrtcProgram* program;
    ~Destroy() { api.nvrtcDestroyProgram(program); }
  } destroy{api, &program};

  std::vector<std::string> all = {"--gpu-architecture=" + arch, "--ptxas-options=-v", "--std=c++17",
                                  "--device-as-default-execution-space"};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const auto& o : all) argv.push_back(o.c_str());

  NvrtcOutput out;
  const auto t0 = std::chrono::steady_clock::now();
  const nvrtcResult compiled =
      api.nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  out.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::size_t log_size = 0;
  check(api.nvrtcGetProgramLogSize(program, &log_size), "nvrtcGetProgramLogSize");
  out.log.resize(log_size);
  if (log_size) check(api.nvrtcGetProgramLog(program, out.log.data()), "nvrtcGetProgramLog");
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (compiled != NVRTC_SUCCESS)
    throw std::runtime_error("NVRTC could not compile " + name + " for " + arch + ": " +
                             api.nvrtcGetErrorString(compiled) + "\n" + out.log);
  std::size_t size = 0;
  check(api.nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize");
  out.cubin.resize(size);
  check(api.nvrtcGetCUBIN(program, out.cubin.data()), "nvrtcGetCUBIN");
  parse_resource_usage(out);
  return out;
}

}  // namespace

NvrtcOutput compile_to_cubin(const std::string& source, const std::string& name,
                             const std::string& entry, const std::string& arch,
                             const std::vector<std::string>& options) {
  NvrtcOutput out = compile_once(source, name, arch, options);
  // The log has ptxas's resource lines only when ptxas ran: from CUDA 12.9
  // NVRTC serves a repeated compile from the driver's compute cache where a
  // driver is installed, and then the log is silent. The cubin is not.
  // A cubin this reader cannot follow (a future layout) leaves the
  // resources unknown; the kernel itself is fine to load.
  try {
    const CubinResources resources = read_cubin_resources(out.cubin, entry);
    out.registers = resources.registers;
    out.stack_frame = resources.stack_frame;
    if (!out.resources_in_log && resources.largest_frame == 0) {
      // Spills live in a stack frame: with none in the cubin there are none.
      out.spill_stores = 0;
      out.spill_loads = 0;
    }
  } catch (const std::runtime_error& e) {
    out.log += std::string(out.log.empty() ? "" : "\n") + "fp8c: " + e.what();
  }
  return out;
}

}  // namespace fp8c::runtime
