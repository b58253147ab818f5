// control/devices: what a machine offers to the placement of pools — DeviceProfiles in the
// reference architecture's fields (SEED-NOTES §2.1: vendor, arch, mem_gb, sm_count, precision),
// plus measured figures (memory bandwidth, int8 / bf16 / fp32 rates) and the CPU's ISA features.
//
// ProbeCpu() measures this machine's CPU: cpuid (x86; /proc/cpuinfo elsewhere) for vendor, model
// and features, /proc/meminfo and the cgroup limit for memory, the affinity mask for cores, and a
// short probe (< 1 s in all) of memory bandwidth (a multi-threaded read of a buffer larger than
// the caches) and of the arithmetic rates (register-only loops of fused multiply-adds, int8 dot
// products and bf16 dot products in the widest ISA the CPU and OS support). ProbeGpus() reports
// accelerators when a driver does (`nvidia-smi`, else /proc/driver/nvidia/gpus/*/information);
// none otherwise. Figures a driver does not report are taken from the matching reference
// profile when the model is known (then `source` says so), else left 0.
// ReferenceProfiles() are the reference's mixed cluster from public datasheets (for placement
// simulation), each with its source.
//
// precision: a precision present in the map is supported; its value says whether the device runs
// it natively (true) or through conversion (false). Absent = not supported.
// Thread contract: plain values; the probes may be called from any thread (they start their own
// short-lived threads and allocate a temporary buffer).
// Errors: probes never fail (what cannot be read is 0 / absent); FromJson errors are
// InvalidArgument naming the field.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace strata::control {

struct DeviceProfile {
  std::string name;    // unique in an inventory: "cpu0", "gpu0", "h100-0"
  std::string kind;    // "cpu" | "gpu" (any accelerator: GPU, NPU)
  std::string vendor;  // "intel" "amd" "nvidia" "huawei" "arm" ...
  std::string arch;    // "hopper" "cdna3" "davinci" / CPUs: "x86-64-v4" "x86-64-v3" "aarch64" ...
  std::string model;   // marketing name: "NVIDIA H100 SXM5 80GB", the CPU's brand string
  double mem_gb = 0;   // memory the device offers (CPU: RAM available to this process)
  int sm_count = 0;    // compute units: SMs / CUs / AI cores / CPU cores (logical, usable)
  std::map<std::string, bool> precision;                   // fp32 fp16 bf16 int8 fp8 -> native?
  double mem_bandwidth_gbps = 0;                           // GB/s (1e9 bytes)
  double int8_tops = 0, bf16_tflops = 0, fp32_tflops = 0;  // dense peak (datasheet) or measured
  std::vector<std::string> features;  // CPU ISA: avx2 fma f16c avx512f avx512_vnni avx512_bf16 ...
  std::string source;                 // "measured", or the datasheet the figures come from

  bool Supports(std::string_view p) const { return precision.contains(std::string(p)); }
  bool Native(std::string_view p) const;
  bool HasFeature(std::string_view f) const;
};

// This machine's CPU as one device named "cpu0" (figures measured; < 1 s).
DeviceProfile ProbeCpu();
// This CPU's identity from cpuid alone (no timing): vendor ("intel", "amd"), brand string, display
// family and model (x86; 0 elsewhere), and the usable ISA features (as DeviceProfile::features).
struct CpuIdentity {
  std::string vendor, brand;
  int family = 0, model = 0;
  std::vector<std::string> features;
};
CpuIdentity ThisCpu();
// Accelerators a driver reports ("gpu0", "gpu1", ...); empty when none.
std::vector<DeviceProfile> ProbeGpus();
// ProbeCpu() followed by ProbeGpus().
std::vector<DeviceProfile> ProbeDevices();

// The reference architecture's mixed cluster from public datasheets, one profile each:
// "h100" (NVIDIA H100 SXM5 80GB), "mi300x" (AMD Instinct MI300X), "ascend-910b" (Huawei Ascend
// 910B), and the SLA table's Bronze device "t4" (NVIDIA T4, no bf16).
std::vector<DeviceProfile> ReferenceProfiles();
// One of ReferenceProfiles() by name, renamed `as` ("" keeps the name); NotFound otherwise.
Result<DeviceProfile> ReferenceProfile(std::string_view name, std::string_view as = "");

// The CPU's ISA features from cpuid registers (exposed for tests): leaf 1 ECX, leaf 7.0 EBX/ECX/
// EDX, leaf 7.1 EAX and XCR0 (which register states the OS saves; without them AVX / AVX-512 /
// AMX are not usable and are left out).
std::vector<std::string> X86Features(uint32_t l1_ecx, uint32_t l7_ebx, uint32_t l7_ecx,
                                     uint32_t l7_edx, uint32_t l71_eax, uint64_t xcr0);
// The precision map of a CPU with these features: fp32 native; bf16 native with avx512_bf16 or
// amx_bf16; int8 native with avx512_vnni, avx_vnni or amx_int8; fp16 native with avx512_fp16;
// the others supported by conversion; fp8 not supported.
std::map<std::string, bool> CpuPrecisions(const std::vector<std::string>& features);

// GPUs from `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` output
// (exposed for tests): a known model takes the datasheet's rates, memory is the driver's.
std::vector<DeviceProfile> GpusFromNvidiaSmiCsv(const std::string& csv);

nlohmann::json ToJson(const DeviceProfile& d);
nlohmann::json ToJson(const std::vector<DeviceProfile>& ds);
Result<DeviceProfile> DeviceFromJson(const nlohmann::json& j);
Result<std::vector<DeviceProfile>> DevicesFromJson(const nlohmann::json& j);  // a JSON array
// A human-readable table (for `strata devices` without --json).
std::string DevicesTable(const std::vector<DeviceProfile>& ds);

}  // namespace strata::control
