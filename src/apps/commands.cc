#include "apps/commands.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace tandem::apps {

int ReportError(const std::string& message) {
  std::string line = message;
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  std::fprintf(stderr, "tandem: error: %s\n", line.c_str());
  return 1;
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IOError("cannot read " + path);
  return ss.str();
}

}  // namespace tandem::apps
