// The message of the InputError a piece of code throws, for tests of one-line errors.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "streamrl/core/errors.h"

namespace streamrl::testing_util {

// The InputError message of `fn`, or a test failure when it throws nothing.
inline std::string input_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an InputError";
  return "";
}

}  // namespace streamrl::testing_util
