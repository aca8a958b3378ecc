#include "streamrl/rl/sft.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/train_checkpoint.h"
#include "streamrl/tasks/dataset.h"
#include "streamrl/tasks/split.h"
#include "streamrl/telemetry/metrics_log.h"
#include "streamrl/telemetry/progress.h"

namespace streamrl::rl {
namespace fs = std::filesystem;

SftConfig SftConfig::from_config(const core::Config& root) {
  SftConfig c;
  c.run.read(root.section("run"));
  core::Config model = root.section("model");
  model.get("config", c.model_config);
  model.get("tokenizer", c.tokenizer);
  model.get("init_from", c.init_from);
  c.moe.read(model.section("moe"));
  c.data.read(root.section("data"));
  core::Config train = root.section("train");
  train.get("steps", c.steps);
  train.get("batch_size", c.batch_size);
  train.get("micro_batch_tokens", c.micro_batch_tokens);
  train.get("log_every", c.log_every);
  c.optim.total_steps = c.steps;
  c.optim.read(train.section("optim"));
  c.optim.total_steps = c.steps;
  read_eval(root.section("eval"), &c.eval_every, &c.eval);
  c.checkpoint.read(root.section("checkpoint"));
  root.check_all_used();
  if (c.steps < 1) throw InputError("train.steps must be >= 1");
  if (c.batch_size < 1) throw InputError("train.batch_size must be >= 1");
  if (c.micro_batch_tokens < 1) throw InputError("train.micro_batch_tokens must be >= 1");
  return c;
}

namespace {}  // namespace

nlohmann::json run_sft(const SftConfig& c, const std::string& resolved_config_yaml) {
  core::apply_core_budget(c.run.threads > 0 ? c.run.threads : core::available_cores());
  const fs::path run_dir = c.run.dir();

  // 1. Data (loaded and checked before anything is trained), tokenizer and model.
  std::unique_ptr<tasks::Task> owned;
  const tasks::Task& task = c.data.load(&owned);
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::optional<model::CausalLM> lm;
  if (!c.init_from.empty()) {
    lm.emplace(model::load_model(c.init_from));
    tok = tokenizer::load_tokenizer(c.init_from);
  } else {
    model::ModelConfig mc = model::load_model_config(c.model_config);
    tok = tokenizer::make_tokenizer(c.tokenizer);
    if (tok->vocab_size() > mc.vocab_size) {
      throw InputError(c.model_config + ": vocab_size " + std::to_string(mc.vocab_size) +
                       " is smaller than the tokenizer's " + std::to_string(tok->vocab_size()));
    }
    lm.emplace(model::CausalLM(mc, c.run.seed));
  }
  model::CausalLM& model = *lm;
  model->set_gating(c.moe.gating);
  const PromptEncoder encoder = PromptEncoder::for_task(*tok, c.init_from, task);
  auto optimizer = make_adamw(*model, c.optim);
  const int64_t max_len = model->config().max_position_embeddings;

  // 2. Resume from the newest checkpoint of this run, if any.
  int64_t start_step = 0;
  double loss_value = 0;
  if (c.run.resume) {
    if (auto ck = resume_training_checkpoint(run_dir, model, *optimizer)) {
      const nlohmann::json& state = ck->state;
      start_step = state.at("step").get<int64_t>();
      loss_value = state.value("loss", 0.0);
      SLOG(kInfo) << "resuming " << run_dir.string() << " from step " << start_step;
    }
  } else if (latest_checkpoint(run_dir)) {
    throw InputError(run_dir.string() +
                     " already has checkpoints; set run.resume=true to continue " +
                     "it or choose another run.name");
  }
  core::write_file_atomic(run_dir / "config.yaml", resolved_config_yaml);
  telemetry::MetricsLog metrics(run_dir / "metrics.jsonl", start_step);

  auto checkpoint = [&](int64_t step) {
    return save_training_checkpoint(run_dir, step, model, tok->to_json(), *optimizer,
                                    {{"step", step}, {"kind", "sft"}, {"loss", loss_value}},
                                    c.checkpoint.keep);
  };

  // 3. Train. Batch k holds train problems [k*B, (k+1)*B): the data position is a function of the
  // step, so a resumed run sees exactly the batches the uninterrupted one would.
  telemetry::Progress progress("sft " + c.run.name, c.steps);
  double last_eval_acc = -1;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t step = start_step; step < c.steps; ++step) {
    std::vector<std::vector<int32_t>> prompts, completions;
    for (int i = 0; i < c.batch_size; ++i) {
      const uint64_t index = static_cast<uint64_t>(step) * c.batch_size + i;
      tasks::Problem p = tasks::draw_problem(task, c.run.seed, tasks::Split::kTrain, index);
      std::vector<int32_t> prompt = encoder.prompt_ids(p);
      std::vector<int32_t> target = encoder.target_ids(p);
      if (static_cast<int64_t>(prompt.size() + target.size()) > max_len) {
        target.resize(std::max<int64_t>(0, max_len - static_cast<int64_t>(prompt.size())));
      }
      prompts.push_back(std::move(prompt));
      completions.push_back(std::move(target));
    }
    // Token-mean over the whole batch: each micro-batch adds its summed loss divided by the
    // batch's total completion tokens, so the split does not change the update.
    std::vector<int64_t> lengths;
    int64_t total_tokens = 0;
    for (size_t i = 0; i < prompts.size(); ++i) {
      lengths.push_back(static_cast<int64_t>(prompts[i].size() + completions[i].size()));
      total_tokens += static_cast<int64_t>(completions[i].size());
    }
    const double lr = lr_at(c.optim, step);
    set_lr(*optimizer, lr);
    optimizer->zero_grad();
    loss_value = 0;
    for (const auto& micro : pack_by_token_budget(lengths, c.micro_batch_tokens)) {
      std::vector<std::vector<int32_t>> mp, mc;
      for (size_t i : micro) mp.push_back(prompts[i]), mc.push_back(completions[i]);
      SequenceBatch batch = make_sequence_batch(mp, mc);
      auto out = model->score(batch.tokens, batch.valid);
      const double total = static_cast<double>(std::max<int64_t>(1, total_tokens));
      // The router losses are means over the micro-batch: weighted by its share of the tokens.
      auto loss = -(out.logprobs * batch.completion).sum() / total +
                  c.moe.loss(out.moe) * (batch.completion.sum().item<double>() / total);
      loss.backward();
      loss_value += loss.item<double>();
    }
    if (!std::isfinite(loss_value)) {
      auto last = latest_checkpoint(run_dir);
      throw RuntimeFailure(
          "sft loss is " + std::to_string(loss_value) + " at step " + std::to_string(step) +
          "; last good checkpoint: " + (last ? last->dir.string() : std::string("none")));
    }
    const double grad_norm = clip_grad_norm(*model, c.optim.grad_clip);
    if (!std::isfinite(grad_norm)) {
      throw RuntimeFailure("sft gradient norm is not finite at step " + std::to_string(step));
    }
    optimizer->step();

    const int64_t done = step + 1;
    nlohmann::json rec = {{"step", done},
                          {"loss", loss_value},
                          {"lr", lr},
                          {"grad_norm", grad_norm},
                          {"tokens", total_tokens}};
    if (c.eval_every > 0 && done % c.eval_every == 0 && done < c.steps && c.eval.n > 0) {
      torch::NoGradGuard no_grad;
      EvalResult er = evaluate(model, encoder, task, c.eval);
      last_eval_acc = er.accuracy;
      rec["eval"] = er.to_json();
    }
    if (c.log_every > 0 && (done % c.log_every == 0 || done == c.steps)) metrics.write(rec);
    char status[64];
    std::snprintf(status, sizeof(status), "loss %.4f lr %.2e", loss_value, lr);
    std::string line = status;
    if (last_eval_acc >= 0) line += " eval acc " + std::to_string(last_eval_acc).substr(0, 5);
    progress.update(done, line);
    if (c.checkpoint.every > 0 && done % c.checkpoint.every == 0 && done < c.steps)
      checkpoint(done);
  }
  progress.finish();
  const double train_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // 4. Final checkpoint (also as <run>/final for a stable path) and held-out evaluation.
  checkpoint(c.steps);
  model::save_checkpoint(run_dir / "final", model, tok->to_json(),
                         model::checkpoint_side_files(c.init_from));
  nlohmann::json result = {{"run_dir", run_dir.string()},
                           {"checkpoint", (run_dir / "final").string()},
                           {"steps", c.steps},
                           {"resumed_from_step", start_step},
                           {"final_loss", loss_value},
                           {"train_seconds", train_s}};
  if (c.eval.n > 0) {
    torch::NoGradGuard no_grad;
    EvalResult er = evaluate(model, encoder, task, c.eval);
    result["eval"] = er.to_json();
    metrics.write({{"step", c.steps}, {"final_eval", er.to_json()}});
  }
  return result;
}

}  // namespace streamrl::rl
