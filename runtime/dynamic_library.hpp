// A shared library opened at run time. fp8c never links libcuda, libnvrtc,
// libnccl or libcublasLt: a machine without a driver still loads fp8c and
// runs everything that needs no GPU, and learns what is missing only when a
// GPU step asks for it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace fp8c::runtime {

// Thrown when a CUDA library or the GPU itself is not available; the message
// says which library, which names were tried, and why they failed.
class Unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class DynamicLibrary {
 public:
  // Opens the first of `sonames` that loads (RTLD_NOW | RTLD_LOCAL). Throws
  // Unavailable listing every name tried with dlerror()'s reason.
  static DynamicLibrary open(const std::string& what, const std::vector<std::string>& sonames);

  // The symbol's address; throws Unavailable if it is missing.
  void* symbol(const char* name) const;
  void* symbol_or_null(const char* name) const;

  const std::string& soname() const { return soname_; }

 private:
  DynamicLibrary(void* handle, std::string what, std::string soname)
      : handle_(handle), what_(std::move(what)), soname_(std::move(soname)) {}
  // Never closed: CUDA libraries keep threads and handlers that outlive any
  // sensible unload point, and unloading them at exit races with those.
  void* handle_;
  std::string what_;
  std::string soname_;
};

}  // namespace fp8c::runtime
