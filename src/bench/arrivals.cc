#include "bench/arrivals.h"

#include <cmath>
#include <limits>

namespace strata::bench {

double Rng::Uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }

int64_t Rng::UniformInt(int64_t lo, int64_t hi) {
  uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
  if (span == 0) return static_cast<int64_t>(gen_());  // full 64-bit range
  // Rejection sampling removes modulo bias.
  uint64_t limit =
      std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % span;
  uint64_t x;
  do x = gen_();
  while (x >= limit);
  return lo + static_cast<int64_t>(x % span);
}

double Rng::Normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1 = 0;
  while (u1 <= 0) u1 = Uniform();
  double u2 = Uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  double t = 2.0 * M_PI * u2;
  spare_ = r * std::sin(t);
  has_spare_ = true;
  return r * std::cos(t);
}

double Rng::Gamma(double shape, double scale) {
  if (shape < 1.0) {
    // Boost: Gamma(a) = Gamma(a + 1) * U^(1/a).
    double u = 0;
    while (u <= 0) u = Uniform();
    return Gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  double d = shape - 1.0 / 3.0;
  double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x = Normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = Uniform();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (u > 0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

Result<std::vector<double>> ArrivalTimes(int64_t n, double rate, double burstiness, uint64_t seed) {
  if (n < 0) return Status::InvalidArgument("number of requests must be >= 0");
  if (!(rate > 0)) return Status::InvalidArgument("--request-rate must be > 0 (or inf)");
  if (!(burstiness > 0) || std::isinf(burstiness))
    return Status::InvalidArgument("--burstiness must be a finite number > 0");
  std::vector<double> t(static_cast<size_t>(n), 0.0);
  if (std::isinf(rate)) return t;
  Rng rng(seed);
  double theta = 1.0 / (rate * burstiness);
  double now = 0;
  for (auto& x : t) {
    now += rng.Gamma(burstiness, theta);
    x = now;
  }
  return t;
}

}  // namespace strata::bench
