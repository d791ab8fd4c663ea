/// @file
/// Status helpers.
#include "facetrace/core/status.h"

namespace facetrace {

std::string_view code_name(Code code) noexcept {
  switch (code) {
    case Code::kOk: return "Ok";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotSupported: return "NotSupported";
    case Code::kDeclined: return "Declined";
    case Code::kCancelled: return "Cancelled";
    case Code::kOutOfMemory: return "OutOfMemory";
    case Code::kDeviceLost: return "DeviceLost";
    case Code::kTimeout: return "Timeout";
    case Code::kIo: return "Io";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "Ok";
  std::string s(code_name(code_));
  s += ": ";
  s += what_;
  return s;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  std::string w(context);
  w += ": ";
  w += what_;
  return Status(code_, std::move(w));
}

}  // namespace facetrace
