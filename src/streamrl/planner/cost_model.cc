#include "streamrl/planner/cost_model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "streamrl/core/errors.h"

namespace streamrl::planner {

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
