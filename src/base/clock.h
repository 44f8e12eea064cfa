// Elapsed time on the monotonic clock, for deadlines, heartbeats and throttled reports.
//
// Thread safety: pure functions.
#pragma once

#include <chrono>
#include <cstdint>

namespace tandem {

using SteadyClock = std::chrono::steady_clock;

// Whole milliseconds from `t` to now.
inline int64_t MsSince(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - t).count();
}

}  // namespace tandem
