// control/device_probe: the short measurements behind ProbeCpu (control/devices.h) — memory read
// bandwidth and the arithmetic rates of the CPU's vector units, each run on `threads` threads at
// once for a few tens of milliseconds. The loops are compiled for each ISA level with function
// target attributes and chosen by the features the caller passes (cpuid + XCR0), so the probe
// measures the widest unit the CPU and the OS support. AMX tiles are not measured (they need a
// per-process permission request); the rates are those of the vector units.
//
// Used by src/control (ProbeCpu) and by `strata bench memory` / `bench model` (the roofline).
// Thread contract: each call starts and joins its own threads.
#pragma once

#include <string>
#include <vector>

namespace strata::control::probe {

struct Rate {
  double value = 0;  // GB/s, TFLOPS or TOPS
  std::string how;   // the loop measured: "avx512f fma", "avx2 maddubs", ...
};

// Bytes read per second from a buffer of `bytes` (larger than the caches), best of a few passes.
Rate MemoryBandwidthGbps(int threads, size_t bytes);
// Dense multiply-add rates (2 operations per multiply-add).
Rate Fp32Tflops(int threads, const std::vector<std::string>& features);
Rate Int8Tops(int threads, const std::vector<std::string>& features);
// Native (avx512_bf16 dot products) or through conversion to fp32 (avx2 + fma); 0 without both.
Rate Bf16Tflops(int threads, const std::vector<std::string>& features);

}  // namespace strata::control::probe
