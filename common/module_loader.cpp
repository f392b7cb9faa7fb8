#include "common/module_loader.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <vector>

namespace fp8c {
namespace {

namespace fs = std::filesystem;

using EntryFunction = const void* (*)();

// dlerror() for `file`, without the "file: " it usually starts with (the
// caller names the file already).
std::string dlerror_text(const std::string& file) {
  const char* error = dlerror();
  std::string text = error ? error : "dlopen failed";
  if (text.rfind(file + ": ", 0) == 0) text.erase(0, file.size() + 2);
  return text;
}

// Why the table a module's entry returned cannot be used; empty when it can.
std::string check_table(const void* table, const ModuleSpec& spec) {
  const auto* header = static_cast<const ModuleHeader*>(table);
  if (header == nullptr) return std::string(spec.entry) + "() returned no table";
  if (header->abi_version != spec.abi_version ||
      std::string_view(header->fp8c_version) != FP8C_VERSION)
    return "built by fp8c " + std::string(header->fp8c_version) + " (module ABI " +
           std::to_string(header->abi_version) + "), this is fp8c " FP8C_VERSION " (ABI " +
           std::to_string(spec.abi_version) + "): use the module built with it";
  return {};
}

// Opens `file` and checks its table; on success fills `module` and returns
// an empty string, else returns why not.
std::string open_module(const std::string& file, const ModuleSpec& spec, LoadedModule& module) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return dlerror_text(file);
  dlerror();
  auto entry = reinterpret_cast<EntryFunction>(dlsym(handle, spec.entry));
  if (entry == nullptr) return "no symbol " + std::string(spec.entry) + ": not this fp8c module";
  const void* table = entry();
  if (std::string why = check_table(table, spec); !why.empty()) return why;
  module.table = table;
  // The dynamic linker's search gives no directory; ask where it found it.
  Dl_info info{};
  module.path = dladdr(reinterpret_cast<void*>(entry), &info) != 0 && info.dli_fname != nullptr
                    ? info.dli_fname
                    : file;
  return {};
}

// The directory of the shared object or executable this code was linked
// into: libfp8c.so's for users of the shared library, the program's when
// fp8c is linked statically (the `fp8c` tool, the tests).
std::optional<fs::path> directory_of_this_code() {
  Dl_info info{};
  link_map* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&directory_of_this_code), &info,
              reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) {
    return std::nullopt;
  }
  // The main program's link map has an empty name, and argv[0] (which dladdr
  // would give instead) may be relative to a directory since left.
  if (map == nullptr || map->l_name == nullptr || map->l_name[0] == '\0') {
    std::error_code error;
    const fs::path exe = fs::read_symlink("/proc/self/exe", error);
    if (error) return std::nullopt;
    return exe.parent_path();
  }
  return fs::path(map->l_name).parent_path();
}

std::vector<std::string> candidate_files(const char* file_name) {
  std::vector<std::string> files;
  const auto add = [&files](const fs::path& file) {
    std::string normal = file.lexically_normal().string();
    if (std::find(files.begin(), files.end(), normal) == files.end())
      files.push_back(std::move(normal));
  };
  if (const auto directory = directory_of_this_code()) {
    add(*directory / file_name);
    add(*directory / ".." / FP8C_INSTALL_LIBDIR / file_name);
    add(*directory / ".." / "lib" / file_name);
  }
  add(fs::path(FP8C_INSTALL_FULL_LIBDIR) / file_name);
  return files;
}

}  // namespace

LoadedModule load_module(const ModuleSpec& spec, const std::string& advice) {
  LoadedModule module;
  std::string tried;
  const auto note = [&tried](const std::string& where, const std::string& why) {
    tried += "\n  " + where + ": " + why;
  };
  const auto unavailable = [&](const std::string& extra) {
    module.error = std::string(spec.what) + " is unavailable: cannot load its module " +
                   spec.file_name + extra + ":" + tried + "\n" + advice;
    return module;
  };

  if (const char* override_path = std::getenv(spec.env_var);
      override_path != nullptr && override_path[0] != '\0') {
    const std::string why = open_module(override_path, spec, module);
    if (why.empty()) return module;
    note(override_path, why);
    return unavailable(std::string(" (") + spec.env_var + " is set, so nothing else was tried)");
  }

  dlerror();
  if (void* entry = dlsym(RTLD_DEFAULT, spec.entry)) {
    const void* table = reinterpret_cast<EntryFunction>(entry)();
    const std::string why = check_table(table, spec);
    Dl_info info{};
    const std::string where = dladdr(entry, &info) != 0 && info.dli_fname != nullptr
                                  ? info.dli_fname
                                  : "linked into this program";
    if (why.empty()) {
      module.table = table;
      module.path = where;
      return module;
    }
    note(where, why);
  }

  for (const std::string& file : candidate_files(spec.file_name)) {
    std::error_code error;
    if (!fs::exists(file, error)) {
      note(file, "not found");
      continue;
    }
    const std::string why = open_module(file, spec, module);
    if (why.empty()) return module;
    note(file, why);
  }

  const std::string why = open_module(spec.file_name, spec, module);
  if (why.empty()) return module;
  note(std::string(spec.file_name) + " (dynamic linker search)", why);
  return unavailable("");
}

}  // namespace fp8c
