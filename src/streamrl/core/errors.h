// Typed errors thrown inside streamrl and caught at the CLI/server boundary.
// InputError and UsageError mean "the caller gave us something wrong" (exit code 2); RuntimeFailure
// means the work itself failed (exit code 1). Each message is one line that names the culprit.
#pragma once

#include <stdexcept>
#include <string>

namespace streamrl {

// Bad input: malformed config, missing or corrupt file, bad request, unsupported value.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad command-line usage (unknown flag, missing argument).
class UsageError : public InputError {
 public:
  using InputError::InputError;
};

// A failure while doing valid work: dead peer, NaN loss, I/O failure.
class RuntimeFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A wait on another process or thread that ran past its deadline.
class TimeoutError : public RuntimeFailure {
 public:
  using RuntimeFailure::RuntimeFailure;
};

}  // namespace streamrl
