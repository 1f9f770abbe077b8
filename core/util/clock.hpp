// Wall-clock timing of work (seconds on the monotonic clock), for timings in metrics and logs.
#pragma once
#include <chrono>

namespace dpft {

using SteadyTime = std::chrono::steady_clock::time_point;

inline SteadyTime steady_now() {
  return std::chrono::steady_clock::now();
}

// Seconds elapsed since t0.
inline double seconds_since(SteadyTime t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dpft
