// ReusablePrefix: how many of a sequence's cached tokens a run over new tokens keeps (a chat's
// next turn, a server slot's next request, a draft model catching up with its target). The main
// node owns the committed tokens of every sequence, so it decides; the stages' caches follow the
// truncation it sends.
//
// Thread safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/params.h"

namespace tandem::engine {

// The prefix `cached` and `tokens` share, less one when that is all of `tokens` (the last token
// is computed again: its logits give the next token), and 0 when the model's sliding-window
// layers no longer hold what continuing after it needs (model::WindowKeepsPrefix). `seen` is the
// most tokens the sequence's cache has held since it was last emptied: it is raised to
// cached.size() and, when nothing is kept, reset to 0, so the caller keeps it beside `cached`.
size_t ReusablePrefix(const model::ModelParams& p, const std::vector<int32_t>& cached,
                      const std::vector<int32_t>& tokens, size_t* seen);

}  // namespace tandem::engine
