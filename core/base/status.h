// Status and Result<T>: ferry's error model. Errors cross package boundaries as values, never as
// exceptions. A Status carries a code and a message; callers add context on the way up
// (`status.WithContext("planning tensor w")`), so the final message reads outermost-first:
// "planning tensor w: fragment 3 on rank 5: box [0,8) out of bounds [0,4)".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace ferry {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input from the caller (layouts, options, files)
  kNotFound,          // a named thing does not exist
  kAlreadyExists,
  kFailedPrecondition,
  kOutOfRange,
  kUnimplemented,
  kInternal,          // a bug in ferry
  kUnavailable,       // a peer or a library cannot be reached
  kDeadlineExceeded,  // a wait ran past its deadline
  kAborted,           // the operation was aborted (communicator abort, epoch change)
  kIoError,
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "context: message". No-op on OK.
  Status WithContext(std::string_view context) const&;
  Status WithContext(std::string_view context) &&;

  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

Status InvalidArgument(std::string message);
Status NotFound(std::string message);
Status FailedPrecondition(std::string message);
Status OutOfRange(std::string message);
Status Unimplemented(std::string message);
Status Internal(std::string message);
Status Unavailable(std::string message);
Status DeadlineExceeded(std::string message);
Status Aborted(std::string message);
Status IoError(std::string message);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Internal("Result constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

  Result WithContext(std::string_view context) && {
    if (ok()) return std::move(*this);
    return Result(std::move(status_).WithContext(context));
  }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace ferry

#define FERRY_CONCAT_INNER(a, b) a##b
#define FERRY_CONCAT(a, b) FERRY_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define FERRY_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::ferry::Status ferry_status_ = (expr);         \
    if (!ferry_status_.ok()) return ferry_status_;  \
  } while (false)

// `FERRY_ASSIGN_OR_RETURN(auto x, MakeX());` binds the value or returns the error.
#define FERRY_ASSIGN_OR_RETURN(lhs, expr) \
  FERRY_ASSIGN_OR_RETURN_IMPL(FERRY_CONCAT(ferry_result_, __LINE__), lhs, expr)
#define FERRY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
