#include "runtime/nvrtc.hpp"

#include <cuda.h>

#include <algorithm>
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

// ptxas -v prints, per function (kernels and device functions it did not
// inline), a block such as
//   ptxas info    : Function properties for NAME
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
// An entry's spills: its own block plus every function's that is not one of
// the program's entries (a device function some kernel calls; which one is
// not in the log, so each entry is charged for it). Registers come from the
// cubin, which has them even when ptxas did not run.
void parse_resource_usage(const std::string& log, const std::string& entry,
                          const std::vector<std::string>& entries, NvrtcOutput& out) {
  out.resources_in_log = log.find("bytes spill stores") != std::string::npos;
  if (!out.resources_in_log) return;
  out.spill_stores = out.spill_loads = 0;
  static const std::regex block(
      R"(Function properties for (\S+)\s*\n[^\n]*?(\d+) bytes spill stores, (\d+) bytes spill loads)");
  std::smatch m;
  for (auto from = log.cbegin(); std::regex_search(from, log.cend(), m, block);) {
    const std::string function = m[1];
    const bool other_entry =
        function != entry && std::find(entries.begin(), entries.end(), function) != entries.end();
    if (!other_entry) {
      out.spill_stores += std::stoi(m[2]);
      out.spill_loads += std::stoi(m[3]);
    }
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

struct Compiled {
  std::vector<char> cubin;
  std::string log;
  double milliseconds = 0;
};

Compiled compile_once(const std::string& source, const std::string& name, const std::string& arch,
                      const std::vector<std::string>& options) {
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

  Compiled out;
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
  return out;
}

}  // namespace

NvrtcOutput entry_resources(const std::vector<char>& cubin, const std::string& log,
                            const std::string& entry, const std::vector<std::string>& entries) {
  NvrtcOutput out;
  parse_resource_usage(log, entry, entries, out);
  // The log has ptxas's resource lines only when ptxas ran: from CUDA 12.9
  // NVRTC serves a repeated compile from the driver's compute cache where a
  // driver is installed, and then the log is silent. The cubin is not.
  // A cubin this reader cannot follow (a future layout) leaves the
  // resources unknown; the kernel itself is fine to load.
  try {
    const CubinResources resources = read_cubin_resources(cubin, entry);
    out.registers = resources.registers;
    out.stack_frame = resources.stack_frame;
    if (!out.resources_in_log && resources.largest_frame == 0) {
      // Spills live in a stack frame: with none in the cubin there are none.
      out.spill_stores = 0;
      out.spill_loads = 0;
    }
  } catch (const std::runtime_error& e) {
    out.log = std::string("fp8c: ") + e.what();
  }
  return out;
}

NvrtcOutput compile_to_cubin(const std::string& source, const std::string& name,
                             const std::string& entry, const std::string& arch,
                             const std::vector<std::string>& options) {
  Compiled c = compile_once(source, name, arch, options);
  NvrtcOutput out = entry_resources(c.cubin, c.log, entry, {entry});
  out.log = c.log + (c.log.empty() || out.log.empty() ? "" : "\n") + out.log;
  out.milliseconds = c.milliseconds;
  out.cubin = std::move(c.cubin);
  return out;
}

NvrtcBatchOutput compile_batch_to_cubin(const std::string& source, const std::string& name,
                                        const std::vector<std::string>& entries,
                                        const std::string& arch,
                                        const std::vector<std::string>& options) {
  Compiled c = compile_once(source, name, arch, options);
  NvrtcBatchOutput out;
  for (const auto& e : entries) out.entries.push_back(entry_resources(c.cubin, c.log, e, entries));
  out.log = std::move(c.log);
  out.milliseconds = c.milliseconds;
  out.cubin = std::move(c.cubin);
  return out;
}

}  // namespace fp8c::runtime
