#include "streamrl/planner/pipeline_cost_fit.h"

#include <array>
#include <cmath>
#include <string>

#include "streamrl/core/errors.h"

namespace streamrl::planner {
namespace {

constexpr int kTerms = 3;
constexpr int kSumsPerFit = 10;  // PipelineCostFit::kSums

// Adds one point to sums laid out as PipelineCostFit's (n, X'WX, X'Wy).
void accumulate(double* s, double x1, double x2, double y) {
  const double w = 1.0 / (y * y);
  const std::array<double, kTerms> x = {1.0, x1, x2};
  s[0] += w * y * y;
  s[1] += w * x[0] * x[0], s[2] += w * x[0] * x[1], s[3] += w * x[0] * x[2];
  s[4] += w * x[1] * x[1], s[5] += w * x[1] * x[2], s[6] += w * x[2] * x[2];
  s[7] += w * x[0] * y, s[8] += w * x[1] * y, s[9] += w * x[2] * y;
}

// The non-negative least-squares solution from the sums: every subset of terms solved on its
// normal equations (scaled to a unit diagonal, so collinear terms show as a vanishing pivot), the
// non-negative solution of least weighted squared error kept.
std::array<double, kTerms> solve(const double* s) {
  const double A[kTerms][kTerms] = {{s[1], s[2], s[3]}, {s[2], s[4], s[5]}, {s[3], s[5], s[6]}};
  const double b[kTerms] = {s[7], s[8], s[9]};
  std::array<double, kTerms> best = {0, 0, 0};
  double best_sse = s[0];  // all zeros: sum w y^2
  for (int mask = 1; mask < (1 << kTerms); ++mask) {
    int idx[kTerms], n = 0;
    for (int i = 0; i < kTerms; ++i) {
      if (mask & (1 << i)) idx[n++] = i;
    }
    double M[kTerms][kTerms + 1], scale[kTerms];
    bool usable = true;
    for (int r = 0; r < n; ++r) {
      scale[r] = std::sqrt(A[idx[r]][idx[r]]);
      usable = usable && scale[r] > 0 && std::isfinite(scale[r]);
    }
    if (!usable) continue;
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) M[r][c] = A[idx[r]][idx[c]] / (scale[r] * scale[c]);
      M[r][n] = b[idx[r]] / scale[r];
    }
    for (int c = 0; c < n && usable; ++c) {  // Gaussian elimination, partial pivoting
      int pivot = c;
      for (int r = c + 1; r < n; ++r) {
        if (std::abs(M[r][c]) > std::abs(M[pivot][c])) pivot = r;
      }
      if (std::abs(M[pivot][c]) < 1e-9) {
        usable = false;
        break;
      }
      for (int k = 0; k <= n; ++k) std::swap(M[c][k], M[pivot][k]);
      for (int r = 0; r < n; ++r) {
        if (r == c) continue;
        const double f = M[r][c] / M[c][c];
        for (int k = c; k <= n; ++k) M[r][k] -= f * M[c][k];
      }
    }
    if (!usable) continue;
    std::array<double, kTerms> beta = {0, 0, 0};
    for (int r = 0; r < n; ++r) {
      beta[idx[r]] = M[r][n] / M[r][r] / scale[r];
      usable = usable && beta[idx[r]] >= 0 && std::isfinite(beta[idx[r]]);
    }
    if (!usable) continue;
    double sse = s[0];  // sum w (y - x.beta)^2 = n - 2 beta.b + beta' A beta
    for (int i = 0; i < kTerms; ++i) {
      sse -= 2 * beta[i] * b[i];
      for (int j = 0; j < kTerms; ++j) sse += beta[i] * A[i][j] * beta[j];
    }
    if (sse < best_sse) best_sse = sse, best = beta;
  }
  return best;
}

}  // namespace

std::vector<double> fit_relative_nonnegative(const std::vector<double>& x1,
                                             const std::vector<double>& x2,
                                             const std::vector<double>& y) {
  double s[kSumsPerFit] = {};
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] > 0 && std::isfinite(y[i])) accumulate(s, x1[i], x2[i], y[i]);
  }
  const std::array<double, kTerms> c = solve(s);
  return {c.begin(), c.end()};
}

PipelineCostFit::PipelineCostFit(const pipeline::Partition& partition)
    : partition_(partition),
      sums_(static_cast<size_t>(partition.stages) * partition.chunks * 2 * kSums, 0.0) {}

int PipelineCostFit::slot(int stage, int chunk, pipeline::OpKind kind) const {
  if (stage < 0 || stage >= partition_.stages || chunk < 0 || chunk >= partition_.chunks) {
    throw InputError("pipeline cost fit: no virtual stage (" + std::to_string(stage) + ", " +
                     std::to_string(chunk) + ")");
  }
  const int direction = kind == pipeline::OpKind::kForward ? 0 : 1;
  return ((stage * partition_.chunks + chunk) * 2 + direction) * kSums;
}

void PipelineCostFit::add(int stage, int chunk, pipeline::OpKind kind,
                          const pipeline::MicroBatch& mb, double seconds) {
  if (!(seconds > 0) || !std::isfinite(seconds)) return;
  accumulate(&sums_[slot(stage, chunk, kind)], static_cast<double>(mb.tokens),
             static_cast<double>(mb.tokens_sq), seconds);
}

void PipelineCostFit::add(const std::vector<pipeline::OpSeconds>& ops,
                          const std::vector<pipeline::MicroBatch>& micro_batches) {
  for (const pipeline::OpSeconds& o : ops) {
    if (o.op.micro_batch < 0 || o.op.micro_batch >= static_cast<int>(micro_batches.size())) {
      throw InputError("pipeline cost fit: op of micro-batch " + std::to_string(o.op.micro_batch) +
                       " of " + std::to_string(micro_batches.size()));
    }
    add(o.stage, o.op.chunk, o.op.kind, micro_batches[o.op.micro_batch], o.seconds);
  }
}

void PipelineCostFit::decay(double factor) {
  for (double& s : sums_) s *= factor;
}

void PipelineCostFit::merge(const std::vector<double>& sums) {
  if (sums.size() != sums_.size()) {
    throw InputError("pipeline cost fit: merging " + std::to_string(sums.size()) + " sums into " +
                     std::to_string(sums_.size()));
  }
  for (size_t i = 0; i < sums.size(); ++i) sums_[i] += sums[i];
}

double PipelineCostFit::observations(int stage, int chunk, pipeline::OpKind kind) const {
  return sums_[slot(stage, chunk, kind)];
}

bool PipelineCostFit::fitted(double min_observations) const {
  for (size_t i = 0; i < sums_.size(); i += kSums) {
    if (sums_[i] < min_observations) return false;
  }
  return true;
}

PipelineProfile PipelineCostFit::apply(const PipelineProfile& profile,
                                       double min_observations) const {
  if (partition_.boundaries.empty() ||
      partition_.boundaries.back() != static_cast<int>(profile.layers.size())) {
    throw InputError(
        "pipeline cost fit: the profile has " + std::to_string(profile.layers.size()) +
        " layers, the partition covers " +
        std::to_string(partition_.boundaries.empty() ? 0 : partition_.boundaries.back()));
  }
  if (!fitted(min_observations)) return profile;
  PipelineProfile out = profile;
  for (int s = 0; s < partition_.stages; ++s) {
    for (int c = 0; c < partition_.chunks; ++c) {
      const int first = partition_.first_layer(s, c), end = partition_.end_layer(s, c);
      const double layers = end - first;
      for (const pipeline::OpKind kind :
           {pipeline::OpKind::kForward, pipeline::OpKind::kBackward}) {
        const std::array<double, kTerms> k = solve(&sums_[slot(s, c, kind)]);
        for (int l = first; l < end; ++l) {
          out.layers[l].set_terms(kind, {k[0] / layers, k[1] / layers, k[2] / layers});
        }
      }
    }
  }
  return out;
}

}  // namespace streamrl::planner
