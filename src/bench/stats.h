// Summary statistics for benchmark samples: median and percentiles (linear interpolation, as numpy).
#pragma once
#include <vector>

namespace canvas::bench {

// The p-th percentile (0 <= p <= 100) of the samples, interpolating linearly between the two nearest
// ranks (numpy's default): percentile({1, 2, 3, 4}, 50) = 2.5. Throws Error on an empty sample or a p
// outside [0, 100]; NaN samples are rejected too, since a timing is never NaN unless something broke.
double percentile(std::vector<double> samples, double p);
inline double median(const std::vector<double>& samples) { return percentile(samples, 50); }

}  // namespace canvas::bench
