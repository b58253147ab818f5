// Authentication helpers shared by the server and the gateway.
//
// Thread contract: pure functions.
// Errors: none (a mismatch is `false`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace strata::http {

// Constant-time string equality (time depends only on the lengths).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// Whether an `Authorization` header value is "Bearer <k>" for one of `keys` (every key is compared,
// in constant time). An empty key list accepts everything.
bool BearerKeyAccepted(std::string_view authorization, const std::vector<std::string>& keys);

}  // namespace strata::http
