#include "streamrl/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "streamrl/core/errors.h"

namespace streamrl::planner {

PtlTable PtlTable::from_json(const nlohmann::json& j) {
  PtlTable t;
  std::map<int, std::vector<std::pair<double, double>>> by_context;
  try {
    for (const auto& pt : j.at("ptl")) {
      const int bs = pt.at("batch_size").get<int>();
      const int ctx = pt.at("context").get<int>();
      const double s = pt.at("step_seconds").get<double>();
      if (bs < 1 || ctx < 0 || !(s > 0)) throw InputError("PTL point with bad values");
      by_context[ctx].emplace_back(bs, s);
    }
    t.prefill_tokens_per_s_ = j.value("prefill_tokens_per_s", 0.0);
    t.threads_ = j.value("threads", 0);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("malformed PTL profile: ") + e.what());
  }
  if (by_context.empty()) throw InputError("malformed PTL profile: no points");
  for (auto& [ctx, curve] : by_context) {
    std::sort(curve.begin(), curve.end());
    t.contexts_.push_back(ctx);
    t.curves_.push_back(std::move(curve));
  }
  return t;
}

double PtlTable::at_context(size_t ci, double batch) const {
  const auto& c = curves_[ci];
  if (c.size() == 1 || batch <= c.front().first) return c.front().second;
  size_t i = 1;
  while (i + 1 < c.size() && batch > c[i].first) ++i;
  const auto& [b0, s0] = c[i - 1];
  const auto& [b1, s1] = c[i];
  return s0 + (s1 - s0) * (batch - b0) / (b1 - b0);
}

double PtlTable::step_seconds(double batch, double context) const {
  if (contexts_.size() == 1 || context <= contexts_.front()) return at_context(0, batch);
  size_t i = 1;
  while (i + 1 < contexts_.size() && context > contexts_[i]) ++i;
  const double s0 = at_context(i - 1, batch), s1 = at_context(i, batch);
  const double c0 = contexts_[i - 1], c1 = contexts_[i];
  return std::max(1e-9, s0 + (s1 - s0) * (context - c0) / (c1 - c0));
}

int PtlTable::max_batch() const {
  int m = 0;
  for (const auto& c : curves_) m = std::max(m, static_cast<int>(c.back().first));
  return m;
}

InstanceModel measured_instance(const PtlTable& table, int max_batch) {
  InstanceModel m;
  m.step_seconds = [table](double bs, double ctx) { return table.step_seconds(bs, ctx); };
  m.prefill_tokens_per_s = table.prefill_tokens_per_s();
  m.max_batch = max_batch;
  return m;
}

int choose_tp(const Accelerator& acc, const ModelShape& shape) {
  int tp = 1;
  while (shape.weight_bytes() / (tp * acc.hbm_gb * 1e9) > 0.5) {
    tp *= 2;
    if (tp > 64) throw InputError("model '" + shape.name + "' does not fit on 64 " + acc.name);
  }
  return tp;
}

InstanceModel roofline_instance(const Accelerator& acc, const ModelShape& shape, int tp,
                                const Efficiency& eff, double mean_sequence_tokens) {
  const double bw = acc.hbm_tb_s * 1e12 * eff.decode_bandwidth * tp;
  const double flops = acc.bf16_tflops * 1e12 * eff.decode_compute * tp;
  const double fixed =
      shape.layers * (eff.layer_overhead_ms + (tp > 1 ? 2 * eff.tp_allreduce_ms : 0)) * 1e-3 +
      shape.weight_bytes() / bw;
  const double kv = shape.kv_bytes_per_token();
  InstanceModel m;
  m.devices = tp;
  m.step_seconds = [=](double batch, double context) {
    return fixed + batch * (shape.forward_flops_per_token(context) / flops + context * kv / bw);
  };
  m.prefill_tokens_per_s = flops / shape.forward_flops_per_token(0);
  const double kv_memory = 0.9 * tp * acc.hbm_gb * 1e9 - shape.weight_bytes();
  const double seqs = kv_memory / (kv * std::max(1.0, mean_sequence_tokens));
  m.max_batch = static_cast<int>(std::clamp(seqs, 1.0, 512.0));
  return m;
}

TrainerModel roofline_trainer(const Accelerator& acc, const ModelShape& shape, int devices,
                              const Efficiency& eff, double flops_per_param_token,
                              double mean_context) {
  TrainerModel t;
  t.devices = devices;
  const double per_token = flops_per_param_token / 2 * shape.forward_flops_per_token(mean_context);
  t.tokens_per_s = devices * acc.bf16_tflops * 1e12 * eff.train_mfu / per_token;
  // Adam over the trained models (about a third of the passes): 16 bytes of state per parameter
  // read and written, spread over the devices.
  const double trained_models = std::max(1.0, flops_per_param_token / 6 - 1);
  t.step_overhead_s = trained_models * shape.params() * 32 / (devices * acc.hbm_tb_s * 1e12);
  t.micro_batch_tokens = static_cast<int64_t>(devices) * 16384;
  return t;
}

double weight_transfer_seconds(const ModelShape& shape, double gb_per_s) {
  if (!(gb_per_s > 0)) throw InputError("weight transfer bandwidth must be positive");
  return shape.weight_bytes() / (gb_per_s * 1e9);
}

}  // namespace streamrl::planner
