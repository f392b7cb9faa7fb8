// Finding and opening one of fp8c's dlopen modules (libfp8c_gloo.so, the
// gloo backend; libfp8c_llvm.so, the LLVM backend): parts that need a
// library the rest of fp8c must run without (the GPU machine has neither
// gloo nor LLVM), so nothing else names it as DT_NEEDED.
//
// A module exports one C function, `entry`, returning a table that starts
// with a ModuleHeader: the ABI number of the table and the fp8c version of
// the build that made it. A table is usable when both are this build's
// (`abi_version`, FP8C_VERSION): a module from another build is refused,
// saying whose it is. The first of these that yields a usable table wins:
//   1. $env_var, when set and not empty: that file and nothing else, so an
//      override never silently falls back to another copy;
//   2. a module already in the process (a program linked with it);
//   3. next to the binary that holds this code: the directory D of
//      libfp8c.so, or of the executable (/proc/self/exe) when fp8c is
//      linked statically, then D/../<install libdir> and D/../lib (an
//      installed bin/fp8c; build/tools/fp8c with its modules in build/lib);
//   4. the install libdir configured at build time;
//   5. the dynamic linker's own search for file_name.
// When none does, `error` names the module, each place tried and why it
// failed (dlerror()). Handles are never closed: a module's code backs the
// objects and exceptions it made.
#pragma once

#include <cstdint>
#include <string>

namespace fp8c {

// The first fields of every module's table, in every ABI, so that they are
// safe to read from a module of any build.
struct ModuleHeader {
  std::uint32_t abi_version;
  const char* fp8c_version;
};

struct ModuleSpec {
  const char* file_name;      // "libfp8c_gloo.so"
  const char* entry;          // the exported C function
  const char* env_var;        // the override, e.g. "FP8C_GLOO_MODULE"
  const char* what;           // for messages: "fp8c collectives: the gloo backend"
  std::uint32_t abi_version;  // of the table this build reads
};

struct LoadedModule {
  const void* table = nullptr;  // what entry() returned, checked
  std::string path;             // the file it came from
  std::string error;            // why no module could be used; empty when table is set
};

// `advice` ends the error ("set FP8C_GLOO_MODULE to the module's path, or ...").
LoadedModule load_module(const ModuleSpec& spec, const std::string& advice);

}  // namespace fp8c
