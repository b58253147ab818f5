#include "control/up_poller.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>
#include <vector>

#include "control/fetch.h"
#include "control/prom_client.h"

namespace strata::control::up {
namespace {

using std::chrono::milliseconds;

// The requests the gateway holds per pool (its strata_gateway_pool_held_requests gauge).
std::map<std::string, int> HeldRequests(const std::string& gateway_url) {
  std::map<std::string, int> out;
  if (gateway_url.empty()) return out;
  auto r = FetchHttp("GET", gateway_url, "/metrics", milliseconds(1000));
  if (!r.ok() || r->status != 200) return out;
  static const std::regex kHeld(
      "^strata_gateway_pool_held_requests\\{pool=\"([^\"]+)\"\\} ([0-9.e+]+)$");
  std::stringstream lines(r->body);
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_match(line, m, kHeld)) out[m[1].str()] = static_cast<int>(std::stod(m[2]));
  return out;
}

// One instant query's first sample value (NaN when there is none or Prometheus is unreachable).
double QueryValue(const std::string& prom_url, const std::string& expr) {
  auto r = FetchHttp("GET", prom_url, "/api/v1/query?query=" + UrlEncode(expr), milliseconds(2000));
  if (!r.ok() || r->status != 200) return std::nan("");
  auto samples = ParseQueryResponse(r->body);
  return samples.ok() && !samples->empty() ? samples->front().value : std::nan("");
}

std::string P95(std::string_view family, std::string_view pool) {
  return fmt::format(
      "histogram_quantile(0.95, sum by (le) (rate({}_bucket{{role=\"replica\",pool=\"{}\"}}[1m])))",
      family, pool);
}

PoolFigures MeasurePool(const std::string& prom_url, const std::string& pool) {
  PoolFigures f;
  f.e2e_p95_s = QueryValue(prom_url, P95("strata:e2e_request_latency_seconds", pool));
  f.ttft_p95_s = QueryValue(prom_url, P95("strata:time_to_first_token_seconds", pool));
  f.tpot_p95_s = QueryValue(prom_url, P95("strata:inter_token_latency_seconds", pool));
  const std::string all = fmt::format(
      "sum(rate(strata:request_success_total{{role=\"replica\",pool=\"{}\"}}[1m]))", pool);
  f.request_rate = QueryValue(prom_url, all);
  f.error_rate = QueryValue(
      prom_url, fmt::format("sum(rate(strata:request_success_total{{role=\"replica\",pool=\"{}\","
                            "finished_reason=\"error\"}}[1m])) / {}",
                            pool, all));
  if (std::isnan(f.error_rate) && f.request_rate > 0) f.error_rate = 0;  // no error series yet
  return f;
}

}  // namespace

void Poller::Start() {
  next_measure_ = next_canary_poll_ = std::chrono::steady_clock::now();
  thread_ = std::thread([this] { Run(); });
}

void Poller::Join() {
  if (thread_.joinable()) thread_.join();
}

void Poller::Run() {
  MutexLock lock(&state_.mu);
  while (!state_.stopping) {
    if (!ActivateHeldPools() || !PollCanaries()) break;
    replicas_.Reconcile(state_);
    MeasurePools();
    if (!state_.stopping) state_.cv.WaitFor(&state_.mu, milliseconds(250));
  }
}

bool Poller::ActivateHeldPools() {
  bool any_at_zero = false;
  for (const auto& [name, run] : state_.pools) any_at_zero = any_at_zero || run.desired == 0;
  if (!any_at_zero) return true;
  auto gw = sup_.Find(std::string(kGateway));
  const std::string url = gw && gw->state == ChildState::kReady ? gw->url() : "";
  state_.mu.Unlock();
  const auto held = HeldRequests(url);
  state_.mu.Lock();
  if (state_.stopping) return false;
  Activate(held);
  return true;
}

void Poller::Activate(const std::map<std::string, int>& held) {
  for (const auto& [pool, n] : held) {
    const PoolSpec* p = state_.spec.FindPool(pool);
    auto run = state_.pools.find(pool);
    if (!p || run == state_.pools.end() || n <= 0 || run->second.desired > 0 || p->replicas.max < 1)
      continue;
    ScaleDecision d;
    d.desired = 1;
    d.changed = true;
    d.reason = fmt::format("activation: the gateway holds {} request(s) for a pool at 0", n);
    run->second.desired = 1;
    run->second.decision = d;
    state_.activations.push_back({pool, std::chrono::steady_clock::now()});
    std::fprintf(stderr, "strata up: pool %s: %s\n", pool.c_str(), d.reason.c_str());
  }
}

bool Poller::PollCanaries() {
  const auto now = std::chrono::steady_clock::now();
  if (!AnyCanarySplits(state_) || now < next_canary_poll_) return true;
  next_canary_poll_ = now + std::chrono::seconds(1);
  auto gw = sup_.Find(std::string(kGateway));
  const std::string url = gw && gw->port > 0 ? gw->url() : "";
  const std::string key = configs_.admin_key();
  state_.mu.Unlock();
  const Result<FetchReply> reply =
      url.empty() ? Result<FetchReply>(Status::Unavailable("the gateway is not listening"))
                  : FetchHttp("GET", url, "/admin/canary", milliseconds(2000), "", key);
  state_.mu.Lock();
  if (state_.stopping) return false;
  ObserveCanaries(state_, reply);
  return true;
}

void Poller::MeasurePools() {
  if (ctx_.prom_port == 0 || std::chrono::steady_clock::now() < next_measure_) return;
  std::vector<std::string> names;
  for (const PoolSpec& p : state_.spec.pools) names.push_back(p.name);
  const auto every = std::max<std::chrono::seconds>(std::chrono::seconds(1),
                                                    state_.spec.prometheus.scrape_interval);
  next_measure_ = std::chrono::steady_clock::now() + every;
  state_.mu.Unlock();
  std::map<std::string, PoolFigures> figures;
  for (const std::string& n : names) figures[n] = MeasurePool(ctx_.PrometheusUrl(), n);
  state_.mu.Lock();
  for (auto& [n, f] : figures) state_.pools[n].figures = f;
}

}  // namespace strata::control::up
