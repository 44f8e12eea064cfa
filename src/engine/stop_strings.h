// StopStrings: generated text passes through here on its way to the user, so that a stop string
// is never shown, not even its first characters: text that could still grow into a stop string
// is held back until the next piece decides it.
//
// Thread safety: none; one per sequence.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tandem::engine {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);

  // Adds `text` and returns what can be shown now. When a stop string appears, *stopped is set,
  // the text before it is returned and everything from it on is dropped.
  std::string Push(std::string_view text, bool* stopped);
  // What is held back (the generation ended without a stop string).
  std::string Flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
};

}  // namespace tandem::engine
