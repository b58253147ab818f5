#include "gateway/types.h"

#include <array>

namespace strata::gateway {
namespace {
constexpr std::array<std::string_view, 4> kReasonNames = {"affinity", "load", "fallback", "retry"};
}  // namespace

std::string_view RouteReasonName(RouteReason r) { return kReasonNames[static_cast<size_t>(r)]; }

}  // namespace strata::gateway
