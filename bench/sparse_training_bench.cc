#include "sparse_training_bench.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "rounds.h"
#include "streamrl/core/config.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/model_config.h"
#include "streamrl/model/transformer.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/rl/sft.h"
#include "streamrl/tasks/split.h"
#include "streamrl/tasks/task.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using torch::Tensor;

constexpr int64_t kTrainBlock = 64;

json step_comparison(int64_t S, int rounds) {
  model::ModelConfig mc =
      model::load_model_config(std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json");
  mc.max_position_embeddings = std::max<int64_t>(mc.max_position_embeddings, S);
  model::CausalLM dense(mc, 0), sparse(mc, 0);
  const int64_t nb = (S + kTrainBlock - 1) / kTrainBlock;
  model::SparseAttentionConfig sc;
  sc.train.block = kTrainBlock;
  sc.train.keep = std::max<int64_t>(2, std::llround(0.1 * nb));  // 90 % of the blocks skipped
  sc.min_tokens = 0;
  sparse->enable_sparse_attention(sc, 1);  // every head sparse
  torch::manual_seed(3);
  const Tensor tokens = torch::randint(3, mc.vocab_size, {1, S}, torch::kLong);
  const Tensor valid = torch::ones({1, S}, torch::kBool);
  auto step = [&](model::CausalLM& lm) {
    return [&] {
      lm->zero_grad();
      (-lm->score(tokens, valid).logprobs.sum()).backward();
    };
  };
  Rounds log("sparse_training_step", 1);
  time_alternately(log, step(dense), step(sparse), rounds, 1);
  return {{"dense_step_s", log.summary("dense_s")},
          {"sparse_step_s", log.summary("sparse_s")},
          {"step_speedup", log.ratio_median("dense_s", "sparse_s")},
          {"step_speedup_rounds", log.ratio("dense_s", "sparse_s")},
          {"key_blocks_kept", sc.train.keep},
          {"key_blocks", nb},
          {"load", log.load_json()}};
}

// Held-out retrieve problems of difficulty 0 scored with teacher forcing: the answer's mean NLL and
// the share whose every answer token is the argmax (what greedy decoding would produce).
json score_heldout(const fs::path& checkpoint, int n) {
  model::CausalLM lm = model::load_model(checkpoint);
  const auto tok = tokenizer::load_tokenizer(checkpoint);
  const tasks::Task& task = tasks::get_task("retrieve");
  const rl::PromptEncoder encoder(*tok);
  torch::NoGradGuard no_grad;
  double nll = 0;
  int64_t tokens = 0, correct = 0, scored = 0;
  for (uint64_t i = 0; scored < n; ++i) {
    const tasks::Problem p = tasks::draw_problem(task, 0, tasks::Split::kEval, i);
    if (p.difficulty > 0) continue;
    std::vector<int32_t> ids = encoder.prompt_ids(p);
    const int64_t prompt = static_cast<int64_t>(ids.size());
    for (int32_t t : encoder.target(p).ids) ids.push_back(t);
    const int64_t T = static_cast<int64_t>(ids.size());
    const Tensor seq = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end())).view({1, T});
    const auto out = lm->score(seq, torch::ones({1, T}, torch::kBool), {.return_logits = true});
    const Tensor answer_lp = out.logprobs[0].narrow(0, prompt, T - prompt);
    const Tensor predicted = out.logits[0].narrow(0, prompt - 1, T - prompt).argmax(-1);
    nll -= answer_lp.sum().item<double>();
    tokens += T - prompt;
    correct += predicted.equal(seq[0].narrow(0, prompt, T - prompt)) ? 1 : 0;
    ++scored;
  }
  return {{"answer_loss", nll / static_cast<double>(tokens)},
          {"accuracy", static_cast<double>(correct) / n},
          {"heldout", n}};
}

json train_retrieve(const fs::path& root, const std::string& name, bool dsv, int steps) {
  model::ModelConfig mc =
      model::load_model_config(std::string(STREAMRL_SOURCE_DIR) + "/configs/model/tiny.json");
  mc.num_hidden_layers = 2;
  mc.hidden_size = 64;
  mc.intermediate_size = 192;
  mc.head_dim = 16;
  mc.max_position_embeddings = 1024;  // difficulty 0: 64-127 records, 448-889 characters
  fs::create_directories(root);
  const fs::path model_file = root / "model.json";
  std::ofstream(model_file) << model::to_json(mc).dump(2);
  std::ostringstream y;
  y << "run: {name: " << name << ", dir: " << root.string()
    << ", seed: 0, threads: 1, resume: false}\n"
    << "model:\n  config: " << model_file.string() << "\n  tokenizer: char\n";
  if (dsv) {
    // Thresholds under the defaults: a model this small and this briefly trained has no head at
    // 90 % sparsity (its attention is still diffuse), and a comparison in which no head switched
    // would compare dense with dense.
    y << "  sparse_attention: {enabled: true, block: 32, keep: 6, recent: 1, min_tokens: 256, "
         "warmup_steps: 20, sparsity_threshold: 0.5, min_coverage: 0.5, loss_threshold: 1.0}\n";
  }
  y << "data: {task: retrieve, max_difficulty: 0}\n"
    << "train:\n  steps: " << steps << "\n  batch_size: 8\n  micro_batch_tokens: 8192\n"
    << "  log_every: 10\n"
    << "  optim: {lr: 3.0e-3, warmup_steps: 10, min_lr_ratio: 0.1, weight_decay: 0.01, "
       "grad_clip: 1.0}\n"
    << "eval: {every: 0, n: 0, loss_n: 0}\ncheckpoint: {every: 0, keep: 1}\n";
  const core::Config cfg = core::Config::from_string(y.str());
  json result = rl::run_sft(rl::SftConfig::from_config(cfg), cfg.resolved_yaml());
  return result;
}

}  // namespace

json sparse_training_steps(bool quick) {
  const std::vector<int64_t> lengths =
      quick ? std::vector<int64_t>{512, 1024} : std::vector<int64_t>{4096, 8192};
  json per_length = json::object(), speedups = json::object();
  for (const int64_t S : lengths) {
    const json r = step_comparison(S, quick ? 1 : 3);
    speedups[std::to_string(S)] = r["step_speedup"];
    per_length[std::to_string(S)] = r;
  }
  return {{"step_speedup", speedups},
          {"training_step", per_length},
          {"training_step_data",
           "configs/model/tiny.json (4 layers, 4 heads of 32) on one random sequence: score + "
           "backward of the whole model, the model's dense training path against every head "
           "sparse (blocks of 64, 10 % of them kept); random weights (the cost does not depend on "
           "them); one thread, interleaved rounds"}};
}

json sparse_training_quality(bool quick) {
  const fs::path root =
      fs::temp_directory_path() / ("streamrl_bench_dsv_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const int steps = quick ? 4 : 150, heldout = quick ? 4 : 128;
  json out = json::object();
  for (const bool dsv : {false, true}) {
    const std::string name = dsv ? "dsv" : "dense";
    const json run = train_retrieve(root, name, dsv, steps);
    json rec = score_heldout(run.at("checkpoint").get<std::string>(), heldout);
    rec["final_train_loss"] = run["final_loss"];
    rec["train_seconds"] = run["train_seconds"];
    if (run.contains("sparse_attention")) rec["sparse_attention"] = run["sparse_attention"];
    out[name] = rec;
  }
  fs::remove_all(root);
  const double dense_loss = out["dense"]["answer_loss"].get<double>();
  return {
      {"quality", out},
      {"quality_accuracy_delta",
       out["dsv"]["accuracy"].get<double>() - out["dense"]["accuracy"].get<double>()},
      {"quality_loss_ratio", out["dsv"]["answer_loss"].get<double>() / dense_loss},
      {"quality_train_speedup",
       out["dense"]["train_seconds"].get<double>() / out["dsv"]["train_seconds"].get<double>()},
      {"quality_data",
       "streamrl sft from scratch on task retrieve, difficulty 0 (448-889 characters), " +
           std::to_string(steps) +
           " steps of 8, a 2-layer width-64 model, dense vs model.sparse_attention (blocks of "
           "32, 6 kept, rows from 256 tokens; heads switch at sparsity and coverage 0.5, "
           "predictor loss 1.0); held-out difficulty-0 problems scored with teacher forcing "
           "(accuracy: every answer token the argmax, as greedy decoding; chance is about 1/90)"}};
}

}  // namespace streamrl::bench
