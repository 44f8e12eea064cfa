// Status and Result<T>: errors as values at every boundary with files, sockets or users.
//
// A Status is OK or carries a code and a human-readable message. Result<T> holds either a T or a
// non-OK Status. Neither throws. Both are cheap to move; an OK Status allocates nothing.
//
// Thread safety: values; distinct objects may be used from distinct threads freely.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace tandem {

enum class Code {
  kOk = 0,
  kInvalidArgument,   // the caller passed something unusable (flag, path, parameter)
  kNotFound,          // a file, key or tensor does not exist
  kCorruption,        // untrusted bytes (file, frame) are malformed
  kUnsupported,       // well-formed but not handled (version, type, architecture)
  kIOError,           // the operating system refused (open, read, mmap, socket)
  kOutOfRange,        // a size or index past a limit (context full, too large)
  kResourceExhausted, // memory or another budget ran out
  kInternal,          // a bug in tandem
  kCancelled,         // stopped on request before it finished
  kUnavailable,       // cannot serve now (a full queue, a pipeline that is down): try again later
};
// The last code (a code read from the network is checked against it).
inline constexpr Code kLastCode = Code::kUnavailable;

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status Unsupported(std::string m) { return {Code::kUnsupported, std::move(m)}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
  static Status ResourceExhausted(std::string m) {
    return {Code::kResourceExhausted, std::move(m)};
  }
  static Status Cancelled(std::string m) { return {Code::kCancelled, std::move(m)}; }
  static Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "corruption: <message>", or "ok".
  std::string ToString() const;

  // Returns a copy whose message is "<prefix>: <message>" (context added on the way up).
  Status WithContext(std::string_view prefix) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Either a value or an error. Accessing value() of an error is a bug (asserted in debug builds).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(v_);
  }

  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T value_or(T fallback) const { return ok() ? std::get<T>(v_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tandem

#define TANDEM_CONCAT_INNER(a, b) a##b
#define TANDEM_CONCAT(a, b) TANDEM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK. (Each use names its
// variable by __COUNTER__, so a use inside another's argument, e.g. in a lambda, shadows nothing.)
#define TANDEM_RETURN_IF_ERROR(expr) TANDEM_RETURN_IF_ERROR_IMPL(TANDEM_CONCAT(_tandem_st_, __COUNTER__), expr)
#define TANDEM_RETURN_IF_ERROR_IMPL(st, expr) \
  do {                                        \
    ::tandem::Status st = (expr);             \
    if (!st.ok()) return st;                  \
  } while (0)

// `TANDEM_ASSIGN_OR_RETURN(auto x, ComputeResult());` declares x from a Result or returns its error.
#define TANDEM_ASSIGN_OR_RETURN(lhs, expr) \
  TANDEM_ASSIGN_OR_RETURN_IMPL(TANDEM_CONCAT(_tandem_res_, __LINE__), lhs, expr)
#define TANDEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()
