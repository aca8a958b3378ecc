// Number drawing shared by the built-in tasks.
#pragma once

#include <cstdint>

#include "streamrl/tasks/rng.h"

namespace streamrl::tasks {

// A uniform number with exactly `digits` decimal digits (0-9 for one digit).
// REQUIRES 1 <= digits <= 18.
int64_t draw_number(Rng& rng, int digits);

// 10^exponent. REQUIRES 0 <= exponent <= 18.
int64_t power_of_ten(int exponent);

}  // namespace streamrl::tasks
