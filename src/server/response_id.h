// Response identity: random ids ("cmpl-<32 hex>", "chatcmpl-<32 hex>") and the creation time of a
// response, as OpenAI clients read them.
//
// Ids are 128 bits from OpenSSL's CSPRNG (RAND_bytes; std::random_device if it fails), so they are
// unique across processes, restarts and replicas without coordination (no counter).
// Thread contract: both functions are thread-safe. Errors: none.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace strata::server {

// "<prefix>-" followed by 32 lowercase hex digits.
std::string NewResponseId(std::string_view prefix);

// Seconds since the Unix epoch, now (a response's `created`).
int64_t UnixSecondsNow();

}  // namespace strata::server
