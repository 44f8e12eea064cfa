#include "engine/stop_strings.h"

#include <algorithm>
#include <utility>

namespace tandem::engine {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopStrings::Push(std::string_view text, bool* stopped) {
  *stopped = false;
  pending_ += text;
  size_t cut = std::string::npos;
  for (const std::string& s : stops_) cut = std::min(cut, pending_.find(s));
  if (cut != std::string::npos) {
    *stopped = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > keep; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopStrings::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace tandem::engine
