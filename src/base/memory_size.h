// Memory sizes as people write them ("4GiB", "500MB", "0.25" of RAM) and the machine's RAM.
//
// Owns nothing; pure functions, thread-safe. Errors: kInvalidArgument naming the input.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"

namespace strata {

// Physical RAM of this machine in bytes (sysconf); 0 if unknown.
uint64_t PhysicalMemoryBytes();

// Parses a memory size (--kv-cache-memory, config files):
//   "4GiB", "512MiB", "64KiB", "1TiB", "1.5GiB"  binary units; "K", "M", "G", "T" alone are binary
//   too "4GB", "500MB", "64KB", "1TB"                 decimal units "1048576B" bytes "0.5", "1",
//   "50%"                             a fraction of physical RAM (a bare number in (0, 1],
//                                                 or a percentage in (0, 100])
// Units are case-insensitive; spaces between number and unit are allowed. Zero, negative,
// non-finite, unit-less numbers above 1 and values >= 2^63 are refused with kInvalidArgument
// naming the input.
Result<uint64_t> ParseMemorySize(std::string_view text);
// Same, with an explicit physical memory size for fractions (for tests).
Result<uint64_t> ParseMemorySize(std::string_view text, uint64_t physical_bytes);

// The shortest exact spelling ParseMemorySize reads back to `bytes`: "2GiB", "1536MiB", "1000B"
// (the largest binary unit that divides it; bytes otherwise). 0 is "0B" (which does not parse).
std::string FormatMemorySize(uint64_t bytes);

}  // namespace strata
