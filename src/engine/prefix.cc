#include "engine/prefix.h"

#include <algorithm>

#include "model/kv_cache.h"

namespace tandem::engine {

size_t ReusablePrefix(const model::ModelParams& p, const std::vector<int32_t>& cached,
                      const std::vector<int32_t>& tokens, size_t* seen) {
  *seen = std::max(*seen, cached.size());
  size_t n = 0;
  while (n < cached.size() && n < tokens.size() && cached[n] == tokens[n]) ++n;
  if (n == tokens.size() && n > 0) --n;
  if (!model::WindowKeepsPrefix(p, static_cast<int64_t>(n), static_cast<int64_t>(*seen))) n = 0;
  if (n == 0) *seen = 0;
  return n;
}

}  // namespace tandem::engine
