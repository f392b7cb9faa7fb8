// overlap = ring on the GPU (codegen/lower/ring.hpp): a GEMM step that runs
// its collective as ranks - 1 ring shifts on the communication stream, each
// rank chunk's GEMM on the main stream as soon as its data is there.
//
// Ordering, by events (ring_event):
//   gather   0: main's work so far (the step's hazards) -> the comm stream;
//            1 + i: segment gathered_segment(rank, ranks, i) has arrived
//            (the own copy for i = 0, shift i - 1 after), which chunk i's
//            GEMM waits for. Shifts only read segments already there and
//            write the next, which no GEMM of the ring has read yet.
//   scatter  per step i: the sum of chunk i is written (main) before shift i
//            sends it (comm); shift i has landed (comm) before the sum of step
//            i + 1 reads it (main). So one running sum received and one sent
//            suffice: shift i starts after sum i has read what shift i - 1
//            received, and sum i + 1 writes after shift i has sent. What
//            overlaps is the GEMM of chunk i + 1 with shift i, and the GEMM
//            touches neither buffer.
// Each ring ends with main waiting for its last shift, so nothing of it is
// left on the comm stream when the step is done.
#include "codegen/lower/ring.hpp"
#include "runtime/gpu/rank_executor.hpp"

namespace fp8c::runtime {
template <typename T>
const T& GpuRankExecutor::ring_collective(const GemmCall& call) const {
  const auto i = static_cast<std::size_t>(call.ring_collective);
  const T* c = pass_steps_ && i < pass_steps_->size() ? (*pass_steps_)[i].as<T>() : nullptr;
  if (!c)
    throw std::logic_error("gpu executor: layer '" + layer_.name + "': a ring GEMM whose step " +
                           std::to_string(call.ring_collective) + " is not its collective");
  return *c;
}
template const AllGatherStep& GpuRankExecutor::ring_collective<AllGatherStep>(
    const GemmCall&) const;
template const ReduceScatterStep& GpuRankExecutor::ring_collective<ReduceScatterStep>(
    const GemmCall&) const;

Event& GpuRankExecutor::ring_event(std::size_t i) {
  while (ring_events_.size() <= i) ring_events_.push_back(std::make_unique<Event>());
  return *ring_events_[i];
}

// The own segment into its place of the gathered tensor (data and block
// scales), on the comm stream after everything main has so far.
void GpuRankExecutor::ring_gather_begin(const AllGatherStep& ag) {
  if (preparing_) return;
  const DriverApi& cu = driver();
  const CUstream cs = ring_stream();
  const int rank = r_.comm.rank();
  ring_event(0).record(r_.stream);
  FP8C_CU(cu.cuStreamWaitEvent(cs, ring_event(0).get(), 0));
  const auto own = [&](int in, int out) {
    const std::size_t bytes = plan_.tensor(in).bytes();
    FP8C_CU(
        cu.cuMemcpyDtoDAsync(at(out) + static_cast<std::size_t>(rank) * bytes, at(in), bytes, cs));
  };
  own(ag.in, ag.out);
  if (ag.scales_in != kNoTensor) own(ag.scales_in, ag.scales_out);
  ring_event(1).record(cs);
}

// Shift `shift`: sends the segment this rank got last, receives the next.
void GpuRankExecutor::ring_gather_shift(const AllGatherStep& ag, int shift) {
  if (preparing_) return;
  const CUstream cs = ring_stream();
  const int rank = r_.comm.rank(), ranks = r_.comm.size();
  const auto send = static_cast<std::size_t>(gathered_segment(rank, ranks, shift));
  const auto recv = static_cast<std::size_t>(gathered_segment(rank, ranks, shift + 1));
  const auto move = [&](int in, int out) {
    const std::size_t bytes = plan_.tensor(in).bytes();
    r_.comm.ring_shift(at(out) + send * bytes, at(out) + recv * bytes, bytes, ElemType::u8, cs);
  };
  move(ag.in, ag.out);
  if (ag.scales_in != kNoTensor) move(ag.scales_in, ag.scales_out);
  ring_event(2 + static_cast<std::size_t>(shift)).record(cs);
}

// gather_rows: A's rows (and D's, and the pre-activation's) of segment s are
// rows [s * m, (s + 1) * m) of the gathered operand; bias, scales and the
// output amax (zeroed once, before the first chunk) are shared.
void GpuRankExecutor::ring_gather_rows(const GemmStep& s, const GemmCall& call, const GemmArgs& g,
                                       const AllGatherStep& ag) {
  const int rank = r_.comm.rank(), ranks = r_.comm.size();
  const auto m = static_cast<std::int64_t>(plan_.tensor(ag.in).dims[0].local);
  if (g.a.k_outer || g.a.rows != m * ranks)
    throw std::logic_error("gpu executor: a ring GEMM whose A is not the gathered rows");
  ring_gather_begin(ag);
  for (int i = 0; i < ranks; ++i) {
    if (i + 1 < ranks) ring_gather_shift(ag, i);
    if (!preparing_)
      FP8C_CU(driver().cuStreamWaitEvent(r_.stream,
                                         ring_event(1 + static_cast<std::size_t>(i)).get(), 0));
    const auto seg = static_cast<std::int64_t>(gathered_segment(rank, ranks, i));
    GemmArgs c = g;
    c.a.rows = m;
    c.a.data += static_cast<CUdeviceptr>(seg * m * g.a.ld) * element_bytes(g.a.type);
    c.d += static_cast<CUdeviceptr>(seg * m * g.ldd) * element_bytes(g.d_type);
    if (g.aux) c.aux += static_cast<CUdeviceptr>(seg * m * g.ld_aux) * element_bytes(g.aux_type);
    run_gemm(s, call, c);
  }
}

// scatter_rows: at step i this rank computes its partial of chunk
// scattered_chunk(rank, ranks, i) (rows of A and of the partial), adds it
// to the running sum received, and sends the sum on; the last step's chunk
// is the rank's own, rounded once into the reduce-scatter's output.
void GpuRankExecutor::ring_scatter_rows(const GemmStep& s, const LoweredStep& l,
                                        const GemmCall& call, const GemmArgs& g,
                                        const ReduceScatterStep& rs) {
  const int rank = r_.comm.rank(), ranks = r_.comm.size();
  const Tensor& out = plan_.tensor(rs.out);
  const auto m = static_cast<std::int64_t>(out.dims[0].local);
  const std::uint64_t count = out.elements();
  if (g.a.k_outer || g.a.rows != m * ranks)
    throw std::logic_error("gpu executor: a ring GEMM whose A is not the scattered rows");
  const KernelLaunch* k = l.find_launch(LaunchRole::ring_sum);
  if (!k) throw std::logic_error("gpu executor: a ring reduce-scatter without its sum kernel");
  // The lowering sized the staging as two halves, each the largest chunk's
  // fp32 sum rounded up to 256 bytes (StagingSizes::ring_sums).
  const std::size_t half = ring_sums_.bytes() / 2;
  if (!preparing_ && count * 4 > half)
    throw std::logic_error("gpu executor: the ring's running sums do not fit their staging");
  const CUdeviceptr received = ring_sums_.get(), sent = ring_sums_.get() + half;
  const DriverApi& cu = driver();
  const CUstream cs = ring_stream();
  for (int i = 0; i < ranks; ++i) {
    const auto chunk = static_cast<std::int64_t>(scattered_chunk(rank, ranks, i));
    GemmArgs c = g;
    c.a.rows = m;
    c.a.data += static_cast<CUdeviceptr>(chunk * m * g.a.ld) * element_bytes(g.a.type);
    c.d += static_cast<CUdeviceptr>(chunk * m * g.ldd) * element_bytes(g.d_type);
    run_gemm(s, call, c);
    if (preparing_) continue;
    const auto step = static_cast<std::size_t>(i);
    if (i > 0) FP8C_CU(cu.cuStreamWaitEvent(r_.stream, ring_event(2 * step - 1).get(), 0));
    const bool last = i + 1 == ranks;
    r_.kernels.ring_sum(std::get<RingSumKernel>(k->kernel.description))
        .launch(i > 0 ? received : 0, c.d, last ? at(rs.out) : sent, count, last, r_.stream);
    if (last) break;
    ring_event(2 * step).record(r_.stream);
    FP8C_CU(cu.cuStreamWaitEvent(cs, ring_event(2 * step).get(), 0));
    r_.comm.ring_shift(sent, received, count, ElemType::fp32, cs);
    ring_event(2 * step + 1).record(cs);
  }
}

}  // namespace fp8c::runtime
