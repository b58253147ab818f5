// Greedy placement by the rules of control/placement.h: for each pool (most constrained first),
// for each replica, the eligible devices are ranked (native precisions, then the workload's
// figure, then free memory, then name) and the first with room is taken.
#include "control/placement.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/enum_names.h"

namespace strata::control {
namespace {

// A device's state while placing.
struct Slot {
  const DeviceProfile* d = nullptr;
  double mem_free = 0;
  double cpus_used = 0;
  bool taken = false;  // an accelerator holds a replica
};

bool IsGpuPool(const PoolSpec& p) { return p.devices.gpus > 0; }

bool KindFits(const DeviceProfile& d, const PoolSpec& p) {
  return (d.kind == "gpu") == IsGpuPool(p);
}

bool Eligible(const DeviceProfile& d, const PoolSpec& p) {
  if (!KindFits(d, p)) return false;
  return std::all_of(p.devices.precisions.begin(), p.devices.precisions.end(),
                     [&](const std::string& x) { return d.Supports(x); });
}

int NativeCount(const DeviceProfile& d, const PoolSpec& p) {
  return static_cast<int>(std::count_if(p.devices.precisions.begin(), p.devices.precisions.end(),
                                        [&](const std::string& x) { return d.Native(x); }));
}

// The compute rate the pool can use on `d`: the best of its precisions' rates (fp16 / fp8 are
// counted at the bf16 rate); with no precision need, the best of all.
double ComputeRate(const DeviceProfile& d, const PoolSpec& p) {
  auto rate = [&](const std::string& x) {
    if (x == "int8") return d.int8_tops;
    if (x == "fp32") return d.fp32_tflops;
    return d.bf16_tflops;
  };
  if (p.devices.precisions.empty()) return std::max({d.int8_tops, d.bf16_tflops, d.fp32_tflops});
  double best = 0;
  for (const std::string& x : p.devices.precisions) best = std::max(best, rate(x));
  return best;
}

// The workload's figure of merit, and how it reads in a reason.
double Merit(const Slot& s, const PoolSpec& p) {
  switch (p.workload) {
    case Workload::kDecodeHeavy:
      return s.d->mem_bandwidth_gbps;
    case Workload::kPrefillHeavy:
      return ComputeRate(*s.d, p);
    case Workload::kBalanced:
      return s.mem_free;
  }
  return 0;
}

// Per workload (in Workload's order): the unit its figure of merit reads in, and the rule.
constexpr auto kMeritUnits = EnumNames<Workload::kPrefillHeavy>(" GB free", " GB/s", " T(FL)OPS");
constexpr auto kMeritRules = EnumNames<Workload::kPrefillHeavy>(
    "balanced prefers free memory", "decode_heavy prefers memory bandwidth",
    "prefill_heavy prefers compute");

std::string MeritText(const Slot& s, const PoolSpec& p) {
  return fmt::format("{:g}{}", Merit(s, p), EnumName(kMeritUnits, p.workload, ""));
}

std::string_view MeritRule(Workload w) { return EnumName(kMeritRules, w, ""); }

// True when a ranks before b for pool p.
bool Better(const Slot& a, const Slot& b, const PoolSpec& p) {
  const int na = NativeCount(*a.d, p), nb = NativeCount(*b.d, p);
  if (na != nb) return na > nb;
  const double ma = Merit(a, p), mb = Merit(b, p);
  if (ma != mb) return ma > mb;
  if (a.d->mem_bandwidth_gbps != b.d->mem_bandwidth_gbps)
    return a.d->mem_bandwidth_gbps > b.d->mem_bandwidth_gbps;
  if (a.mem_free != b.mem_free) return a.mem_free > b.mem_free;
  return a.d->name < b.d->name;
}

double MemPerDevice(const PoolSpec& p) { return p.devices.memory_gb / std::max(1, p.devices.gpus); }

bool HasRoom(const Slot& s, const PoolSpec& p) {
  if (IsGpuPool(p) && s.taken) return false;
  return s.mem_free + 1e-9 >= MemPerDevice(p);
}

std::string Join(const std::vector<std::string>& v, std::string_view sep = ", ") {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

std::string PrecisionText(const DeviceProfile& d, const PoolSpec& p) {
  if (p.devices.precisions.empty()) return "no precision needs";
  std::vector<std::string> native, converted;
  for (const std::string& x : p.devices.precisions) (d.Native(x) ? native : converted).push_back(x);
  std::string out;
  if (!native.empty()) out = "runs " + Join(native) + " natively";
  if (!converted.empty())
    out += (out.empty() ? "" : "; ") + Join(converted) + " only by conversion";
  return out;
}

// The unmet need when no device of the pool's kind supports its precisions.
Status PrecisionError(const PoolSpec& p, const std::vector<Slot>& slots) {
  const std::string kind = IsGpuPool(p) ? "gpu" : "cpu";
  std::vector<std::string> offered;
  std::vector<std::string> unsupported;
  for (const std::string& x : p.devices.precisions) {
    const bool any = std::any_of(slots.begin(), slots.end(), [&](const Slot& s) {
      return KindFits(*s.d, p) && s.d->Supports(x);
    });
    if (!any) unsupported.push_back(x);
  }
  for (const Slot& s : slots) {
    if (!KindFits(*s.d, p)) continue;
    std::vector<std::string> ps;
    for (const auto& kv : s.d->precision) ps.push_back(kv.first);
    offered.push_back(s.d->name + ": " + Join(ps, " "));
  }
  if (offered.empty())
    return Status::InvalidArgument(
        fmt::format("pool '{}': needs a {} device (devices.gpus: {}) and there is none", p.name,
                    kind, p.devices.gpus));
  if (!unsupported.empty())
    return Status::InvalidArgument(fmt::format("pool '{}': no {} device supports {} ({})", p.name,
                                               kind, Join(unsupported), Join(offered, "; ")));
  return Status::InvalidArgument(fmt::format("pool '{}': no {} device supports all of {} ({})",
                                             p.name, kind, Join(p.devices.precisions),
                                             Join(offered, "; ")));
}

Status MemoryError(const PoolSpec& p, int replica, const std::vector<Slot*>& ranked) {
  const Slot* most = nullptr;  // the most free memory on an eligible device that is not taken
  int taken = 0, enough = 0;
  for (const Slot* s : ranked) {
    if (IsGpuPool(p) && s->taken) {
      ++taken;
      continue;
    }
    if (HasRoom(*s, p)) ++enough;
    if (most == nullptr || s->mem_free > most->mem_free) most = s;
  }
  const std::string head =
      fmt::format("pool '{}': replica {} of {} needs", p.name, replica + 1, p.replicas.max);
  if (!IsGpuPool(p))
    return Status::InvalidArgument(
        fmt::format("{} {:g} GB on one cpu; the most free on an eligible device is {:g} GB ({})",
                    head, MemPerDevice(p), most == nullptr ? 0.0 : most->mem_free,
                    most == nullptr ? "none" : most->d->name));
  std::string detail = fmt::format("{} taken", taken);
  if (most != nullptr)
    detail += fmt::format("; the most free untaken: {} {:g} GB", most->d->name, most->mem_free);
  return Status::InvalidArgument(
      fmt::format("{} {} gpu(s) with {:g} GB free each; {} of the {} eligible gpus have that ({})",
                  head, p.devices.gpus, MemPerDevice(p), enough, ranked.size(), detail));
}

std::string Reason(const PoolSpec& p, const std::vector<Slot*>& ranked,
                   const std::vector<Slot*>& chosen, double mem_before) {
  const Slot& c = *chosen.front();
  std::string out = PrecisionText(*c.d, p);
  // The runner-up: the best-ranked device with room that was not chosen.
  const Slot* next = nullptr;
  std::vector<std::string> full;
  for (const Slot* s : ranked) {
    if (std::find(chosen.begin(), chosen.end(), s) != chosen.end()) continue;
    if (!HasRoom(*s, p)) {
      if (Better(*s, c, p)) full.push_back(s->d->name);
      continue;
    }
    if (next == nullptr) next = s;
  }
  out += fmt::format("; {}: {}", MeritRule(p.workload), MeritText(c, p));
  if (next != nullptr) {
    const bool by_precision = NativeCount(*next->d, p) < NativeCount(*c.d, p);
    out += fmt::format(" (next: {} {}{})", next->d->name, MeritText(*next, p),
                       by_precision ? ", fewer native precisions" : "");
  } else {
    out += " (the only eligible device with room)";
  }
  if (!full.empty()) out += "; better ranked but full: " + Join(full);
  out += fmt::format("; needs {:g} GB, {:g} of {:g} GB free", MemPerDevice(p), mem_before,
                     c.d->mem_gb);
  if (!IsGpuPool(p) && c.cpus_used > c.d->sm_count && c.d->sm_count > 0)
    out += fmt::format("; cpus oversubscribed ({:g} requested of {})", c.cpus_used, c.d->sm_count);
  return out;
}

Result<PoolPlacement> PlacePool(const PoolSpec& p, std::vector<Slot>* slots) {
  std::vector<Slot*> eligible;
  for (Slot& s : *slots) {
    if (Eligible(*s.d, p)) eligible.push_back(&s);
  }
  if (eligible.empty()) return PrecisionError(p, *slots);
  PoolPlacement out;
  out.pool = p.name;
  out.replicas.reserve(static_cast<size_t>(p.replicas.max));
  const int want = std::max(1, p.devices.gpus);
  for (int r = 0; r < p.replicas.max; ++r) {
    std::vector<Slot*> ranked = eligible;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [&](const Slot* a, const Slot* b) { return Better(*a, *b, p); });
    std::vector<Slot*> chosen;
    for (Slot* s : ranked) {
      if (static_cast<int>(chosen.size()) < want && HasRoom(*s, p)) chosen.push_back(s);
    }
    if (static_cast<int>(chosen.size()) < want) return MemoryError(p, r, ranked);
    const double mem_before = chosen.front()->mem_free;
    ReplicaPlacement rp;
    rp.replica = r;
    for (Slot* s : chosen) {
      s->mem_free -= MemPerDevice(p);
      s->cpus_used += p.devices.cpus;
      s->taken = IsGpuPool(p);
      rp.devices.push_back(s->d->name);
    }
    rp.reason = Reason(p, ranked, chosen, mem_before);
    out.replicas.push_back(std::move(rp));
  }
  return out;
}

}  // namespace

const PoolPlacement* Placement::Find(std::string_view pool) const {
  for (const PoolPlacement& p : pools) {
    if (p.pool == pool) return &p;
  }
  return nullptr;
}

Result<Placement> Place(const DeploymentSpec& spec, const std::vector<DeviceProfile>& devices) {
  std::vector<Slot> slots;
  slots.reserve(devices.size());
  std::set<std::string> names;
  for (const DeviceProfile& d : devices) {
    if (!names.insert(d.name).second)
      return Status::InvalidArgument("devices: duplicate device name '" + d.name + "'");
    slots.push_back({&d, d.mem_gb, 0, false});
  }
  // Most constrained first: fewest eligible devices, then spec order.
  std::vector<size_t> order(spec.pools.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto eligible_count = [&](size_t i) {
    return std::count_if(devices.begin(), devices.end(),
                         [&](const DeviceProfile& d) { return Eligible(d, spec.pools[i]); });
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return eligible_count(a) < eligible_count(b); });
  std::map<size_t, PoolPlacement> placed;
  for (size_t i : order) {
    ASSIGN_OR_RETURN(PoolPlacement pp, PlacePool(spec.pools[i], &slots));
    placed.emplace(i, std::move(pp));
  }
  Placement out;
  out.pools.reserve(placed.size());
  for (auto& [i, pp] : placed) out.pools.push_back(std::move(pp));
  return out;
}

nlohmann::json ToJson(const Placement& p) {
  nlohmann::json pools = nlohmann::json::array();
  for (const PoolPlacement& pp : p.pools) {
    nlohmann::json replicas = nlohmann::json::array();
    for (const ReplicaPlacement& r : pp.replicas)
      replicas.push_back({{"replica", r.replica}, {"devices", r.devices}, {"reason", r.reason}});
    pools.push_back({{"pool", pp.pool}, {"replicas", std::move(replicas)}});
  }
  return {{"pools", std::move(pools)}};
}

std::string PlacementText(const Placement& p) {
  std::string out;
  for (const PoolPlacement& pp : p.pools) {
    for (const ReplicaPlacement& r : pp.replicas)
      out += fmt::format("{}[{}] -> {}: {}\n", pp.pool, r.replica, Join(r.devices), r.reason);
  }
  return out;
}

}  // namespace strata::control
