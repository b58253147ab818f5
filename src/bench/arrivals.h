// Deterministic randomness and request arrival schedules.
//
// Rng: mt19937_64 with our own uniform/normal/gamma transforms, so a seed gives the same numbers
// with every standard library (std::*_distribution algorithms are implementation-defined).
// Arrivals: inter-arrival gaps drawn from Gamma(shape = burstiness, scale = 1 / (rate *
// burstiness)), mean 1/rate; burstiness 1 is a Poisson process, < 1 burstier, > 1 more regular (as
// vLLM's benchmark defines it). rate = +inf sends everything at t = 0. Thread-safety: Rng is not
// thread-safe; the functions are pure.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "base/status.h"

namespace strata::bench {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  uint64_t Next() { return gen_(); }
  double Uniform();                            // [0, 1)
  int64_t UniformInt(int64_t lo, int64_t hi);  // [lo, hi], requires lo <= hi
  double Normal();                             // standard normal (Box-Muller)
  double Gamma(double shape, double scale);    // Marsaglia-Tsang; shape > 0, scale > 0

 private:
  std::mt19937_64 gen_;
  bool has_spare_ = false;
  double spare_ = 0;
};

// Send times (seconds from the start, non-decreasing, first gap included) of n requests.
// InvalidArgument for rate <= 0, NaN, or burstiness <= 0.
Result<std::vector<double>> ArrivalTimes(int64_t n, double rate, double burstiness, uint64_t seed);

}  // namespace strata::bench
