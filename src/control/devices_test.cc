// control/devices: cpuid bits map to features only when the OS saves the registers; the CPU
// precision map follows the features; the probe is short and reports plausible figures; the
// reference profiles carry their datasheet figures; JSON round-trips and bad JSON names the field.
#include "control/devices.h"

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace strata::control {
namespace {

bool Has(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST(Devices, X86FeaturesNeedTheOsState) {
  const uint32_t l1_ecx = (1U << 28) | (1U << 12) | (1U << 29) | (1U << 20);  // avx fma f16c sse4.2
  const uint32_t l7_ebx = (1U << 5) | (1U << 16) | (1U << 30) | (1U << 31);   // avx2 avx512 f/bw/vl
  const uint32_t l7_ecx = 1U << 11;                                           // avx512_vnni
  const uint32_t l7_edx = (1U << 22) | (1U << 24) | (1U << 25);               // amx bf16/tile/int8
  const uint32_t l71_eax = (1U << 5) | (1U << 4);  // avx512_bf16 avx_vnni
  const uint64_t all = 0x6 | 0xe0 | 0x60000;
  auto f = X86Features(l1_ecx, l7_ebx, l7_ecx, l7_edx, l71_eax, all);
  for (const char* x :
       {"sse4_2", "avx", "fma", "f16c", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
        "avx512_bf16", "avx_vnni", "amx_bf16", "amx_tile", "amx_int8"})
    EXPECT_TRUE(Has(f, x)) << x;
  EXPECT_FALSE(Has(f, "avx512_fp16"));
  // The OS saves YMM but not ZMM / tiles: no AVX-512, no AMX.
  f = X86Features(l1_ecx, l7_ebx, l7_ecx, l7_edx, l71_eax, 0x6);
  EXPECT_TRUE(Has(f, "avx2"));
  EXPECT_TRUE(Has(f, "avx_vnni"));
  EXPECT_FALSE(Has(f, "avx512f"));
  EXPECT_FALSE(Has(f, "avx512_bf16"));
  EXPECT_FALSE(Has(f, "amx_bf16"));
  // No OS support at all: no AVX.
  f = X86Features(l1_ecx, l7_ebx, l7_ecx, l7_edx, l71_eax, 0);
  EXPECT_FALSE(Has(f, "avx"));
  EXPECT_FALSE(Has(f, "avx2"));
  EXPECT_TRUE(Has(f, "sse4_2"));
}

TEST(Devices, CpuPrecisionsFollowTheFeatures) {
  auto p = CpuPrecisions({"avx2", "fma"});
  EXPECT_TRUE(p.at("fp32"));
  EXPECT_FALSE(p.at("bf16"));  // supported by conversion
  EXPECT_FALSE(p.at("int8"));
  EXPECT_FALSE(p.at("fp16"));
  EXPECT_FALSE(p.contains("fp8"));
  p = CpuPrecisions({"avx512f", "avx512_vnni", "avx512_bf16"});
  EXPECT_TRUE(p.at("bf16"));
  EXPECT_TRUE(p.at("int8"));
  p = CpuPrecisions({"amx_bf16", "amx_int8"});
  EXPECT_TRUE(p.at("bf16"));
  EXPECT_TRUE(p.at("int8"));
}

TEST(Devices, ProbeCpuIsShortAndPlausible) {
  const auto start = std::chrono::steady_clock::now();
  const DeviceProfile d = ProbeCpu();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 1.0) << "the probe took " << s << " s";
  EXPECT_EQ(d.name, "cpu0");
  EXPECT_EQ(d.kind, "cpu");
  EXPECT_GT(d.mem_gb, 0.1);
  EXPECT_GE(d.sm_count, 1);
  EXPECT_TRUE(d.Native("fp32"));
  // Bandwidth between 0.5 GB/s and 10 TB/s, rates between 1 GFLOPS and 1 PFLOPS.
  EXPECT_GT(d.mem_bandwidth_gbps, 0.5);
  EXPECT_LT(d.mem_bandwidth_gbps, 10000);
  EXPECT_GT(d.fp32_tflops, 0.001);
  EXPECT_LT(d.fp32_tflops, 1000);
#if defined(__x86_64__)
  if (d.HasFeature("avx2")) {
    EXPECT_GT(d.int8_tops, 0.001);
    EXPECT_GT(d.bf16_tflops, 0.001);
    EXPECT_EQ(d.arch.rfind("x86-64-v", 0), 0u) << d.arch;
  }
  EXPECT_FALSE(d.vendor.empty());
#endif
  EXPECT_NE(d.source.find("measured"), std::string::npos);
}

TEST(Devices, ReferenceProfilesCarryTheirDatasheets) {
  const auto refs = ReferenceProfiles();
  ASSERT_EQ(refs.size(), 4u);
  auto h100 = ReferenceProfile("h100");
  auto mi300x = ReferenceProfile("mi300x");
  auto ascend = ReferenceProfile("ascend-910b", "npu-7");
  ASSERT_TRUE(h100.ok() && mi300x.ok() && ascend.ok());
  EXPECT_EQ(ascend->name, "npu-7");
  EXPECT_EQ(h100->vendor, "nvidia");
  EXPECT_EQ(h100->arch, "hopper");
  EXPECT_DOUBLE_EQ(h100->mem_gb, 80);
  EXPECT_EQ(h100->sm_count, 132);
  EXPECT_DOUBLE_EQ(h100->mem_bandwidth_gbps, 3350);
  EXPECT_TRUE(h100->Native("bf16"));
  EXPECT_TRUE(h100->Native("fp8"));
  EXPECT_EQ(mi300x->vendor, "amd");
  EXPECT_DOUBLE_EQ(mi300x->mem_gb, 192);
  EXPECT_EQ(mi300x->sm_count, 304);
  EXPECT_GT(mi300x->mem_bandwidth_gbps, h100->mem_bandwidth_gbps);
  EXPECT_EQ(ascend->vendor, "huawei");
  EXPECT_FALSE(ascend->Supports("fp8"));
  EXPECT_FALSE(ReferenceProfile("t4")->Native("bf16"));
  EXPECT_TRUE(ReferenceProfile("t4")->Supports("bf16"));
  EXPECT_EQ(ReferenceProfile("a100").status().code(), StatusCode::kNotFound);
  for (const DeviceProfile& d : refs) {
    EXPECT_EQ(d.kind, "gpu") << d.name;
    EXPECT_FALSE(d.source.empty()) << d.name;
    EXPECT_GT(d.int8_tops, 0) << d.name;
  }
}

TEST(Devices, GpusFromTheDriver) {
  const auto gpus = GpusFromNvidiaSmiCsv(
      "NVIDIA H200, 143771\nNVIDIA H100 80GB HBM3, 81559\nSome Future GPU, 1024\n\ngarbage\n");
  ASSERT_EQ(gpus.size(), 3u);
  EXPECT_EQ(gpus[0].name, "gpu0");
  EXPECT_EQ(gpus[0].kind, "gpu");
  EXPECT_EQ(gpus[0].model, "NVIDIA H200");
  EXPECT_NEAR(gpus[0].mem_gb, 143771 * 1048576.0 / 1e9, 1e-6);  // the driver's memory
  EXPECT_DOUBLE_EQ(gpus[0].mem_bandwidth_gbps, 4800);           // the datasheet's rates
  EXPECT_TRUE(gpus[0].Native("bf16"));
  EXPECT_NE(gpus[0].source.find("nvidia-smi"), std::string::npos);
  EXPECT_EQ(gpus[1].name, "gpu1");
  EXPECT_EQ(gpus[1].arch, "hopper");
  EXPECT_DOUBLE_EQ(gpus[1].mem_bandwidth_gbps, 3350);
  EXPECT_EQ(gpus[2].model, "Some Future GPU");
  EXPECT_DOUBLE_EQ(gpus[2].mem_bandwidth_gbps, 0);  // unknown: rates unknown
  EXPECT_NE(gpus[2].source.find("unknown model"), std::string::npos);
  EXPECT_TRUE(GpusFromNvidiaSmiCsv("").empty());
}

TEST(Devices, JsonRoundTrips) {
  std::vector<DeviceProfile> v = ReferenceProfiles();
  v.push_back(ProbeCpu());
  const nlohmann::json j = ToJson(v);
  ASSERT_TRUE(j.is_array());
  EXPECT_EQ(j[0]["sm_count"], 132);
  EXPECT_EQ(j[0]["precision"]["bf16"], true);
  auto back = DevicesFromJson(nlohmann::json::parse(j.dump()));
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), v.size());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(ToJson((*back)[i]), ToJson(v[i])) << i;
  EXPECT_FALSE(DevicesTable(v).empty());
}

TEST(Devices, BadJsonNamesTheField) {
  auto err = [](const char* text) {
    auto r = DevicesFromJson(nlohmann::json::parse(text));
    return r.ok() ? std::string("(ok)") : r.status().message();
  };
  EXPECT_NE(err(R"({"name": "x"})").find("expected a JSON array"), std::string::npos);
  EXPECT_NE(err(R"([{"kind": "gpu"}])").find("[0].name"), std::string::npos);
  EXPECT_NE(err(R"([{"name": "a", "kind": "tpu"}])").find("[0].kind"), std::string::npos);
  EXPECT_NE(err(R"([{"name": "a", "kind": "gpu", "mem_gb": "80"}])").find("[0].mem_gb"),
            std::string::npos);
  EXPECT_NE(err(R"([{"name": "a", "kind": "gpu", "mem_gb": -1}])").find("[0].mem_gb"),
            std::string::npos);
  EXPECT_NE(err(R"([{"name": "a", "kind": "gpu", "precision": {"int4": true}}])")
                .find("[0].precision.int4"),
            std::string::npos);
  EXPECT_NE(
      err(R"([{"name": "a", "kind": "gpu", "precision": {"bf16": 1}}])").find("[0].precision.bf16"),
      std::string::npos);
  EXPECT_NE(
      err(R"([{"name": "a", "kind": "cpu", "features": ["avx2", 3]}])").find("[0].features[1]"),
      std::string::npos);
  EXPECT_EQ(err(R"([{"name": "a", "kind": "cpu"}])"), "(ok)");
}

}  // namespace
}  // namespace strata::control
