// The gloo backend's entry points, without gloo: they load the module
// libfp8c_gloo.so (search order in gloo_communicator.hpp, ABI in
// gloo_module.hpp) and forward to it, so that nothing linking this file
// needs libgloo.so.0.
#include "collectives/gloo_communicator.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "collectives/gloo_module.hpp"
#include "common/module_loader.hpp"

namespace fp8c::collectives {

struct GlooRendezvousStore::Impl {
  const gloo_module::Api* api;
  gloo_module::Store* store;
  ~Impl() { api->destroy_store(store); }
};

namespace {

LoadedModule load_gloo_module() {
  const ModuleSpec spec{gloo_module::kFileName, gloo_module::kEntry, "FP8C_GLOO_MODULE",
                        "fp8c collectives: the gloo backend", gloo_module::kAbiVersion};
  return load_module(spec,
                     "set FP8C_GLOO_MODULE to the module's path, or use the in-process backend");
}

// Decided once per process: a backend that comes and goes would make ranks
// of one program disagree.
const LoadedModule& module() {
  static const LoadedModule loaded = load_gloo_module();
  return loaded;
}

const gloo_module::Api& api() {
  const LoadedModule& loaded = module();
  if (loaded.table == nullptr) throw GlooUnavailable(loaded.error);
  return *static_cast<const gloo_module::Api*>(loaded.table);
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
