// The gloo backend's entry points, without gloo: they load the module
// libfp8c_gloo.so (search order in gloo_communicator.hpp, ABI in
// gloo_module.hpp) and forward to it, so that nothing linking this file
// needs libgloo.so.0.
#include "collectives/gloo_communicator.hpp"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "collectives/gloo_module.hpp"

namespace fp8c::collectives {

namespace fs = std::filesystem;

struct GlooRendezvousStore::Impl {
  const gloo_module::Api* api;
  gloo_module::Store* store;
  ~Impl() { api->destroy_store(store); }
};

namespace {

struct LoadedModule {
  const gloo_module::Api* api = nullptr;
  std::string path;   // the file it came from
  std::string error;  // why no module could be used; empty when api is set
};

// Why the module's table cannot be used; empty when it can. abi_version and
// fp8c_version are the first fields in every ABI, so they are safe to read
// from a module of any build.
std::string check_api(const gloo_module::Api* api) {
  if (api == nullptr) return std::string(gloo_module::kEntry) + "() returned no table";
  if (api->abi_version != gloo_module::kAbiVersion ||
      std::string_view(api->fp8c_version) != FP8C_VERSION) {
    return "built by fp8c " + std::string(api->fp8c_version) + " (module ABI " +
           std::to_string(api->abi_version) + "), this is fp8c " FP8C_VERSION " (ABI " +
           std::to_string(gloo_module::kAbiVersion) + "): use the module built with it";
  }
  return {};
}

// dlerror() for `file`, without the "file: " it usually starts with (the
// caller names the file already).
std::string dlerror_text(const std::string& file) {
  const char* error = dlerror();
  std::string text = error ? error : "dlopen failed";
  if (text.rfind(file + ": ", 0) == 0) text.erase(0, file.size() + 2);
  return text;
}

// Opens `file` and checks its table; on success fills `module` and returns
// an empty string, else returns why not. Handles are never closed: the
// module's code backs every communicator and every exception it throws, and
// closing gloo at exit races with its socket threads.
std::string open_module(const std::string& file, LoadedModule& module) {
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return dlerror_text(file);
  dlerror();
  auto entry = reinterpret_cast<gloo_module::EntryFunction>(dlsym(handle, gloo_module::kEntry));
  if (entry == nullptr) {
    return "no symbol " + std::string(gloo_module::kEntry) + ": not an fp8c gloo module";
  }
  const gloo_module::Api* api = entry();
  if (std::string why = check_api(api); !why.empty()) return why;
  module.api = api;
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

std::vector<std::string> candidate_files() {
  std::vector<std::string> files;
  const auto add = [&files](const fs::path& file) {
    std::string normal = file.lexically_normal().string();
    if (std::find(files.begin(), files.end(), normal) == files.end())
      files.push_back(std::move(normal));
  };
  if (const auto directory = directory_of_this_code()) {
    add(*directory / gloo_module::kFileName);
    add(*directory / ".." / FP8C_INSTALL_LIBDIR / gloo_module::kFileName);
    add(*directory / ".." / "lib" / gloo_module::kFileName);
  }
  add(fs::path(FP8C_INSTALL_FULL_LIBDIR) / gloo_module::kFileName);
  return files;
}

LoadedModule load_module() {
  LoadedModule module;
  std::string tried;
  const auto note = [&tried](const std::string& where, const std::string& why) {
    tried += "\n  " + where + ": " + why;
  };
  const auto unavailable = [&](const std::string& extra) {
    module.error = "fp8c collectives: the gloo backend is unavailable: cannot load its module " +
                   std::string(gloo_module::kFileName) + extra + ":" + tried +
                   "\nset FP8C_GLOO_MODULE to the module's path, or use the in-process backend";
    return module;
  };

  if (const char* override_path = std::getenv("FP8C_GLOO_MODULE");
      override_path != nullptr && override_path[0] != '\0') {
    const std::string why = open_module(override_path, module);
    if (why.empty()) return module;
    note(override_path, why);
    return unavailable(" (FP8C_GLOO_MODULE is set, so nothing else was tried)");
  }

  dlerror();
  if (void* entry = dlsym(RTLD_DEFAULT, gloo_module::kEntry)) {
    const auto* table = reinterpret_cast<gloo_module::EntryFunction>(entry)();
    const std::string why = check_api(table);
    Dl_info info{};
    const std::string where = dladdr(entry, &info) != 0 && info.dli_fname != nullptr
                                  ? info.dli_fname
                                  : "linked into this program";
    if (why.empty()) {
      module.api = table;
      module.path = where;
      return module;
    }
    note(where, why);
  }

  for (const std::string& file : candidate_files()) {
    std::error_code error;
    if (!fs::exists(file, error)) {
      note(file, "not found");
      continue;
    }
    const std::string why = open_module(file, module);
    if (why.empty()) return module;
    note(file, why);
  }

  const std::string why = open_module(gloo_module::kFileName, module);
  if (why.empty()) return module;
  note(std::string(gloo_module::kFileName) + " (dynamic linker search)", why);
  return unavailable("");
}

// Decided once per process: a backend that comes and goes would make ranks
// of one program disagree.
const LoadedModule& module() {
  static const LoadedModule loaded = load_module();
  return loaded;
}

const gloo_module::Api& api() {
  const LoadedModule& loaded = module();
  if (loaded.api == nullptr) throw GlooUnavailable(loaded.error);
  return *loaded.api;
}

}  // namespace

std::string gloo_unavailable_reason() {
  return module().error;
}

std::string gloo_module_path() {
  return module().path;
}

GlooRendezvousStore::GlooRendezvousStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooRendezvousStore::~GlooRendezvousStore() = default;

std::shared_ptr<GlooRendezvousStore> GlooRendezvousStore::in_memory() {
  const gloo_module::Api& module = api();
  std::unique_ptr<Impl> impl(new Impl{&module, module.in_memory_store()});
  return std::shared_ptr<GlooRendezvousStore>(new GlooRendezvousStore(std::move(impl)));
}

std::shared_ptr<GlooRendezvousStore> GlooRendezvousStore::file_system(
    const std::string& directory) {
  const gloo_module::Api& module = api();
  std::unique_ptr<Impl> impl(new Impl{&module, module.file_system_store(directory)});
  return std::shared_ptr<GlooRendezvousStore>(new GlooRendezvousStore(std::move(impl)));
}

std::unique_ptr<Communicator> connect_gloo(int rank, int size,
                                           std::shared_ptr<GlooRendezvousStore> store,
                                           const GlooOptions& options) {
  if (!store) throw std::invalid_argument("connect_gloo: no rendezvous store");
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument("connect_gloo: rank " + std::to_string(rank) +
                                " is out of range for a group of " + std::to_string(size));
  }
  if (options.timeout.count() <= 0)
    throw std::invalid_argument("connect_gloo: timeout must be positive");
  // A store exists only where the module loaded: it carries the module.
  GlooRendezvousStore::Impl& impl = store->impl();
  return impl.api->connect(rank, size, *impl.store, options);
}

CommunicatorFactory gloo_thread_ranks(int size, const GlooOptions& options) {
  auto store = GlooRendezvousStore::in_memory();
  return [store, size, options](int rank) { return connect_gloo(rank, size, store, options); };
}

}  // namespace fp8c::collectives
