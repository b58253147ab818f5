// Unpredictable bytes for ids that must not collide across processes, restarts and replicas
// without coordination (response ids, the KV event log's instance id): OpenSSL's CSPRNG
// (RAND_bytes), or std::random_device (/dev/urandom on Linux) if that fails.
// Thread contract: thread-safe. Errors: none (the fallback always yields bytes).
#pragma once

#include <span>
#include <string>

namespace strata {

// Fills `out` with random bytes.
void FillRandomBytes(std::span<unsigned char> out);

// `bytes` as lower-case hex, two digits a byte, appended to `*out`.
void AppendHexLower(std::span<const unsigned char> bytes, std::string* out);

}  // namespace strata
