// The replay latency model of skew-aware dispatch: one instance's continuous batching re-run on
// the PTL(BS, context) profile over per-sample length estimates. Eq. 2 assumes every sample of a
// group is as long as the group's P90 or P50 and that PTL is flat at small batches (true on a GPU,
// not on a CPU, where PTL grows with the batch from BS = 2); the replay sees the spread inside a
// group and the batch shrinking as samples finish, which is where the tail's time goes.
#pragma once

#include <vector>

#include "streamrl/core/ptl_table.h"
#include "streamrl/engine/profile.h"

namespace streamrl::sgs {

class LengthWindow;

// Seconds one instance takes for samples of `lengths` output tokens, admitted in the given order,
// at most `batch` at once, each with a `prompt_len`-token prompt (prefilled at the table's
// prefill rate). Lengths below one token count as one.
double replay_instance(const core::PtlTable& ptl, const std::vector<double>& lengths, int batch,
                       int prompt_len);
// The same on `profile`'s table, built for this call: in a search, build it once with table().
double replay_instance(const engine::Profile& profile, const std::vector<double>& lengths,
                       int batch, int prompt_len);

// Length estimates calibrated to the observed distribution: the ranker is trusted for the order
// only (StreamRL §5.2), so the r-th longest of M estimates becomes the (1 - (r + 0.5) / M) quantile
// of `window`. Ties keep equal values.
std::vector<double> calibrate_to_quantiles(const std::vector<double>& estimates,
                                           const LengthWindow& window);

}  // namespace streamrl::sgs
