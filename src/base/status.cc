#include "base/status.h"

namespace tandem {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kNotFound: return "not found";
    case Code::kCorruption: return "corrupt";
    case Code::kUnsupported: return "unsupported";
    case Code::kIOError: return "I/O error";
    case Code::kOutOfRange: return "out of range";
    case Code::kResourceExhausted: return "resource exhausted";
    case Code::kInternal: return "internal error";
    case Code::kCancelled: return "cancelled";
    case Code::kUnavailable: return "unavailable";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view prefix) const {
  if (ok()) return *this;
  std::string m(prefix);
  m += ": ";
  m += message_;
  return Status(code_, std::move(m));
}

}  // namespace tandem
