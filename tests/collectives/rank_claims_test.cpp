// RankClaims: how the in-process groups (CPU and single-GPU) hand out each
// rank once, and the words they refuse with.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "collectives/rank_claims.hpp"

namespace fp8c::collectives {
namespace {

// what() of the std::invalid_argument `claim` throws, or "" if none.
std::string refusal(RankClaims& claims, int rank) {
  try {
    claims.claim(rank);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(RankClaims, EachRankIsClaimedOnce) {
  RankClaims claims("LocalDeviceGroup", 2);
  EXPECT_EQ(refusal(claims, 1), "");
  EXPECT_EQ(refusal(claims, 0), "");
  EXPECT_EQ(refusal(claims, 1), "LocalDeviceGroup: rank 1 already has a communicator");
}

TEST(RankClaims, RanksOutsideTheGroupAreRefused) {
  RankClaims claims("InProcessGroup", 4);
  EXPECT_EQ(refusal(claims, 4), "InProcessGroup: rank 4 is out of range for a group of 4");
  EXPECT_EQ(refusal(claims, -1), "InProcessGroup: rank -1 is out of range for a group of 4");
}

}  // namespace
}  // namespace fp8c::collectives
