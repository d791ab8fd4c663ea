/// @file
/// Status and Expected<T>: the error model of every public facetrace API (no exceptions cross it).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace facetrace {

/// Error codes (docs/design/style.md §4).
enum class Code : std::uint8_t {
  kOk,
  kInvalidArgument,
  kNotSupported,
  kDeclined,
  kCancelled,
  kOutOfMemory,
  kDeviceLost,
  kTimeout,
  kIo,
  kInternal,
};

/// Stable name of a code, e.g. "InvalidArgument".
std::string_view code_name(Code code) noexcept;

/// Result of an operation: ok, or a code plus a message that names what failed, the value and where.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string what) : code_(code), what_(std::move(what)) {}

  bool ok() const noexcept { return code_ == Code::kOk; }
  Code code() const noexcept { return code_; }
  const std::string& what() const noexcept { return what_; }
  /// "Code: message", for logs and CLI output.
  std::string to_string() const;
  /// A copy with `context` prepended ("context: what"), NCCL-style breadcrumbs.
  Status with_context(std::string_view context) const;

 private:
  Code code_ = Code::kOk;
  std::string what_;
};

inline Status ok_status() { return {}; }
inline Status invalid_argument(std::string what) { return {Code::kInvalidArgument, std::move(what)}; }
inline Status not_supported(std::string what) { return {Code::kNotSupported, std::move(what)}; }
inline Status internal_error(std::string what) { return {Code::kInternal, std::move(what)}; }
inline Status io_error(std::string what) { return {Code::kIo, std::move(what)}; }

/// Holds a T or a non-ok Status.
template <class T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}        // NOLINT
  Expected(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status(Code::kInternal, "Expected built from an ok Status");
  }

  bool ok() const noexcept { return std::holds_alternative<T>(v_); }
  explicit operator bool() const noexcept { return ok(); }
  /// The error; an ok Status when a value is held.
  Status status() const { return ok() ? Status{} : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace facetrace

/// Propagate a non-ok Status from an expression returning Status.
#define FT_TRY(expr)                                         \
  do {                                                       \
    if (::facetrace::Status ft_st_ = (expr); !ft_st_.ok()) { \
      return ft_st_;                                         \
    }                                                        \
  } while (false)
