// Median and percentiles of benchmark samples.
#include "bench/stats.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace canvas::bench {

double percentile(std::vector<double> samples, double p) {
  check(!samples.empty(), "percentile of an empty sample");
  check(p >= 0 && p <= 100, "percentile " + std::to_string(p) + " is outside [0, 100]");
  for (double s : samples) check(!std::isnan(s), "percentile: the sample holds a NaN");
  std::sort(samples.begin(), samples.end());
  const double rank = p / 100.0 * double(samples.size() - 1);
  const size_t lo = size_t(std::floor(rank));
  const size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = rank - double(lo);
  return samples[lo] + (samples[hi] - samples[lo]) * frac;
}

}  // namespace canvas::bench
