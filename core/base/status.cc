// Status: codes, names and context chaining.
#include "core/base/status.h"

namespace ferry {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kAlreadyExists: return "ALREADY_EXISTS";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kOutOfRange: return "OUT_OF_RANGE";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kIoError: return "IO_ERROR";
  }
  return "UNKNOWN";
}

Status Status::WithContext(std::string_view context) const& {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status Status::WithContext(std::string_view context) && {
  if (ok()) return std::move(*this);
  message_ = std::string(context) + ": " + message_;
  return std::move(*this);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status InvalidArgument(std::string m) { return Status(StatusCode::kInvalidArgument, std::move(m)); }
Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
Status FailedPrecondition(std::string m) { return Status(StatusCode::kFailedPrecondition, std::move(m)); }
Status OutOfRange(std::string m) { return Status(StatusCode::kOutOfRange, std::move(m)); }
Status Unimplemented(std::string m) { return Status(StatusCode::kUnimplemented, std::move(m)); }
Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
Status Unavailable(std::string m) { return Status(StatusCode::kUnavailable, std::move(m)); }
Status DeadlineExceeded(std::string m) { return Status(StatusCode::kDeadlineExceeded, std::move(m)); }
Status Aborted(std::string m) { return Status(StatusCode::kAborted, std::move(m)); }
Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }

}  // namespace ferry
