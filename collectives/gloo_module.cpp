// libfp8c_gloo.so: the gloo backend, a module of its own so that fp8c and
// the `fp8c` tool do not need libgloo.so.0 (collectives/gloo_module.hpp says
// why and how it is loaded). Semantics: collectives/gloo_communicator.hpp.
#include "collectives/gloo_module.hpp"

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "collectives/reduce.hpp"

namespace fp8c::collectives {

namespace gloo_module {
struct Store {
  std::unique_ptr<gloo::rendezvous::Store> store;
};
}  // namespace gloo_module

namespace {

// gloo writes with writev() and no MSG_NOSIGNAL; without this a peer that
// closed its socket kills the process instead of raising an error.
void ignore_sigpipe_if_default() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      signal(SIGPIPE, SIG_IGN);
    }
  });
}

// Fixed-size image of a CollectiveCall, exchanged before every collective.
// Ranks run the same build of fp8c, so host layout is the wire layout.
struct WireCall {
  std::uint64_t sequence;
  std::uint64_t count;
  std::int32_t root;
  std::uint8_t kind;
  std::uint8_t dtype;
  std::uint8_t op;
  std::uint8_t unused;
};
static_assert(sizeof(WireCall) == 24);

WireCall to_wire(const CollectiveCall& call) {
  WireCall wire{};
  wire.sequence = call.sequence;
  wire.count = call.count;
  wire.root = call.root;
  wire.kind = static_cast<std::uint8_t>(call.kind);
  wire.dtype = static_cast<std::uint8_t>(call.dtype);
  wire.op = static_cast<std::uint8_t>(call.op);
  return wire;
}

CollectiveCall from_wire(const WireCall& wire) {
  CollectiveCall call;
  call.sequence = wire.sequence;
  call.count = wire.count;
  call.root = wire.root;
  call.kind = static_cast<CollectiveKind>(wire.kind);
  call.dtype = static_cast<ElemType>(wire.dtype);
  call.op = static_cast<ReduceOp>(wire.op);
  return call;
}

bool mentions(const std::string& text, std::string_view word) {
  return text.find(word) != std::string::npos;
}

// gloo reports everything as exceptions with free text; sort them into the
// failure kinds callers can act on.
FailureKind classify_gloo_error(const std::string& what) {
  if (mentions(what, "Timed out") || mentions(what, "timeout")) return FailureKind::kTimeout;
  if (mentions(what, "closed") || mentions(what, "reset by peer") ||
      mentions(what, "Broken pipe")) {
    return FailureKind::kPeerFailed;
  }
  return FailureKind::kTransport;
}

std::string explain_gloo_error(FailureKind kind, const std::string& what,
                               std::chrono::milliseconds timeout) {
  switch (kind) {
    case FailureKind::kTimeout:
      return "not every rank took part within " + std::to_string(timeout.count()) +
             " ms (a rank did not arrive, or failed): gloo: " + what;
    case FailureKind::kPeerFailed:
      return "a peer closed its connection; it probably timed out or failed first (see its "
             "error): gloo: " +
             what;
    default:
      return "gloo: " + what;
  }
}

// connectFullMesh returns on a rank once ITS side of every pair is connected;
// a peer may still be completing its side. Closing a socket then (as a rank
// that fails right after connecting does) crashes the peer's gloo event loop
// (an uncaught EnforceNotMet from getpeername). So nobody leaves connect_gloo
// until every rank has left connectFullMesh: an allgather completes only
// after every rank has entered it.
void wait_until_every_rank_is_connected(const std::shared_ptr<gloo::Context>& context,
                                        std::chrono::milliseconds timeout) {
  std::int32_t mine = context->rank;
  std::vector<std::int32_t> everyone(static_cast<std::size_t>(context->size));
  gloo::AllgatherOptions options(context);
  options.setInput(&mine, 1);
  options.setOutput(everyone.data(), everyone.size());
  options.setTag(std::numeric_limits<std::uint32_t>::max());  // never a collective's tag
  options.setTimeout(timeout);
  gloo::allgather(options);
}

std::uint8_t* writable(const void* pointer) {
  // gloo's buffers are non-const even when gloo only reads them (inputs).
  return static_cast<std::uint8_t*>(const_cast<void*>(pointer));
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(int rank, int size, std::chrono::milliseconds timeout,
                   std::shared_ptr<gloo::Context> context)
      : Communicator(rank, size, timeout), context_(std::move(context)) {}

  std::string_view backend_name() const override { return "gloo"; }

 protected:
  void run_all_gather(const CollectiveCall& call, const void* send, void* recv) override {
    collective(call, [&](std::chrono::steady_clock::time_point deadline) {
      const std::size_t bytes = call.count * element_bytes(call.dtype);
      if (bytes == 0) return;
      auto* out = static_cast<std::uint8_t*>(recv);
      gloo::AllgatherOptions options(context_);
      // No input means in place to gloo: our rank's block is already in recv.
      if (send != out + static_cast<std::size_t>(rank()) * bytes) {
        options.setInput(writable(send), bytes);
      }
      options.setOutput(out, bytes * static_cast<std::size_t>(size()));
      options.setTag(tag(call, kDataTag));
      options.setTimeout(time_left(deadline));
      gloo::allgather(options);
    });
  }

  void run_reduce_scatter(const CollectiveCall& call, const void* send, void* recv) override {
    collective(call, [&](std::chrono::steady_clock::time_point deadline) {
      const std::size_t block_bytes = call.count * element_bytes(call.dtype);
      if (block_bytes == 0) return;
      const std::size_t total = block_bytes * static_cast<std::size_t>(size());
      // After the alltoall, row q of `contributions` is rank q's copy of this
      // rank's block.
      std::vector<std::uint8_t> contributions(total);
      gloo::AlltoallOptions options(context_);
      options.setInput(writable(send), total);
      options.setOutput(contributions.data(), total);
      options.setTag(tag(call, kDataTag));
      options.setTimeout(time_left(deadline));
      gloo::alltoall(options);
      reduce_rows(contributions, block_bytes, recv, call);
    });
  }

  void run_all_reduce(const CollectiveCall& call, const void* send, void* recv) override {
    collective(call, [&](std::chrono::steady_clock::time_point deadline) {
      const std::size_t bytes = call.count * element_bytes(call.dtype);
      if (bytes == 0) return;
      std::vector<std::uint8_t> contributions(bytes * static_cast<std::size_t>(size()));
      gloo::AllgatherOptions options(context_);
      options.setInput(writable(send), bytes);
      options.setOutput(contributions.data(), contributions.size());
      options.setTag(tag(call, kDataTag));
      options.setTimeout(time_left(deadline));
      gloo::allgather(options);
      reduce_rows(contributions, bytes, recv, call);
    });
  }

  void run_broadcast(const CollectiveCall& call, const void* send, void* recv) override {
    collective(call, [&](std::chrono::steady_clock::time_point deadline) {
      const std::size_t bytes = call.count * element_bytes(call.dtype);
      if (bytes == 0) return;
      gloo::BroadcastOptions options(context_);
      // Non-roots must not name an input; the root names none when in place.
      if (rank() == call.root && send != recv) options.setInput(writable(send), bytes);
      options.setOutput(static_cast<std::uint8_t*>(recv), bytes);
      options.setRoot(call.root);
      options.setTag(tag(call, kDataTag));
      options.setTimeout(time_left(deadline));
      gloo::broadcast(options);
    });
  }

  // Real point to point, no gather: one unbound-buffer receive from the
  // previous rank and one send to the next, matched by a slot of our own
  // (kRingShiftSlotPrefix with this call's data tag). Both waits get the
  // time left until the deadline; gloo throws "Timed out ..." when it
  // passes, and a closed connection when a peer failed.
  void run_ring_shift(const CollectiveCall& call, const void* send, void* recv) override {
    collective(call, [&](std::chrono::steady_clock::time_point deadline) {
      const std::size_t bytes = call.count * element_bytes(call.dtype);
      if (bytes == 0) return;
      if (size() == 1) {
        std::memcpy(recv, send, bytes);
        return;
      }
      const int next = ring_next(rank(), size());
      const int previous = ring_previous(rank(), size());
      const std::uint64_t slot = gloo::Slot::build(kRingShiftSlotPrefix, tag(call, kDataTag));
      auto incoming = context_->createUnboundBuffer(recv, bytes);
      auto outgoing = context_->createUnboundBuffer(writable(send), bytes);
      incoming->recv(previous, slot);
      outgoing->send(next, slot);
      if (!incoming->waitRecv(time_left(deadline)) || !outgoing->waitSend(time_left(deadline))) {
        throw std::runtime_error("gloo aborted the ring_shift send or receive");
      }
    });
  }

  void run_barrier(const CollectiveCall& call) override {
    // The descriptor exchange in collective() completes on a rank only after
    // every rank has sent its descriptor: that is a barrier already.
    collective(call, [](std::chrono::steady_clock::time_point) {});
  }

  void release_peers(const std::string&) noexcept override {
    // Hard-close every socket so that peers blocked in a collective fail now
    // (with "connection closed/reset") rather than at their timeout.
    try {
      context_->closeConnections();
    } catch (...) {
      // Already broken: nothing left to release.
    }
  }

 private:
  static constexpr std::uint32_t kDescriptorTag = 0;
  static constexpr std::uint32_t kDataTag = 1;
  // gloo's own collectives use slot prefixes 0x01-0x08 (gloo/types.h).
  static constexpr std::uint8_t kRingShiftSlotPrefix = 0x40;

  // Distinct tags per collective keep a late message of one collective from
  // ever matching another's receive.
  static std::uint32_t tag(const CollectiveCall& call, std::uint32_t part) {
    return static_cast<std::uint32_t>(call.sequence * 2 + part);
  }

  static std::chrono::milliseconds time_left(std::chrono::steady_clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    // gloo reads 0 ms as "no timeout", so never hand it 0.
    return std::max(left, std::chrono::milliseconds(1));
  }

  // Exchanges call descriptors, fails on disagreement, then runs `move_data`;
  // gloo's exceptions come out as CollectiveError.
  template <typename MoveData>
  void collective(const CollectiveCall& call, MoveData move_data) {
    const auto deadline = deadline_from_now();
    try {
      check_all_ranks_agree(call, deadline);
      move_data(deadline);
    } catch (const CollectiveError&) {
      throw;
    } catch (const std::exception& failure) {
      const FailureKind kind = classify_gloo_error(failure.what());
      throw error(kind, call, explain_gloo_error(kind, failure.what(), timeout()));
    }
  }

  void check_all_ranks_agree(const CollectiveCall& call,
                             std::chrono::steady_clock::time_point deadline) {
    WireCall mine = to_wire(call);
    std::vector<WireCall> everyone(static_cast<std::size_t>(size()));
    gloo::AllgatherOptions options(context_);
    options.setInput(reinterpret_cast<std::uint8_t*>(&mine), sizeof(WireCall));
    options.setOutput(reinterpret_cast<std::uint8_t*>(everyone.data()),
                      everyone.size() * sizeof(WireCall));
    options.setTag(tag(call, kDescriptorTag));
    options.setTimeout(time_left(deadline));
    gloo::allgather(options);

    std::vector<CollectiveCall> calls;
    calls.reserve(everyone.size());
    for (const WireCall& wire : everyone) calls.push_back(from_wire(wire));
    if (const auto disagreeing = first_disagreeing_rank(calls)) {
      throw error(FailureKind::kMismatch, call, describe_disagreement(calls, *disagreeing));
    }
  }

  void reduce_rows(const std::vector<std::uint8_t>& rows, std::size_t row_bytes, void* out,
                   const CollectiveCall& call) const {
    std::vector<const void*> inputs;
    for (int row = 0; row < size(); ++row) {
      inputs.push_back(rows.data() + static_cast<std::size_t>(row) * row_bytes);
    }
    reduce_in_rank_order(inputs, out, call.count, call.dtype, call.op);
  }

  std::shared_ptr<gloo::Context> context_;
};

gloo_module::Store* in_memory_store() {
  auto store = std::make_unique<gloo_module::Store>();
  store->store = std::make_unique<gloo::rendezvous::HashStore>();
  return store.release();
}

gloo_module::Store* file_system_store(const std::string& directory) {
  // gloo's FileStore resolves the path with realpath(), which fails on a
  // directory that does not exist yet.
  std::filesystem::create_directories(directory);
  auto store = std::make_unique<gloo_module::Store>();
  store->store = std::make_unique<gloo::rendezvous::FileStore>(directory);
  return store.release();
}

void destroy_store(gloo_module::Store* store) noexcept {
  delete store;
}

// The loader (gloo_communicator.cpp) has checked the arguments.
std::unique_ptr<Communicator> connect_rank(int rank, int size, gloo_module::Store& store,
                                           const GlooOptions& options) {
  ignore_sigpipe_if_default();
  try {
    gloo::transport::tcp::attr attributes;
    attributes.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attributes);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
    // connectFullMesh waits for peers' addresses with the context timeout.
    context->setTimeout(options.timeout);
    gloo::rendezvous::PrefixStore prefixed(options.prefix, *store.store);
    context->connectFullMesh(prefixed, device);
    wait_until_every_rank_is_connected(context, options.timeout);
    return std::make_unique<GlooCommunicator>(rank, size, options.timeout, std::move(context));
  } catch (const std::exception& failure) {
    const FailureKind kind = classify_gloo_error(failure.what());
    throw CollectiveError(kind, "connect", rank, size,
                          explain_gloo_error(kind, failure.what(), options.timeout) +
                              " (store prefix '" + options.prefix + "', host " + options.hostname +
                              ")");
  }
}

const gloo_module::Api kApi = {
    .abi_version = gloo_module::kAbiVersion,
    .fp8c_version = FP8C_VERSION,
    .in_memory_store = in_memory_store,
    .file_system_store = file_system_store,
    .destroy_store = destroy_store,
    .connect = connect_rank,
};

}  // namespace
}  // namespace fp8c::collectives

static_assert(std::string_view(fp8c::collectives::gloo_module::kEntry) == "fp8c_gloo_module_api");

// The module's only exported symbol (the rest is hidden: -fvisibility=hidden
// and --exclude-libs for the static parts it carries).
extern "C" __attribute__((visibility("default"))) const fp8c::collectives::gloo_module::Api*
fp8c_gloo_module_api() {
  return &fp8c::collectives::kApi;
}
