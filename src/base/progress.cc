#include "base/progress.h"

#include <cstdio>
#include <utility>

namespace tandem {

std::string FormatProgress(const std::string& what, uint64_t done, uint64_t total, double seconds, uint64_t since) {
  const int pct = total > 0 ? static_cast<int>(100.0 * static_cast<double>(done) / static_cast<double>(total)) : 100;
  char line[160];
  int n = std::snprintf(line, sizeof line, " %3d%% (%.1f of %.1f MiB", pct, done / 1048576.0, total / 1048576.0);
  if (seconds > 0 && done > since && n > 0 && static_cast<size_t>(n) < sizeof line) {
    const double rate = static_cast<double>(done - since) / seconds;
    n += std::snprintf(line + n, sizeof line - n, ", %.1f MiB/s", rate / 1048576.0);
    if (done < total && static_cast<size_t>(n) < sizeof line) {
      n += std::snprintf(line + n, sizeof line - n, ", %.0f s left", (total - done) / rate);
    }
  }
  if (n > 0 && static_cast<size_t>(n) < sizeof line - 1) std::snprintf(line + n, sizeof line - n, ")");
  return what + line;
}

Progress::Progress(std::string what, Sink sink, uint64_t min_total, std::chrono::milliseconds interval)
    : what_(std::move(what)), sink_(std::move(sink)), min_total_(min_total), interval_(interval),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void Progress::Update(uint64_t done, uint64_t total) {
  if (!sink_ || total < min_total_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    start_ = now;
    start_done_ = done;
  }
  const int quarter = total > 0 ? static_cast<int>(4 * done / total) : 4;
  const bool end = done >= total;
  if (!end && quarter <= last_quarter_ && now - last_ < interval_) return;
  last_quarter_ = quarter;
  last_ = now;
  finished_ = end;
  sink_(FormatProgress(what_, done, total, std::chrono::duration<double>(now - start_).count(), start_done_));
}

}  // namespace tandem
