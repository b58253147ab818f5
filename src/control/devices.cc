// DeviceProfiles: the CPU from cpuid / procfs / the probe loops (control/device_probe.h), GPUs
// from the NVIDIA driver, the reference cluster from datasheets, and their JSON form.
#include "control/devices.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "control/device_probe.h"
#include "http/json_fields.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace strata::control {
namespace {

constexpr std::string_view kPrecisionNames[] = {"fp32", "fp16", "bf16", "int8", "fp8"};

// ---- the CPU ----

std::string ReadFile(const std::string& path, size_t max = 1 << 20) {
  std::ifstream in(path, std::ios::binary);
  std::string text;
  char buf[4096];
  while (in && text.size() < max && (in.read(buf, sizeof(buf)) || in.gcount() > 0))
    text.append(buf, static_cast<size_t>(in.gcount()));
  return text;
}

// The value of the first "key : value" line of /proc-style text, trimmed; "" if absent.
std::string ProcValue(const std::string& text, std::string_view key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(key)) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string k = line.substr(0, colon);
    if (k.find_last_not_of(" \t") + 1 != key.size()) continue;
    const size_t v = line.find_first_not_of(" \t", colon + 1);
    return v == std::string::npos ? "" : line.substr(v);
  }
  return "";
}

// RAM available to this process: MemTotal, capped by a cgroup v2 memory.max.
double MemoryGb() {
  double kb = 0;
  std::istringstream(ProcValue(ReadFile("/proc/meminfo"), "MemTotal")) >> kb;
  double bytes = kb * 1024;
  const std::string limit = ReadFile("/sys/fs/cgroup/memory.max", 64);
  double cg = 0;
  if (!limit.empty() && limit.rfind("max", 0) != 0 && (std::istringstream(limit) >> cg) && cg > 0)
    bytes = bytes > 0 ? std::min(bytes, cg) : cg;
  return bytes / 1e9;
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1U, std::thread::hardware_concurrency());
}

using CpuId = CpuIdentity;

#if defined(__x86_64__)
uint64_t Xcr0() {  // XGETBV(0): only called when cpuid reports OSXSAVE
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuId ReadCpuId() {
  CpuId id;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d) == 0) return id;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4), std::memcpy(vendor + 4, &d, 4), std::memcpy(vendor + 8, &c, 4);
  const std::string v = vendor;
  id.vendor = v == "GenuineIntel" ? "intel" : v == "AuthenticAMD" ? "amd" : v;
  unsigned l1_ecx = 0, l7_ebx = 0, l7_ecx = 0, l7_edx = 0, l71_eax = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) != 0) {
    l1_ecx = c;
    // Display family / model: the extended fields count when the base family is 15 (AMD Zen: 25
    // = Zen 3/4, 26 = Zen 5) or 6 (Intel; the model names the core generation).
    const unsigned base_family = (a >> 8) & 0xF, base_model = (a >> 4) & 0xF;
    id.family =
        static_cast<int>(base_family == 15 ? base_family + ((a >> 20) & 0xFF) : base_family);
    id.model = static_cast<int>(
        base_family == 15 || base_family == 6 ? base_model | (((a >> 16) & 0xF) << 4) : base_model);
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    l7_ebx = b, l7_ecx = c, l7_edx = d;
    __cpuid_count(7, 1, a, b, c, d);
    l71_eax = a;
  }
  const bool osxsave = (l1_ecx >> 27) & 1;
  id.features = X86Features(l1_ecx, l7_ebx, l7_ecx, l7_edx, l71_eax, osxsave ? Xcr0() : 0);
  std::array<unsigned, 12> brand{};
  if (__get_cpuid(0x80000000, &a, &b, &c, &d) != 0 && a >= 0x80000004) {
    for (unsigned i = 0; i < 3; ++i)
      __get_cpuid(0x80000002 + i, &brand[4 * i], &brand[4 * i + 1], &brand[4 * i + 2],
                  &brand[4 * i + 3]);
    char text[49] = {};
    std::memcpy(text, brand.data(), 48);
    id.brand = text;
    id.brand.erase(0, id.brand.find_first_not_of(' '));
  }
  return id;
}
#else
CpuId ReadCpuId() {  // elsewhere: /proc/cpuinfo's flags / Features line
  CpuId id;
  const std::string info = ReadFile("/proc/cpuinfo");
  id.brand = ProcValue(info, "model name");
  std::string flags = ProcValue(info, "Features");
  std::istringstream in(flags);
  for (std::string f; in >> f;) id.features.push_back(f);
  return id;
}
#endif

}  // namespace

CpuIdentity ThisCpu() { return ReadCpuId(); }

namespace {

// x86-64 micro-architecture levels (the psABI's v2/v3/v4) from the features, for `arch`.
std::string X86Level(const DeviceProfile& d) {
  if (d.HasFeature("avx512f") && d.HasFeature("avx512bw") && d.HasFeature("avx512vl"))
    return "x86-64-v4";
  if (d.HasFeature("avx2") && d.HasFeature("fma")) return "x86-64-v3";
  return "x86-64";
}

// ---- GPUs ----

// The reference figures of a GPU whose model name contains a known marker, or nullptr.
struct Datasheet;
const Datasheet* FindDatasheet(std::string_view model);

struct Datasheet {
  std::string_view marker;  // substring of the driver's model name
  DeviceProfile profile;
};

DeviceProfile Profile(std::string name, std::string vendor, std::string arch, std::string model,
                      double mem_gb, int units, std::map<std::string, bool> precision,
                      double bw_gbps, double int8, double bf16, double fp32, std::string source) {
  DeviceProfile d;
  d.name = std::move(name), d.kind = "gpu", d.vendor = std::move(vendor), d.arch = std::move(arch);
  d.model = std::move(model), d.mem_gb = mem_gb, d.sm_count = units;
  d.precision = std::move(precision);
  d.mem_bandwidth_gbps = bw_gbps, d.int8_tops = int8, d.bf16_tflops = bf16, d.fp32_tflops = fp32;
  d.source = std::move(source);
  return d;
}

// Every precision of kPrecisionNames, native (the datacenter parts with fp8 tensor cores).
std::map<std::string, bool> AllNative() {
  std::map<std::string, bool> out;
  for (std::string_view p : kPrecisionNames) out.emplace(p, true);
  return out;
}

// Public datasheet figures (dense, i.e. without the 2:4 sparsity the sheets also quote).
const std::vector<Datasheet>& Datasheets() {
  static const std::vector<Datasheet> kSheets = {
      // NVIDIA H100 Tensor Core GPU datasheet, SXM5 column: 80 GB HBM3, 3.35 TB/s, FP32 67
      // TFLOPS, BF16 1,979 / FP8 3,958 / INT8 3,958 "with sparsity" (dense: half); 132 SMs per
      // the NVIDIA H100 architecture whitepaper.
      {"H100", Profile("h100", "nvidia", "hopper", "NVIDIA H100 SXM5 80GB", 80, 132, AllNative(),
                       3350, 1979, 989, 67, "NVIDIA H100 datasheet (SXM5; dense figures)")},
      // NVIDIA H200 Tensor Core GPU datasheet, SXM column: 141 GB HBM3e, 4.8 TB/s, compute as
      // the H100 SXM (FP32 67, BF16 1,979 / INT8 3,958 with sparsity).
      {"H200", Profile("h200", "nvidia", "hopper", "NVIDIA H200 SXM 141GB", 141, 132, AllNative(),
                       4800, 1979, 989, 67, "NVIDIA H200 datasheet (SXM; dense figures)")},
      // AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 304 compute units, FP32 163.4
      // TFLOPS, BF16 1,307.4 TFLOPS, FP8 / INT8 2,614.9 (dense).
      {"MI300X",
       Profile("mi300x", "amd", "cdna3", "AMD Instinct MI300X", 192, 304, AllNative(), 5300, 2614.9,
               1307.4, 163.4, "AMD Instinct MI300X datasheet (dense figures)")},
      // Huawei Ascend 910B (Atlas 800T A2 class): Huawei publishes no full sheet; the figures
      // are those widely reported: 64 GB HBM2e, 1.6 TB/s, ~313 TFLOPS FP16/BF16, ~626 TOPS
      // INT8, 20 AI cores (910B3). The cube units run fp16/bf16/int8; fp32 goes through the
      // vector units (not native here); no fp8.
      {"910B",
       Profile("ascend-910b", "huawei", "davinci", "Huawei Ascend 910B", 64, 20,
               {{"fp32", false}, {"fp16", true}, {"bf16", true}, {"int8", true}}, 1600, 626, 313, 0,
               "public reports of the Ascend 910B (approximate; no official datasheet)")},
      // NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, FP32 8.1 TFLOPS, FP16 65 TFLOPS, INT8 130
      // TOPS, 40 SMs (Turing TU104). No bf16 tensor cores: bf16 only by conversion; no fp8.
      {"T4", Profile("t4", "nvidia", "turing", "NVIDIA T4 16GB", 16, 40,
                     {{"fp32", true}, {"fp16", true}, {"bf16", false}, {"int8", true}}, 320, 130, 0,
                     8.1, "NVIDIA T4 datasheet")},
  };
  return kSheets;
}

const Datasheet* FindDatasheet(std::string_view model) {
  for (const Datasheet& s : Datasheets()) {
    if (model.find(s.marker) != std::string_view::npos) return &s;
  }
  return nullptr;
}

// A GPU from its driver-reported model name and memory (GB, 0 = unknown).
DeviceProfile GpuFromDriver(int index, const std::string& model, double mem_gb,
                            std::string_view how) {
  DeviceProfile d;
  if (const Datasheet* s = FindDatasheet(model)) {
    d = s->profile;
    d.source = fmt::format("{}; other figures: {}", how, s->profile.source);
  } else {
    d.kind = "gpu";
    d.source = std::string(how) + " (unknown model: rates unknown)";
    d.precision = {{"fp32", true}};
  }
  d.name = fmt::format("gpu{}", index);
  d.model = model;
  if (d.vendor.empty()) d.vendor = "nvidia";
  if (mem_gb > 0) d.mem_gb = mem_gb;
  return d;
}

std::string FindOnPath(std::string_view exe) {
  const char* path = std::getenv("PATH");
  std::istringstream in(path == nullptr ? "" : path);
  for (std::string dir; std::getline(in, dir, ':');) {
    std::string p = (dir.empty() ? std::string(".") : dir) + "/" + std::string(exe);
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

std::string Trim(std::string s) {
  s.erase(0, s.find_first_not_of(" \t\r\n"));
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  return s;
}

// `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits` (MiB), bounded by
// `timeout` when coreutils has it.
std::vector<DeviceProfile> GpusFromNvidiaSmi(const std::string& smi) {
  std::vector<DeviceProfile> out;
  const std::string timeout = FindOnPath("timeout");
  const std::string cmd = (timeout.empty() ? "" : timeout + " 5 ") + "'" + smi +
                          "' --query-gpu=name,memory.total --format=csv,noheader,nounits "
                          "2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  std::string text;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0 && text.size() < (1 << 20))
    text.append(buf, n);
  ::pclose(p);
  return GpusFromNvidiaSmiCsv(text);
}

std::vector<DeviceProfile> GpusFromProcfs() {
  std::vector<DeviceProfile> out;
  std::error_code ec;
  std::vector<std::filesystem::path> dirs;
  for (const auto& e : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec))
    dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    const std::string model = ProcValue(ReadFile((dir / "information").string()), "Model");
    if (!model.empty())
      out.push_back(GpuFromDriver(static_cast<int>(out.size()), model, 0,
                                  "/proc/driver/nvidia (memory from the datasheet)"));
  }
  return out;
}

}  // namespace

std::vector<DeviceProfile> GpusFromNvidiaSmiCsv(const std::string& csv) {
  std::vector<DeviceProfile> out;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) {
    const size_t comma = line.rfind(',');
    if (comma == std::string::npos) continue;
    double mib = 0;
    std::istringstream(line.substr(comma + 1)) >> mib;
    const std::string model = Trim(line.substr(0, comma));
    if (model.empty()) continue;
    out.push_back(
        GpuFromDriver(static_cast<int>(out.size()), model, mib * 1048576 / 1e9, "nvidia-smi"));
  }
  return out;
}

bool DeviceProfile::Native(std::string_view p) const {
  auto it = precision.find(std::string(p));
  return it != precision.end() && it->second;
}

bool DeviceProfile::HasFeature(std::string_view f) const {
  return std::find(features.begin(), features.end(), f) != features.end();
}

std::vector<std::string> X86Features(uint32_t l1_ecx, uint32_t l7_ebx, uint32_t l7_ecx,
                                     uint32_t l7_edx, uint32_t l71_eax, uint64_t xcr0) {
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM + YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask + ZMM state
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG + XTILEDATA
  struct Bit {
    const char* name;
    uint32_t reg;
    int bit;
    bool usable;
  };
  const Bit bits[] = {
      {"sse4_2", l1_ecx, 20, true},
      {"avx", l1_ecx, 28, os_avx},
      {"fma", l1_ecx, 12, os_avx},
      {"f16c", l1_ecx, 29, os_avx},
      {"avx2", l7_ebx, 5, os_avx},
      {"avx512f", l7_ebx, 16, os_avx512},
      {"avx512bw", l7_ebx, 30, os_avx512},
      {"avx512vl", l7_ebx, 31, os_avx512},
      {"avx512_vnni", l7_ecx, 11, os_avx512},
      {"avx512_fp16", l7_edx, 23, os_avx512},
      {"avx_vnni", l71_eax, 4, os_avx},
      {"avx512_bf16", l71_eax, 5, os_avx512},
      {"amx_bf16", l7_edx, 22, os_amx},
      {"amx_tile", l7_edx, 24, os_amx},
      {"amx_int8", l7_edx, 25, os_amx},
  };
  std::vector<std::string> out;
  for (const Bit& b : bits) {
    if (b.usable && ((b.reg >> b.bit) & 1U) != 0) out.emplace_back(b.name);
  }
  return out;
}

std::map<std::string, bool> CpuPrecisions(const std::vector<std::string>& f) {
  auto has = [&](std::string_view n) { return std::find(f.begin(), f.end(), n) != f.end(); };
  return {{"fp32", true},
          {"fp16", has("avx512_fp16")},
          {"bf16", has("avx512_bf16") || has("amx_bf16")},
          {"int8", has("avx512_vnni") || has("avx_vnni") || has("amx_int8")}};
}

DeviceProfile ProbeCpu() {
  DeviceProfile d;
  d.name = "cpu0";
  d.kind = "cpu";
  CpuId id = ReadCpuId();
  d.vendor = id.vendor;
  d.model = id.brand;
  d.features = std::move(id.features);
#if defined(__x86_64__)
  d.arch = X86Level(d);
#elif defined(__aarch64__)
  d.arch = "aarch64";
  if (d.vendor.empty()) d.vendor = "arm";
#endif
  d.mem_gb = MemoryGb();
  d.sm_count = UsableCores();
  d.precision = CpuPrecisions(d.features);
  // A buffer past the caches of most CPUs (not the aggregate L3 of the largest server parts,
  // where the figure reads high), at most 1/8 of the memory.
  const size_t bytes = static_cast<size_t>(std::min(128e6, std::max(16e6, d.mem_gb * 1e9 / 8)));
  const probe::Rate bw = probe::MemoryBandwidthGbps(d.sm_count, bytes);
  const probe::Rate fp32 = probe::Fp32Tflops(d.sm_count, d.features);
  const probe::Rate int8 = probe::Int8Tops(d.sm_count, d.features);
  const probe::Rate bf16 = probe::Bf16Tflops(d.sm_count, d.features);
  d.mem_bandwidth_gbps = bw.value, d.fp32_tflops = fp32.value;
  d.int8_tops = int8.value, d.bf16_tflops = bf16.value;
  d.source = fmt::format("measured on {} threads: bandwidth {}, fp32 {}, int8 {}, bf16 {}",
                         d.sm_count, bw.how, fp32.how, int8.how, bf16.how);
  return d;
}

std::vector<DeviceProfile> ProbeGpus() {
  const std::string smi = FindOnPath("nvidia-smi");
  if (!smi.empty()) {
    auto gpus = GpusFromNvidiaSmi(smi);
    if (!gpus.empty()) return gpus;
  }
  return GpusFromProcfs();
}

std::vector<DeviceProfile> ProbeDevices() {
  std::vector<DeviceProfile> v = {ProbeCpu()};
  for (DeviceProfile& g : ProbeGpus()) v.push_back(std::move(g));
  return v;
}

std::vector<DeviceProfile> ReferenceProfiles() {
  std::vector<DeviceProfile> v;
  for (std::string_view m : {"H100", "MI300X", "910B", "T4"})
    v.push_back(FindDatasheet(m)->profile);
  return v;
}

Result<DeviceProfile> ReferenceProfile(std::string_view name, std::string_view as) {
  for (DeviceProfile& d : ReferenceProfiles()) {
    if (d.name != name) continue;
    if (!as.empty()) d.name = std::string(as);
    return d;
  }
  return Status::NotFound(fmt::format("no reference device profile '{}'", name));
}

// ---- JSON ----

nlohmann::json ToJson(const DeviceProfile& d) {
  return {{"name", d.name},
          {"kind", d.kind},
          {"vendor", d.vendor},
          {"arch", d.arch},
          {"model", d.model},
          {"mem_gb", d.mem_gb},
          {"sm_count", d.sm_count},
          {"precision", d.precision},
          {"mem_bandwidth_gbps", d.mem_bandwidth_gbps},
          {"int8_tops", d.int8_tops},
          {"bf16_tflops", d.bf16_tflops},
          {"fp32_tflops", d.fp32_tflops},
          {"features", d.features},
          {"source", d.source}};
}

nlohmann::json ToJson(const std::vector<DeviceProfile>& ds) {
  nlohmann::json a = nlohmann::json::array();
  for (const DeviceProfile& d : ds) a.push_back(ToJson(d));
  return a;
}

namespace {

Status ReadPrecision(const http::Fields& f, DeviceProfile* d) {
  const nlohmann::json* p = nullptr;
  if (auto e = f.Object("precision", &p); !e.ok()) return e.status();
  if (p == nullptr) return Status::Ok();
  const http::Fields pf(*p, f.Param("precision") + ".");
  for (const auto& [key, value] : p->items()) {
    if (std::find(std::begin(kPrecisionNames), std::end(kPrecisionNames), key) ==
        std::end(kPrecisionNames))
      return Status::InvalidArgument(pf.Param(key) + ": not one of fp32 fp16 bf16 int8 fp8");
    bool native = false;
    if (auto e = pf.Bool(key, &native); !e.ok()) return e.status();
    d->precision[key] = native;
  }
  return Status::Ok();
}

Status ReadFeatures(const http::Fields& f, DeviceProfile* d) {
  const nlohmann::json* a = nullptr;
  if (auto e = f.Array("features", &a); !e.ok()) return e.status();
  if (a == nullptr) return Status::Ok();
  for (size_t i = 0; i < a->size(); ++i) {
    auto s = http::AsString((*a)[i], fmt::format("{}[{}]", f.Param("features"), i));
    if (!s.ok()) return s.error().status();
    d->features.push_back(*s);
  }
  return Status::Ok();
}

Result<DeviceProfile> DeviceAt(const nlohmann::json& j, const std::string& prefix) {
  const http::Fields f(j, prefix);
  if (!f.IsObject()) return Status::InvalidArgument(prefix + ": expected an object");
  DeviceProfile d;
  const http::Range nonneg{0, 1e9};
  for (const http::ApiError& e :
       {f.Required("name"), f.String("name", &d.name), f.Required("kind"),
        f.Enum("kind", std::array<std::string_view, 2>{"cpu", "gpu"}, &d.kind),
        f.String("vendor", &d.vendor), f.String("arch", &d.arch), f.String("model", &d.model),
        f.Double("mem_gb", nonneg, &d.mem_gb), f.Int("sm_count", 0, 1 << 24, &d.sm_count),
        f.Double("mem_bandwidth_gbps", nonneg, &d.mem_bandwidth_gbps),
        f.Double("int8_tops", nonneg, &d.int8_tops),
        f.Double("bf16_tflops", nonneg, &d.bf16_tflops),
        f.Double("fp32_tflops", nonneg, &d.fp32_tflops), f.String("source", &d.source)}) {
    if (!e.ok()) return e.status();
  }
  if (d.name.empty()) return Status::InvalidArgument(f.Param("name") + ": must not be empty");
  RETURN_IF_ERROR(ReadPrecision(f, &d));
  RETURN_IF_ERROR(ReadFeatures(f, &d));
  return d;
}

}  // namespace

Result<DeviceProfile> DeviceFromJson(const nlohmann::json& j) { return DeviceAt(j, ""); }

Result<std::vector<DeviceProfile>> DevicesFromJson(const nlohmann::json& j) {
  if (!j.is_array()) return Status::InvalidArgument("devices: expected a JSON array");
  std::vector<DeviceProfile> v;
  v.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    ASSIGN_OR_RETURN(DeviceProfile d, DeviceAt(j[i], fmt::format("[{}].", i)));
    v.push_back(std::move(d));
  }
  return v;
}

std::string DevicesTable(const std::vector<DeviceProfile>& ds) {
  std::string out =
      fmt::format("{:<8} {:<4} {:<7} {:<10} {:>8} {:>6} {:>9} {:>9} {:>9} {:>9}  {}\n", "NAME",
                  "KIND", "VENDOR", "ARCH", "MEM_GB", "UNITS", "BW_GB/S", "INT8_TOPS", "BF16_TF",
                  "FP32_TF", "PRECISIONS (* = native)");
  for (const DeviceProfile& d : ds) {
    std::string precisions;
    for (const auto& [p, native] : d.precision) precisions += p + (native ? "* " : " ");
    out += fmt::format(
        "{:<8} {:<4} {:<7} {:<10} {:>8.1f} {:>6} {:>9.1f} {:>9.2f} {:>9.2f} {:>9.2f}  {}\n", d.name,
        d.kind, d.vendor, d.arch, d.mem_gb, d.sm_count, d.mem_bandwidth_gbps, d.int8_tops,
        d.bf16_tflops, d.fp32_tflops, precisions);
    if (!d.model.empty()) out += "         model:    " + d.model + "\n";
    if (!d.features.empty()) {
      std::string f;
      for (const std::string& x : d.features) f += (f.empty() ? "" : " ") + x;
      out += "         features: " + f + "\n";
    }
    out += "         source:   " + d.source + "\n";
  }
  return out;
}

}  // namespace strata::control
