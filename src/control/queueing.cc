#include "control/queueing.h"

#include <algorithm>
#include <cmath>

namespace strata::control {

double ReplicaProfile::Capacity() const {
  const double t = ServiceTime(max_batch);
  return t > 0 ? max_batch / t : kInf;
}

double ErlangC(int servers, double offered_load) {
  if (servers <= 0) return 1;
  const double c = servers;
  if (offered_load >= c) return 1;
  if (offered_load <= 0) return 0;
  // Erlang B by the stable recursion B(k) = a B(k-1) / (k + a B(k-1)), then C from B.
  double b = 1;
  for (int k = 1; k <= servers; ++k) b = offered_load * b / (k + offered_load * b);
  const double rho = offered_load / c;
  return b / (1 - rho * (1 - b));
}

Prediction Predict(const ReplicaProfile& profile, int replicas, double arrival_rate) {
  Prediction p;
  if (replicas <= 0) {
    if (arrival_rate > 0) {
      p.e2e_p95_s = p.ttft_p95_s = p.tpot_p95_s = kInf;
      p.error_rate = 1;
      p.utilisation = kInf;
    }
    return p;
  }
  const double lambda = std::max(0.0, arrival_rate) / replicas;
  const int c = std::max(1, profile.max_batch);
  // Steady batch from Little's law: an arrival joins the b others running, so it takes
  // T(b + 1) and b = lambda * T(b + 1).
  const double ab = profile.alpha_s + profile.beta_s;
  double batch = lambda * profile.beta_s < 1 ? lambda * ab / (1 - lambda * profile.beta_s) : kInf;
  const double service = profile.ServiceTime(std::min(batch + 1, static_cast<double>(c)));
  const double rho = lambda * service / c;
  p.utilisation = rho;
  // Headroom: nearer than max_utilisation to the capacity, the batch (and latency) grows without
  // bound on small errors in the rate, and a backlog cannot drain: treated as overload.
  const double capacity = profile.Capacity();
  if (lambda >= profile.max_utilisation * capacity && rho < 1) {
    p.e2e_p95_s = p.ttft_p95_s = p.tpot_p95_s = kInf;
    p.batch = std::min(batch, static_cast<double>(c));
    return p;
  }
  p.batch = std::min(batch, static_cast<double>(c));
  if (rho >= 1) {
    p.e2e_p95_s = p.ttft_p95_s = p.tpot_p95_s = kInf;
    p.error_rate = 1 - 1 / rho;
    p.batch = c;
    return p;
  }
  // The gateway balances on load, so the pool's slots form one queue: M/M/(n c).
  const int slots = c * replicas;
  const double pool_lambda = lambda * replicas;
  const double wait_prob = ErlangC(slots, pool_lambda * service);
  const double drain = slots / service - pool_lambda;  // > 0 since rho < 1
  const double cv2 = profile.service_cv * profile.service_cv;
  const double w95 = wait_prob > 0.05 ? std::log(wait_prob / 0.05) / drain * (1 + cv2) / 2 : 0;
  const double slowdown = service / profile.ServiceTime(1);
  p.e2e_p95_s = w95 + service * profile.p95_over_mean;
  p.ttft_p95_s = w95 + profile.ttft_s * slowdown * profile.p95_over_mean;
  p.tpot_p95_s = profile.tpot_s * slowdown * profile.p95_over_mean;
  return p;
}

void Calibrate(ReplicaProfile* profile, double mean_batch, double mean_e2e_s, double weight) {
  if (!(mean_batch > 0) || mean_batch > profile->max_batch || !(mean_e2e_s > 0)) return;
  if (!(profile->alpha_s > 0)) return;
  const double ratio = profile->beta_s / profile->alpha_s;
  const double joined = std::min(mean_batch + 1, static_cast<double>(profile->max_batch));
  const double fitted = mean_e2e_s / (1 + ratio * joined);
  const double w = std::clamp(weight, 0.0, 1.0);
  profile->alpha_s = (1 - w) * profile->alpha_s + w * fitted;
  profile->beta_s = ratio * profile->alpha_s;
}

}  // namespace strata::control
