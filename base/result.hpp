// Result<T>: a value or an operating error (bad config, lost peer, I/O failure).
//
// Operating errors are values that reach the user as one clear sentence; bugs are
// TROUPE_CHECK failures (see check.hpp); exceptions never cross a layer boundary.
// Thread safety: a Result is a plain value; share it like any other value.
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "base/check.hpp"

namespace troupe {

/// An operating error: a sentence meant for the user, naming what failed and why.
struct Error {
  std::string message;
};

/// Builds an Error from a message.
inline Error make_error(std::string message) {
  return Error{std::move(message)};
}

/// Either a T or an Error. Accessing the wrong alternative is a bug (it aborts).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : state_(std::move(value)) {}      // NOLINT: implicit by design
  Result(Error error) : state_(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return state_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & {
    TROUPE_CHECK(ok(), "Result::value() on an error");
    return std::get<0>(state_);
  }
  const T& value() const& {
    TROUPE_CHECK(ok(), "Result::value() on an error");
    return std::get<0>(state_);
  }
  T&& value() && {
    TROUPE_CHECK(ok(), "Result::value() on an error");
    return std::get<0>(std::move(state_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const {
    TROUPE_CHECK(!ok(), "Result::error() on a value");
    return std::get<1>(state_);
  }

 private:
  std::variant<T, Error> state_;
};

/// Result of an operation that produces no value.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const {
    TROUPE_CHECK(!ok_, "Result::error() on success");
    return error_;
  }

 private:
  Error error_;
  bool ok_ = true;
};

using Status = Result<void>;

}  // namespace troupe

/// Returns the error of `expr` (a Result) from the enclosing function if it failed.
#define TROUPE_TRY(expr)                                             \
  do {                                                               \
    auto troupe_try_result_ = (expr);                                \
    if (!troupe_try_result_.ok()) return troupe_try_result_.error(); \
  } while (0)
