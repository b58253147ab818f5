// control/queueing: predicts a pool's latencies for `n` replicas from the arrival rate and one
// replica's measured capacity — the model the autoscaler searches for the smallest count that
// meets the SLO.
//
// The replica (ReplicaProfile) is a batch server, as llm-d's variant autoscaler and Dynamo's
// planner model it: while it runs `b` requests together, one request takes
//   T(b) = alpha + beta * b          (seconds, end to end, for the pool's typical request)
// and at most `max_batch` run at once (the rest wait in the engine's queue). TTFT and TPOT slow
// down by the same factor T(b) / T(1) from their alone-values `ttft_s` / `tpot_s`.
//
// Prediction for n replicas at arrival rate lambda (requests/s), load split evenly:
//  1. Per replica lambda_r = lambda / n. An arrival joins the b requests running, so it takes
//     T(b + 1) (the bench's closed loop at concurrency C measures T(C)); Little's law,
//     b = lambda_r * T(b + 1), gives b = lambda_r (alpha + beta) / (1 - lambda_r beta)
//     (infinite when lambda_r * beta >= 1).
//  2. Each replica has c = max_batch slots, each serving one request in
//     T = T(min(b + 1, max_batch)). Utilisation rho = lambda_r * T / c; rho >= 1 is overload:
//     every latency is +infinity and the error rate is the shed fraction 1 - 1/rho.
//  3. The gateway routes on load, so the pool's n * c slots share one queue: M/M/(n c) at
//     lambda. Erlang C gives the probability of waiting P_w and the waiting-time tail
//     P(W > t) = P_w * exp(-(n c / T - lambda) t), so the p95 wait is
//     w95 = max(0, ln(P_w / 0.05) / (n c / T - lambda)), scaled by Allen-Cunneen's
//     (1 + cv^2) / 2 for service times less (or more) variable than exponential.
//  3b. Headroom: lambda_r >= max_utilisation * Capacity() predicts +infinity too (no error): so
//     close to the capacity the batch grows without bound on a small error in the rate, and a
//     backlog (a step's first interval) would never drain.
//  4. p95 e2e = w95 + T * p95_over_mean; p95 TTFT = w95 + ttft_s * slowdown * p95_over_mean;
//     p95 TPOT = tpot_s * slowdown * p95_over_mean (a TPOT does not include the wait).
//
// Calibration: Calibrate() refits alpha (keeping beta / alpha) from a measured point — the mean
// end-to-end time at a measured mean batch — so the prediction follows the replica's real speed.
//
// Thread contract: pure functions and plain values.
#pragma once

#include <limits>

namespace strata::control {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

struct ReplicaProfile {
  double alpha_s = 0.05;         // T(b) = alpha + beta*b: fixed part of one request (s)
  double beta_s = 0.01;          // per concurrent request (s)
  int max_batch = 8;             // requests a replica runs at once
  double ttft_s = 0.01;          // TTFT of a request alone (s)
  double tpot_s = 0.002;         // TPOT of a request alone (s)
  double p95_over_mean = 1.2;    // service-time p95 / mean (request-length spread)
  double service_cv = 1.0;       // service-time coefficient of variation (1: exponential)
  double max_utilisation = 0.9;  // of Capacity(): above it a count is not accepted (headroom)
  double cold_start_s = 5;       // replica start to ready (s)
  // Requests/s one replica serves at full batch: max_batch / T(max_batch).
  double Capacity() const;
  double ServiceTime(double batch) const { return alpha_s + beta_s * batch; }
};

struct Prediction {
  double e2e_p95_s = 0, ttft_p95_s = 0, tpot_p95_s = 0;  // +inf when overloaded
  double error_rate = 0;   // the fraction shed by overload (0 when rho < 1)
  double utilisation = 0;  // rho of one replica, [0, inf)
  double batch = 0;        // mean requests running per replica
};

// The prediction for `replicas` (>= 1) replicas at `arrival_rate` requests/s (>= 0).
Prediction Predict(const ReplicaProfile& profile, int replicas, double arrival_rate);

// Erlang C: the probability that an arrival waits in an M/M/c queue with offered load
// a = lambda / mu (Erlangs); 1 when a >= c.
double ErlangC(int servers, double offered_load);

// Refits profile->alpha_s so that T(batch + 1) (an arrival joins `batch` others) equals
// `mean_e2e_s` (beta / alpha kept), smoothed: alpha = (1 - weight) * alpha + weight * fitted.
// Ignores points with batch outside (0, max_batch]
// or a non-positive time (they carry queueing, not capacity).
void Calibrate(ReplicaProfile* profile, double mean_batch, double mean_e2e_s, double weight = 0.5);

}  // namespace strata::control
