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
