// Number drawing shared by the built-in tasks.
#include "streamrl/tasks/builtin/numbers.h"

#include <cassert>

namespace streamrl::tasks {

int64_t power_of_ten(int exponent) {
  assert(exponent >= 0 && exponent <= 18);
  int64_t p = 1;
  for (int i = 0; i < exponent; ++i) p *= 10;
  return p;
}

int64_t draw_number(Rng& rng, int digits) {
  assert(digits >= 1 && digits <= 18);
  return rng.uniform(digits == 1 ? 0 : power_of_ten(digits - 1), power_of_ten(digits) - 1);
}

}  // namespace streamrl::tasks
