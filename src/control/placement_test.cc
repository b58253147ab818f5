// control/placement: simulation over the reference mixed cluster (H100 / MI300X / Ascend 910B /
// T4 datasheet profiles): native precision first, bandwidth for decode-heavy pools, compute for
// prefill-heavy ones, memory limits respected, the most constrained pool first, impossible pools
// named with their unmet need, and a reason for every choice.
#include "control/placement.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>

namespace strata::control {
namespace {

DeviceProfile Ref(std::string_view name, std::string_view as) {
  auto d = ReferenceProfile(name, as);
  EXPECT_TRUE(d.ok()) << d.status().message();
  return d.ok() ? *d : DeviceProfile{};
}

// The reference architecture's mixed cluster: 2 x H100, 1 x MI300X, 2 x Ascend 910B.
std::vector<DeviceProfile> MixedCluster() {
  return {Ref("h100", "h100-0"), Ref("h100", "h100-1"), Ref("mi300x", "mi300x-0"),
          Ref("ascend-910b", "ascend-0"), Ref("ascend-910b", "ascend-1")};
}

PoolSpec Pool(std::string name, std::vector<std::string> precisions, Workload w, double mem_gb,
              int gpus, int max_replicas) {
  PoolSpec p;
  p.name = std::move(name);
  p.model = "m";
  p.version = "v1";
  p.devices.precisions = std::move(precisions);
  p.devices.memory_gb = mem_gb;
  p.devices.gpus = gpus;
  p.workload = w;
  p.replicas = {0, max_replicas};
  return p;
}

DeploymentSpec Spec(std::vector<PoolSpec> pools) {
  DeploymentSpec s;
  s.name = "sim";
  s.models = {{"m", {{"v1", "m.gguf"}}}};
  s.pools = std::move(pools);
  return s;
}

std::vector<std::string> DevicesOf(const Placement& p, std::string_view pool) {
  std::vector<std::string> out;
  const PoolPlacement* pp = p.Find(pool);
  EXPECT_NE(pp, nullptr) << pool;
  if (pp == nullptr) return out;
  for (const ReplicaPlacement& r : pp->replicas)
    out.insert(out.end(), r.devices.begin(), r.devices.end());
  return out;
}

std::string ErrorOf(const DeploymentSpec& s, const std::vector<DeviceProfile>& d) {
  auto r = Place(s, d);
  return r.ok() ? std::string("(ok)") : r.status().message();
}

TEST(Placement, DecodeHeavyGoesToTheHighestBandwidth) {
  auto r = Place(Spec({Pool("chat", {"fp16"}, Workload::kDecodeHeavy, 40, 1, 3)}), MixedCluster());
  ASSERT_TRUE(r.ok()) << r.status().message();
  // MI300X (5.3 TB/s), then the H100s (3.35 TB/s); never a 910B (1.6 TB/s) while they have room.
  EXPECT_EQ(DevicesOf(*r, "chat"), (std::vector<std::string>{"mi300x-0", "h100-0", "h100-1"}));
  const std::string& why = r->pools[0].replicas[0].reason;
  EXPECT_NE(why.find("decode_heavy prefers memory bandwidth: 5300 GB/s"), std::string::npos) << why;
  EXPECT_NE(why.find("next: h100-0 3350 GB/s"), std::string::npos) << why;
  EXPECT_NE(why.find("runs fp16 natively"), std::string::npos) << why;
}

TEST(Placement, PrefillHeavyGoesToTheMostCompute) {
  auto r =
      Place(Spec({Pool("batch", {"int8"}, Workload::kPrefillHeavy, 16, 1, 2)}), MixedCluster());
  ASSERT_TRUE(r.ok()) << r.status().message();
  // int8: MI300X 2614.9 TOPS, H100 1979, 910B 626.
  EXPECT_EQ(DevicesOf(*r, "batch"), (std::vector<std::string>{"mi300x-0", "h100-0"}));
  EXPECT_NE(r->pools[0].replicas[0].reason.find("prefill_heavy prefers compute: 2614.9"),
            std::string::npos)
      << r->pools[0].replicas[0].reason;
}

TEST(Placement, Bf16LandsOnTheNativeBf16Device) {
  // The reference: bf16 work prefers H100. The T4 (the SLA table's Bronze device) supports bf16
  // only by conversion; the 910B runs it natively but slower than the H100.
  const std::vector<DeviceProfile> cluster = {
      Ref("t4", "t4-0"), Ref("t4", "t4-1"), Ref("ascend-910b", "ascend-0"), Ref("h100", "h100-0")};
  auto r = Place(Spec({Pool("gold", {"bf16"}, Workload::kPrefillHeavy, 8, 1, 3)}), cluster);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(DevicesOf(*r, "gold"), (std::vector<std::string>{"h100-0", "ascend-0", "t4-0"}));
  EXPECT_NE(r->pools[0].replicas[2].reason.find("bf16 only by conversion"), std::string::npos)
      << r->pools[0].replicas[2].reason;
  // Native precision outranks the workload's figure: on CPUs, a bf16 pool takes the CPU with
  // native bf16 although the other has more bandwidth; an fp32 pool takes the bandwidth.
  DeviceProfile a, b;
  a.name = "cpu-bf16", a.kind = "cpu", a.mem_gb = 64, a.sm_count = 32, a.mem_bandwidth_gbps = 100;
  a.precision = CpuPrecisions({"avx512f", "avx512_bf16"});
  b.name = "cpu-wide", b.kind = "cpu", b.mem_gb = 64, b.sm_count = 32, b.mem_bandwidth_gbps = 300;
  b.precision = CpuPrecisions({"avx2"});
  auto c = Place(Spec({Pool("bf", {"bf16"}, Workload::kDecodeHeavy, 4, 0, 1),
                       Pool("f32", {"fp32"}, Workload::kDecodeHeavy, 4, 0, 1)}),
                 {a, b});
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(DevicesOf(*c, "bf"), (std::vector<std::string>{"cpu-bf16"}));
  EXPECT_EQ(DevicesOf(*c, "f32"), (std::vector<std::string>{"cpu-wide"}));
  EXPECT_NE(c->pools[0].replicas[0].reason.find("fewer native precisions"), std::string::npos)
      << c->pools[0].replicas[0].reason;
}

TEST(Placement, MemoryLimitsAreRespected) {
  // 150 GB on one device: only the MI300X (192 GB) holds it; a second replica fits nowhere.
  EXPECT_EQ(ErrorOf(Spec({Pool("huge", {"bf16"}, Workload::kBalanced, 150, 1, 2)}), MixedCluster()),
            "pool 'huge': replica 2 of 2 needs 1 gpu(s) with 150 GB free each; 0 of the 5 "
            "eligible gpus have that (1 taken; the most free untaken: h100-0 80 GB)");
  auto one = Place(Spec({Pool("huge", {"bf16"}, Workload::kBalanced, 150, 1, 1)}), MixedCluster());
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(DevicesOf(*one, "huge"), (std::vector<std::string>{"mi300x-0"}));
  // Split over 2 gpus (60 GB each): every device holds its half, by bandwidth.
  auto split =
      Place(Spec({Pool("huge", {"bf16"}, Workload::kDecodeHeavy, 120, 2, 2)}), MixedCluster());
  ASSERT_TRUE(split.ok()) << split.status().message();
  ASSERT_EQ(split->pools[0].replicas.size(), 2u);
  EXPECT_EQ(split->pools[0].replicas[0].devices, (std::vector<std::string>{"mi300x-0", "h100-0"}));
  EXPECT_EQ(split->pools[0].replicas[1].devices, (std::vector<std::string>{"h100-1", "ascend-0"}));
  // 75 GB halves do not fit a 910B (64 GB): the second replica has one device of two.
  EXPECT_EQ(
      ErrorOf(Spec({Pool("huge", {"bf16"}, Workload::kDecodeHeavy, 150, 2, 2)}), MixedCluster()),
      "pool 'huge': replica 2 of 2 needs 2 gpu(s) with 75 GB free each; 1 of the 5 "
      "eligible gpus have that (2 taken; the most free untaken: h100-1 80 GB)");
  // Accelerators are not shared: 6 replicas on 5 gpus fail, naming the count.
  EXPECT_NE(ErrorOf(Spec({Pool("many", {}, Workload::kBalanced, 1, 1, 6)}), MixedCluster())
                .find("pool 'many': replica 6 of 6 needs 1 gpu(s) with 1 GB free each; 0 of the 5 "
                      "eligible gpus have that (5 taken)"),
            std::string::npos);
  // CPUs are shared by memory: 3 x 20 GB fit in 64 GB, 4 do not.
  DeviceProfile cpu;
  cpu.name = "cpu0", cpu.kind = "cpu", cpu.mem_gb = 64, cpu.sm_count = 4;
  cpu.precision = CpuPrecisions({"avx2"});
  PoolSpec p = Pool("cpu-pool", {"fp32"}, Workload::kBalanced, 20, 0, 3);
  p.devices.cpus = 2;
  auto fits = Place(Spec({p}), {cpu});
  ASSERT_TRUE(fits.ok()) << fits.status().message();
  EXPECT_EQ(DevicesOf(*fits, "cpu-pool"), (std::vector<std::string>{"cpu0", "cpu0", "cpu0"}));
  EXPECT_NE(fits->pools[0].replicas[2].reason.find("cpus oversubscribed (6 requested of 4)"),
            std::string::npos)
      << fits->pools[0].replicas[2].reason;
  p.replicas.max = 4;
  EXPECT_EQ(ErrorOf(Spec({p}), {cpu}),
            "pool 'cpu-pool': replica 4 of 4 needs 20 GB on one cpu; the most free on an eligible "
            "device is 4 GB (cpu0)");
}

TEST(Placement, ImpossiblePoolsNameTheUnmetNeed) {
  const std::vector<DeviceProfile> no_fp8 = {Ref("ascend-910b", "ascend-0"), Ref("t4", "t4-0")};
  const std::string fp8 =
      ErrorOf(Spec({Pool("fp8-pool", {"fp8"}, Workload::kBalanced, 8, 1, 1)}), no_fp8);
  EXPECT_EQ(fp8.rfind("pool 'fp8-pool': no gpu device supports fp8 (ascend-0: ", 0), 0u) << fp8;
  const std::string gpu = ErrorOf(Spec({Pool("g", {}, Workload::kBalanced, 8, 1, 1)}), {});
  EXPECT_EQ(gpu, "pool 'g': needs a gpu device (devices.gpus: 1) and there is none");
  DeviceProfile cpu;
  cpu.name = "cpu0", cpu.kind = "cpu", cpu.mem_gb = 64, cpu.precision = CpuPrecisions({});
  EXPECT_EQ(ErrorOf(Spec({Pool("c", {"fp8"}, Workload::kBalanced, 1, 0, 1)}), {cpu})
                .rfind("pool 'c': no cpu device supports fp8", 0),
            0u);
  EXPECT_EQ(ErrorOf(Spec({Pool("c", {}, Workload::kBalanced, 1, 0, 1)}), {cpu, cpu}),
            "devices: duplicate device name 'cpu0'");
}

TEST(Placement, TheMostConstrainedPoolGoesFirst) {
  // `any` (listed first) could run on either device; `fp8` only on the H100. Placed in spec
  // order, `any` would take the H100 (more free memory) and `fp8` would fail.
  const std::vector<DeviceProfile> cluster = {Ref("h100", "h100-0"),
                                              Ref("ascend-910b", "ascend-0")};
  auto r = Place(Spec({Pool("any", {"fp16"}, Workload::kBalanced, 8, 1, 1),
                       Pool("fp8", {"fp8"}, Workload::kBalanced, 8, 1, 1)}),
                 cluster);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->pools[0].pool, "any");  // the result keeps spec order
  EXPECT_EQ(DevicesOf(*r, "fp8"), (std::vector<std::string>{"h100-0"}));
  EXPECT_EQ(DevicesOf(*r, "any"), (std::vector<std::string>{"ascend-0"}));
  EXPECT_NE(r->pools[0].replicas[0].reason.find("the only eligible device with room"),
            std::string::npos)
      << r->pools[0].replicas[0].reason;
}

TEST(Placement, EveryChoiceHasAReason) {
  // The reference's three pools on the mixed cluster.
  auto r = Place(Spec({Pool("long-context", {"bf16"}, Workload::kPrefillHeavy, 60, 1, 2),
                       Pool("compliance", {"int8"}, Workload::kBalanced, 16, 1, 1),
                       Pool("general", {"fp16"}, Workload::kDecodeHeavy, 16, 1, 2)}),
                 MixedCluster());
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::set<std::string> used;
  for (const PoolPlacement& pp : r->pools) {
    for (const ReplicaPlacement& rp : pp.replicas) {
      EXPECT_FALSE(rp.reason.empty());
      EXPECT_NE(rp.reason.find("prefers"), std::string::npos) << rp.reason;
      EXPECT_NE(rp.reason.find("GB free"), std::string::npos) << rp.reason;
      for (const std::string& d : rp.devices)
        EXPECT_TRUE(used.insert(d).second) << d;  // not shared
    }
  }
  EXPECT_EQ(used.size(), 5u);
  const nlohmann::json j = ToJson(*r);
  EXPECT_EQ(j["pools"].size(), 3u);
  EXPECT_EQ(j["pools"][0]["replicas"][0]["devices"].size(), 1u);
  EXPECT_NE(PlacementText(*r).find("long-context[0] -> "), std::string::npos);
}

TEST(Placement, TheExampleSpecFitsOnOneMachine) {
  auto spec = LoadDeploymentSpec(STRATA_EXAMPLE_DEPLOY_YAML);
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  DeviceProfile cpu;  // a modest machine: 16 GB, 4 cores, AVX2 only
  cpu.name = "cpu0", cpu.kind = "cpu", cpu.mem_gb = 16, cpu.sm_count = 4;
  cpu.precision = CpuPrecisions({"avx2", "fma"});
  auto r = Place(*spec, {cpu});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->pools.size(), 3u);
  size_t replicas = 0;
  for (const PoolPlacement& pp : r->pools) replicas += pp.replicas.size();
  EXPECT_EQ(replicas, 7u);  // every pool up to replicas.max: 2 + 2 + 3
}

}  // namespace
}  // namespace strata::control
