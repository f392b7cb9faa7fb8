#include "runtime/dynamic_library.hpp"

#include <dlfcn.h>

namespace fp8c::runtime {

DynamicLibrary DynamicLibrary::open(const std::string& what,
                                    const std::vector<std::string>& sonames) {
  std::string reasons;
  for (const auto& soname : sonames) {
    if (void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL))
      return DynamicLibrary(handle, what, soname);
    const char* error = dlerror();
    reasons += "\n  " + soname + ": " + (error ? error : "unknown error");
  }
  throw Unavailable(what + " is not available (tried:" + reasons + ")");
}

void* DynamicLibrary::symbol_or_null(const char* name) const {
  dlerror();
  return dlsym(handle_, name);
}

void* DynamicLibrary::symbol(const char* name) const {
  if (void* address = symbol_or_null(name)) return address;
  throw Unavailable(what_ + " (" + soname_ + ") has no symbol " + name);
}

}  // namespace fp8c::runtime
