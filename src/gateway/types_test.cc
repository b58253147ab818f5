#include "gateway/types.h"

#include <gtest/gtest.h>

namespace strata::gateway {
namespace {

// The priority and tier names are protocol's (protocol/wire_test.cc).
TEST(GatewayTypes, RouteReasonNames) {
  EXPECT_EQ(RouteReasonName(RouteReason::kAffinity), "affinity");
  EXPECT_EQ(RouteReasonName(RouteReason::kRetry), "retry");
}

}  // namespace
}  // namespace strata::gateway
