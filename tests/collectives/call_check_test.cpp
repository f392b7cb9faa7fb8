// The argument checks every communicator makes before communicating: the
// host ones (Communicator) and the device ones (single-GPU group, NCCL).
// Pure functions of addresses: no GPU needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "collectives/call_check.hpp"
#include "collectives/call_sequence.hpp"
#include "collectives/collective_error.hpp"

namespace fp8c::collectives {
namespace {

using ::testing::HasSubstr;

constexpr BufferAddress kBase = 0x7f0000000000ull;

CollectiveCall call(CollectiveKind kind, std::size_t count, ElemType dtype = ElemType::fp32,
                    ReduceOp op = ReduceOp::kSum, int root = 0) {
  CallSequence sequence;
  return sequence.next(kind, count, dtype, op, root);
}

// The detail of the kInvalidArgument error `check` throws, or "" if none.
template <typename Check>
std::string refusal(Check check) {
  try {
    check();
  } catch (const CollectiveError& e) {
    EXPECT_EQ(e.kind(), FailureKind::kInvalidArgument) << e.what();
    return e.detail();
  }
  return "";
}

TEST(CallArgumentChecks, SequenceNumbersEachCall) {
  CallSequence sequence;
  EXPECT_EQ(sequence.next(CollectiveKind::kAllGather, 1, ElemType::u8, ReduceOp::kSum, 0).sequence,
            0u);
  const auto second =
      sequence.next(CollectiveKind::kAllReduce, 4, ElemType::fp32, ReduceOp::kMax, 0);
  EXPECT_EQ(second.sequence, 1u);
  EXPECT_EQ(second.op, ReduceOp::kMax);
  EXPECT_EQ(second.count, 4u);
}

TEST(CallArgumentChecks, Fp8IsGatheredButNeverReduced) {
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kAllGather, 16, ElemType::e4m3), 0, 2,
                                   kBase, kBase + 4096);
            }),
            "");
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kAllReduce, 16, ElemType::e5m2), 0, 2,
                                     kBase, kBase + 4096);
              }),
              HasSubstr("FP8 tensors are only gathered or broadcast"));
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kReduceScatter, 16, ElemType::e4m3), 0, 2,
                                     kBase, kBase + 4096);
              }),
              HasSubstr("reduction on e4m3"));
}

TEST(CallArgumentChecks, InPlaceFormsPassAndOtherOverlapsFail) {
  // all_gather: send == recv + rank * count (rank 1 of 4, 16 floats = 64 bytes).
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kAllGather, 16), 1, 4, kBase + 64, kBase);
            }),
            "");
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kAllGather, 16), 1, 4, kBase + 4, kBase);
              }),
              HasSubstr("send == recv + rank * send_count"));
  // reduce_scatter: recv == send + rank * count.
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kReduceScatter, 16), 2, 4, kBase,
                                   kBase + 128);
            }),
            "");
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kReduceScatter, 16), 2, 4, kBase,
                                     kBase + 64);
              }),
              HasSubstr("recv == send + rank * recv_count"));
  // all_reduce: send == recv.
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kAllReduce, 16), 0, 2, kBase, kBase);
            }),
            "");
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kAllReduce, 16), 0, 2, kBase, kBase + 8);
              }),
              HasSubstr("send == recv"));
}

TEST(CallArgumentChecks, RingShiftNeedsDisjointBuffersOfCountElements) {
  // 16 floats = 64 bytes each; recv right after send is disjoint.
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kRingShift, 16), 1, 4, kBase, kBase + 64);
            }),
            "");
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kRingShift, 16), 0, 1, kBase + 64, kBase);
            }),
            "");
  // No in-place form: send == recv is refused like any other overlap.
  for (const BufferAddress recv : {kBase, kBase + 60, kBase - 60}) {
    EXPECT_THAT(refusal([recv] {
                  check_call_arguments(call(CollectiveKind::kRingShift, 16), 1, 4, kBase, recv);
                }),
                HasSubstr("send and recv overlap; ring_shift has no in-place form"))
        << "recv at kBase + " << static_cast<std::int64_t>(recv - kBase);
  }
  EXPECT_THAT(
      refusal([] { check_call_arguments(call(CollectiveKind::kRingShift, 16), 0, 2, kBase, 0); }),
      HasSubstr("recv is null"));
  // Zero elements need no buffers, and overlap nothing.
  EXPECT_EQ(refusal([] { check_call_arguments(call(CollectiveKind::kRingShift, 0), 0, 2, 0, 0); }),
            "");
  EXPECT_EQ(refusal([] {
              check_call_arguments(call(CollectiveKind::kRingShift, 0), 0, 2, kBase, kBase);
            }),
            "");
  // Any dtype: data is moved, never reduced.
  for (const ElemType dtype : {ElemType::e4m3, ElemType::e5m2, ElemType::u8, ElemType::e8m0}) {
    EXPECT_EQ(refusal([dtype] {
                check_call_arguments(call(CollectiveKind::kRingShift, 16, dtype), 0, 2, kBase,
                                     kBase + 16);
              }),
              "")
        << to_string(dtype);
  }
  // Element alignment as for every kind that reads send on every rank.
  EXPECT_THAT(refusal([] {
                check_element_alignment(call(CollectiveKind::kRingShift, 4, ElemType::bf16), 0, 2,
                                        kBase + 1, kBase + 64);
              }),
              HasSubstr("send is not aligned to its 2-byte elements"));
}

TEST(CallArgumentChecks, RingShiftIsDescribedAndComparedLikeTheOtherKinds) {
  EXPECT_EQ(collective_name(CollectiveKind::kRingShift), "ring_shift");
  const CollectiveCall a = call(CollectiveKind::kRingShift, 7, ElemType::e4m3);
  EXPECT_EQ(describe(a), "ring_shift #0 (count=7, dtype=e4m3)");
  EXPECT_TRUE(same_collective(a, call(CollectiveKind::kRingShift, 7, ElemType::e4m3)));
  // op and root are not part of a ring_shift.
  EXPECT_TRUE(
      same_collective(a, call(CollectiveKind::kRingShift, 7, ElemType::e4m3, ReduceOp::kMax, 1)));
  EXPECT_FALSE(same_collective(a, call(CollectiveKind::kRingShift, 8, ElemType::e4m3)));
  EXPECT_FALSE(same_collective(a, call(CollectiveKind::kRingShift, 7, ElemType::e5m2)));
  EXPECT_FALSE(same_collective(a, call(CollectiveKind::kAllGather, 7, ElemType::e4m3)));
  const CollectiveCall calls[] = {a, call(CollectiveKind::kRingShift, 9, ElemType::e4m3)};
  EXPECT_EQ(first_disagreeing_rank(calls), 1);
  EXPECT_THAT(describe_disagreement(calls, 1),
              HasSubstr("rank 1 called ring_shift #0 (count=9, dtype=e4m3) but rank 0 called "
                        "ring_shift #0 (count=7, dtype=e4m3)"));
}

TEST(CallArgumentChecks, NullBuffersAndRootsAreChecked) {
  EXPECT_THAT(
      refusal([] { check_call_arguments(call(CollectiveKind::kAllReduce, 16), 0, 2, 0, kBase); }),
      HasSubstr("send is null"));
  // Zero elements need no buffers.
  EXPECT_EQ(refusal([] { check_call_arguments(call(CollectiveKind::kAllReduce, 0), 0, 2, 0, 0); }),
            "");
  // Broadcast reads send on the root only.
  EXPECT_EQ(refusal([] {
              check_call_arguments(
                  call(CollectiveKind::kBroadcast, 16, ElemType::fp32, ReduceOp::kSum, 1), 0, 2, 0,
                  kBase);
            }),
            "");
  EXPECT_THAT(refusal([] {
                check_call_arguments(
                    call(CollectiveKind::kBroadcast, 16, ElemType::fp32, ReduceOp::kSum, 1), 1, 2,
                    0, kBase);
              }),
              HasSubstr("send (on the root) is null"));
  EXPECT_THAT(refusal([] {
                check_call_arguments(
                    call(CollectiveKind::kBroadcast, 16, ElemType::fp32, ReduceOp::kSum, 2), 0, 2,
                    kBase, kBase + 4096);
              }),
              HasSubstr("root 2 is not a rank"));
}

TEST(CallArgumentChecks, InvalidEnumsAndOverflowingCountsAreRefused) {
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kAllGather, 1, static_cast<ElemType>(99)),
                                     0, 2, kBase, kBase + 64);
              }),
              HasSubstr("invalid dtype"));
  EXPECT_THAT(refusal([] {
                check_call_arguments(call(CollectiveKind::kAllGather, std::size_t{1} << 62), 0, 8,
                                     kBase, kBase + 64);
              }),
              HasSubstr("overflows"));
}

TEST(CallArgumentChecks, BuffersThatWrapPastTheAddressSpaceAreRefused) {
  // 32 bytes below 2^64: 4 floats end below it, 8 would end at 2^64 (0).
  constexpr BufferAddress kTop = ~BufferAddress{0} - 31;
  EXPECT_EQ(
      refusal([] { check_call_arguments(call(CollectiveKind::kAllReduce, 4), 0, 2, kTop, kBase); }),
      "");
  EXPECT_THAT(
      refusal([] { check_call_arguments(call(CollectiveKind::kAllReduce, 8), 0, 2, kTop, kBase); }),
      HasSubstr("send runs past the end of the address space"));
}

TEST(CallArgumentChecks, SingleGpuGroupNeedsElementAlignedBuffers) {
  EXPECT_EQ(refusal([] {
              check_element_alignment(call(CollectiveKind::kAllReduce, 4, ElemType::bf16), 0, 2,
                                      kBase + 2, kBase + 6);
            }),
            "");
  EXPECT_THAT(refusal([] {
                check_element_alignment(call(CollectiveKind::kAllReduce, 4, ElemType::fp32), 0, 2,
                                        kBase + 2, kBase + 8);
              }),
              HasSubstr("send is not aligned to its 4-byte elements"));
  // Bytes align anywhere.
  EXPECT_EQ(refusal([] {
              check_element_alignment(call(CollectiveKind::kAllGather, 3, ElemType::e4m3), 0, 2,
                                      kBase + 1, kBase + 7);
            }),
            "");
}

}  // namespace
}  // namespace fp8c::collectives
