#include "streamrl/rl/sft.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>

#include "streamrl/core/device.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/core/log.h"
#include "streamrl/core/threads.h"
#include "streamrl/dist/expert_parallel.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/safetensors.h"
#include "streamrl/rl/moe_curriculum.h"
#include "streamrl/rl/prompt_curriculum.h"
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
  c.sparse.read(model.section("sparse_attention"));
  model.get("dtype", c.dtype);
  core::check_dtype_name(c.dtype);
  c.data.read(root.section("data"));
  core::Config train = root.section("train");
  train.get("steps", c.steps);
  train.get("batch_size", c.batch_size);
  train.get("micro_batch_tokens", c.micro_batch_tokens);
  train.get("epoch_size", c.epoch_size);
  train.get("moe_curriculum", c.moe_curriculum);
  train.get("log_every", c.log_every);
  c.optim.total_steps = c.steps;
  c.optim.read(train.section("optim"));
  c.optim.total_steps = c.steps;
  root.section("eval").get("loss_n", c.eval_loss_n);
  read_eval(root.section("eval"), &c.eval_every, &c.eval);
  c.checkpoint.read(root.section("checkpoint"));
  c.parallel.read(root.section("parallel"));
  root.section("parallel").get("timeout_s", c.parallel_timeout_s);
  root.section("parallel").get("eval_timeout_s", c.parallel_eval_timeout_s);
  root.check_all_used();
  if (c.steps < 1) throw InputError("train.steps must be >= 1");
  if (c.batch_size < 1) throw InputError("train.batch_size must be >= 1");
  if (c.micro_batch_tokens < 1) throw InputError("train.micro_batch_tokens must be >= 1");
  if (c.epoch_size < 0) throw InputError("train.epoch_size must be >= 0");
  if (c.eval_loss_n < 0) throw InputError("eval.loss_n must be >= 0");
  if (!(c.parallel_timeout_s > 0)) throw InputError("parallel.timeout_s must be > 0");
  if (!(c.parallel_eval_timeout_s > 0)) throw InputError("parallel.eval_timeout_s must be > 0");
  if (c.moe_curriculum && c.epoch_size == 0) {
    throw InputError("train.moe_curriculum needs epochs: set train.epoch_size > 0");
  }
  if (c.sparse.enabled && (c.parallel.pp > 1 || c.parallel.ep > 1)) {
    throw InputError(
        "model.sparse_attention trains in one process; it cannot be combined with "
        "parallel.pp or parallel.ep");
  }
  return c;
}

namespace {

// Which train problem each position of the data stream holds: problem p itself without epochs;
// with them, epoch p / N visits problems 0 .. N-1 in its own order, a seeded shuffle, or with the
// MoE curriculum (from the second epoch) the curriculum order of the profiles observed so far.
class EpochOrder {
 public:
  EpochOrder(int epoch_size, bool curriculum, uint64_t seed)
      : n_(epoch_size), curriculum_(curriculum), seed_(seed), profiles_(epoch_size) {}

  uint64_t problem(uint64_t position) {
    if (n_ == 0) return position;
    const int64_t epoch = static_cast<int64_t>(position / n_);
    if (epoch != epoch_) start_epoch(epoch);
    return order_[position % n_];
  }
  // The complexity problem `index` (a value problem() returned) showed when trained.
  void observe(uint64_t index, RoutingProfile profile) {
    if (curriculum_) profiles_.at(index) = std::move(profile);
  }
  bool curriculum() const { return curriculum_; }

  // What a resumed run needs to continue the same order: the current epoch's order and, with the
  // curriculum, the observed profiles (the order of later epochs depends on them).
  nlohmann::json state() const {
    if (!curriculum_) return nullptr;
    return {{"epoch", epoch_}, {"order", order_}, {"profiles", profiles_}};
  }
  void restore(const nlohmann::json& state) {
    if (!curriculum_ || state.is_null()) return;
    epoch_ = state.at("epoch").get<int64_t>();
    order_ = state.at("order").get<std::vector<uint64_t>>();
    profiles_ = state.at("profiles").get<std::vector<RoutingProfile>>();
    if (order_.size() != static_cast<size_t>(n_) || profiles_.size() != static_cast<size_t>(n_)) {
      throw InputError("checkpoint's curriculum state is for another train.epoch_size");
    }
  }

 private:
  void start_epoch(int64_t epoch) {
    epoch_ = epoch;
    order_.resize(n_);
    if (curriculum_ && epoch > 0) {
      const std::vector<size_t> order = curriculum_order(profiles_);
      order_.assign(order.begin(), order.end());
      return;
    }
    std::iota(order_.begin(), order_.end(), uint64_t{0});
    std::mt19937_64 rng(seed_ * 1000003 + static_cast<uint64_t>(epoch));
    std::shuffle(order_.begin(), order_.end(), rng);
  }

  int n_;
  bool curriculum_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<uint64_t> order_;
  std::vector<RoutingProfile> profiles_;
};

// A batch of demonstrations: prompt ids, target ids and which target tokens are trained (a
// multi-turn demonstration's appended tool results are context only).
struct Demos {
  std::vector<std::vector<int32_t>> prompts, targets;
  std::vector<std::vector<uint8_t>> trained;
  int64_t trained_tokens = 0;

  // Adds `p`'s demonstration, the target cut to fit `max_len`.
  void add(const PromptEncoder& encoder, const tasks::Problem& p, int64_t max_len) {
    std::vector<int32_t> prompt = encoder.prompt_ids(p);
    if (static_cast<int64_t>(prompt.size()) >= max_len) {
      throw InputError("a prompt of " + std::to_string(prompt.size()) +
                       " tokens does not fit the model's max_position_embeddings " +
                       std::to_string(max_len) +
                       "; cap data.max_difficulty or use a model with more positions");
    }
    PromptEncoder::Target target = encoder.target(p);
    const int64_t room = std::max<int64_t>(0, max_len - static_cast<int64_t>(prompt.size()));
    if (static_cast<int64_t>(target.ids.size()) > room) {
      target.ids.resize(room);
      target.trained.resize(room);
    }
    for (uint8_t t : target.trained) trained_tokens += t;
    prompts.push_back(std::move(prompt));
    targets.push_back(std::move(target.ids));
    trained.push_back(std::move(target.trained));
  }

  int64_t length(size_t i) const {
    return static_cast<int64_t>(prompts[i].size() + targets[i].size());
  }

  // Demonstrations `indices` (offset by `first`) as one padded batch.
  template <class Index>
  SequenceBatch batch(const std::vector<Index>& indices, size_t first = 0) const {
    std::vector<std::vector<int32_t>> mp, mc;
    std::vector<const std::vector<uint8_t>*> mt;
    for (Index i : indices) {
      const size_t k = first + static_cast<size_t>(i);
      mp.push_back(prompts[k]);
      mc.push_back(targets[k]);
      mt.push_back(&trained[k]);
    }
    return make_sequence_batch(mp, mc, mt);
  }
};

// Demonstrations [first, end) packed into micro-batches of at most `budget` tokens, as rows of
// `demos`: the one batching rule of an SFT step, its data-parallel shares and the held-out loss.
std::vector<std::vector<size_t>> pack_rows(const Demos& demos, size_t first, size_t end,
                                           int budget) {
  std::vector<int64_t> lengths;
  for (size_t i = first; i < end; ++i) lengths.push_back(demos.length(i));
  std::vector<std::vector<size_t>> packs = pack_by_token_budget(lengths, budget);
  for (auto& pack : packs) {
    for (size_t& i : pack) i += first;
  }
  return packs;
}

// Calls fn(batch, rows) on each micro-batch of all demonstrations.
template <class Fn>
void for_each_micro_batch(const Demos& demos, int budget, Fn&& fn) {
  for (const auto& rows : pack_rows(demos, 0, demos.prompts.size(), budget)) {
    fn(demos.batch(rows), rows);
  }
}

// Data parallelism: fn on each micro-batch of this rank's share of the rows ([r * n / N,
// (r + 1) * n / N)). Under expert parallelism every layer's all-to-all is a collective, so each
// rank runs as many micro-batches as the rank with the most: the extra ones are a row whose
// completion mask is cleared (weight 0: they move tokens, not gradients), given no rows.
template <class Fn>
void train_rank_share(const Demos& demos, dist::ProcessGroup& world, int budget,
                      dist::ExpertDataParallel* experts, Fn&& fn) {
  const size_t n = demos.prompts.size(), ranks = static_cast<size_t>(world.world_size());
  const size_t rank = static_cast<size_t>(world.rank());
  const size_t first = rank * n / ranks;
  const std::vector<std::vector<size_t>> packs =
      pack_rows(demos, first, (rank + 1) * n / ranks, budget);
  // Agreed before any micro-batch runs: each one holds all-to-alls.
  const size_t count =
      experts
          ? static_cast<size_t>(experts->max_over_expert_group(static_cast<int64_t>(packs.size())))
          : packs.size();
  for (size_t k = 0; k < count; ++k) {
    if (k < packs.size()) {
      fn(demos.batch(packs[k]), packs[k]);
      continue;
    }
    SequenceBatch idle = demos.batch(std::vector<size_t>{first});
    idle.completion.zero_();
    idle.num_completion_tokens = 0;
    fn(idle, std::vector<size_t>{});
  }
}

// Resumes the newest checkpoint as rank 0 reads it: every rank gets its step, weights and
// optimizer state, so ranks on hosts without the run directory continue at the same step rather
// than start over (and train other batches). Returns the trainer state; nullopt: a fresh run.
// One process: `sparse_optimizer` gets the checkpoint's DSV predictor optimizer state.
std::optional<nlohmann::json> resume_from_rank0(dist::ProcessGroup* world, const fs::path& run_dir,
                                                model::CausalLM& model,
                                                torch::optim::Optimizer& optimizer,
                                                std::string* sparse_optimizer) {
  std::optional<ResumedCheckpoint> ck;
  if (!world || world->rank() == 0) ck = resume_training_checkpoint(run_dir, model, optimizer);
  if (!world) {  // DSV trains in one process only: its predictors' optimizer needs no broadcast
    if (ck) *sparse_optimizer = std::move(ck->sparse_optimizer);
    return ck ? std::optional(ck->state) : std::nullopt;
  }
  const nlohmann::json state =
      nlohmann::json::parse(world->broadcast_bytes_from_rank0(ck ? ck->state.dump() : "null"));
  if (state.is_null()) return std::nullopt;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params = model->parameters();
  world->broadcast_from_rank0(params);
  const std::string bytes =
      world->broadcast_bytes_from_rank0(world->rank() == 0 ? optimizer_bytes(optimizer) : "");
  if (world->rank() != 0) load_optimizer_bytes(optimizer, bytes);
  return state;
}

}  // namespace

double heldout_loss(model::CausalLM& model, const PromptEncoder& encoder, const tasks::Task& task,
                    uint64_t seed, int n, int micro_batch_tokens) {
  torch::NoGradGuard no_grad;
  const int64_t max_len = model->config().max_position_embeddings;
  Demos demos;
  for (int i = 0; i < n; ++i) {
    demos.add(encoder,
              tasks::draw_problem(task, seed, tasks::Split::kEval, static_cast<uint64_t>(i)),
              max_len);
  }
  double nll = 0;
  int64_t tokens = 0;
  for_each_micro_batch(
      demos, micro_batch_tokens, [&](const SequenceBatch& batch, const std::vector<size_t>&) {
        const auto out = model->score(batch.tokens, batch.valid);
        nll -= (out.logprobs * batch.completion.to(out.logprobs.device())).sum().item<double>();
        tokens += batch.num_completion_tokens;
      });
  return tokens > 0 ? nll / static_cast<double>(tokens) : 0.0;
}

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
  place_trained_model(model, c.run, c.dtype);  // before the optimizer sees the parameters

  // Several ranks (launch --nproc): every rank starts from the same weights (same seed) and builds
  // the same batches; rank 0 alone writes. With stages (parallel.pp), the pipeline trainer; else
  // data parallelism, each rank on its share of the rows, with expert parallelism (parallel.ep)
  // each rank keeping only its slice of the experts and `whole` gathering them to save and
  // evaluate.
  std::unique_ptr<dist::ProcessGroup> world;
  std::unique_ptr<PipelineTrainer> pipe;
  std::unique_ptr<dist::ExpertDataParallel> experts;
  std::optional<model::CausalLM> whole;
  const auto pg = dist::process_group_options_from_env(
      std::chrono::milliseconds(static_cast<int64_t>(c.parallel_timeout_s * 1000)));
  if (c.parallel.ep > 1 && !model->config().is_moe()) {
    throw InputError("parallel.ep needs an MoE model; " +
                     (c.init_from.empty() ? c.model_config : c.init_from) + " is dense");
  }
  if (pg.world_size > 1 || c.parallel.pp > 1 || c.parallel.ep > 1) {
    world = std::make_unique<dist::ProcessGroup>(pg);
    if (c.parallel.pp > 1) {
      pipe = std::make_unique<PipelineTrainer>(model, *world, c.parallel, c.micro_batch_tokens,
                                               flops_profile(model->config()));
    }
    if (c.moe_curriculum) {
      throw InputError("train.moe_curriculum orders one process's data; run it without launch");
    }
    if (c.batch_size < world->world_size()) {
      throw InputError("train.batch_size " + std::to_string(c.batch_size) +
                       " is smaller than the " + std::to_string(world->world_size()) + " ranks");
    }
  }
  const bool writer = !world || world->rank() == 0;
  // Rank 0 alone reads the run directory (another rank may be on a host without it); what it
  // refuses fails every rank with its message.
  std::string refused;
  if (writer) {
    try {
      if (c.run.resume) {
        check_checkpoint_parallelism(run_dir, c.parallel.ep);
      } else if (latest_checkpoint(run_dir)) {
        throw InputError(run_dir.string() +
                         " already has checkpoints; set run.resume=true to continue it or choose "
                         "another run.name");
      }
    } catch (const InputError& e) {
      refused = e.what();
    }
  }
  if (world) refused = world->broadcast_bytes_from_rank0(refused);
  if (!refused.empty()) throw InputError(refused);
  // An expert-parallel run resumes before the experts are sharded: rank 0 alone reads the newest
  // checkpoint (another rank may be on another host) into the whole model, every rank copies it
  // and keeps its experts, and each later loads the optimizer state of its expert rank.
  std::optional<ResumedCheckpoint> ep_resumed;
  nlohmann::json ep_state = {{"step", 0}};
  if (c.parallel.ep > 1) {
    experts = std::make_unique<dist::ExpertDataParallel>(*world, c.parallel.ep);
    experts->experts()->set_chunks(c.parallel.ep_chunks);
    if (writer) {
      whole.emplace(model::CausalLM(model->config(), c.run.seed));
      place_trained_model(*whole, c.run, c.dtype);
    }
    if (c.run.resume) {
      if (writer) {
        ep_resumed = resume_training_checkpoint(run_dir, model, ep_optimizer_files(c.parallel.ep));
        if (ep_resumed) ep_state = ep_resumed->state;
      }
      ep_state = nlohmann::json::parse(world->broadcast_bytes_from_rank0(ep_state.dump()));
      if (ep_state.at("step").get<int64_t>() > 0) {
        torch::NoGradGuard no_grad;
        std::vector<torch::Tensor> params = model->parameters();
        world->broadcast_from_rank0(params);
      }
    }
    model::shard_experts(*model, experts->experts());  // before the optimizer sees the parameters
  }
  // Under expert parallelism rank 0 alone evaluates, on the whole model gathered for it (every
  // rank calls saved_model() at the same points); otherwise every rank evaluates its own copy.
  const bool evaluates = !experts || writer;
  // The others wait for it in a group of their own, bounded by parallel.eval_timeout_s rather than
  // by the step's timeout.
  std::unique_ptr<dist::ProcessGroup> eval_wait;
  if (experts) {
    std::vector<int> all(static_cast<size_t>(world->world_size()));
    std::iota(all.begin(), all.end(), 0);
    eval_wait = world->subgroup(
        all, "eval-wait",
        std::chrono::milliseconds(static_cast<int64_t>(c.parallel_eval_timeout_s * 1000)));
  }
  const auto saved_model = [&]() -> model::CausalLM& {
    if (!experts) return model;
    experts->gather_model(*model, whole ? &**whole : nullptr);
    return whole ? *whole : model;
  };
  const PromptEncoder encoder = PromptEncoder::for_task(*tok, c.init_from, task);
  auto optimizer = make_adamw(*model, c.optim);
  const int64_t max_len = model->config().max_position_embeddings;

  if (c.moe_curriculum && !model->config().is_moe()) {
    throw InputError("train.moe_curriculum needs an MoE model; " +
                     (c.init_from.empty() ? c.model_config : c.init_from) + " is dense");
  }
  EpochOrder data(c.epoch_size, c.moe_curriculum, c.run.seed);

  // 2. Resume from the newest checkpoint of this run, if any.
  int64_t start_step = 0;
  double loss_value = 0, train_s = 0;
  std::optional<nlohmann::json> resumed;
  std::string sparse_optimizer;  // DSV's predictors' Adam state, when the checkpoint has it
  if (experts && ep_state.at("step").get<int64_t>() > 0) {
    load_optimizer_bytes(
        *optimizer, receive_expert_optimizer_state(
                        *world, writer ? ep_resumed->optimizer_states : std::vector<std::string>(),
                        c.parallel.ep, experts->layout().ep_rank()));
    resumed = ep_state;
  } else if (c.run.resume && !experts) {
    resumed = resume_from_rank0(world.get(), run_dir, model, *optimizer, &sparse_optimizer);
  }
  // DSV after the resume, which may have brought the predictors back.
  const std::unique_ptr<model::SparseAttentionTrainer> dsv = model::start_sparse_attention(
      model, c.sparse,
      resumed ? resumed->value("sparse_attention", nlohmann::json()) : nlohmann::json(),
      world ? world->world_size() : 1);
  resume_sparse_optimizer(sparse_optimizer, dsv.get());
  if (resumed) {
    const nlohmann::json& state = *resumed;
    start_step = state.at("step").get<int64_t>();
    loss_value = state.value("loss", 0.0);
    train_s = state.value("train_seconds", 0.0);
    if (state.contains("data_order")) data.restore(state["data_order"]);
    SLOG(kInfo) << "resuming " << run_dir.string() << " from step " << start_step;
  }
  if (writer) core::write_file_atomic(run_dir / "config.yaml", resolved_config_yaml);
  std::optional<telemetry::MetricsLog> metrics;
  if (writer) metrics.emplace(run_dir / "metrics.jsonl", start_step);

  // Under expert parallelism every rank takes part: the experts are gathered into rank 0's whole
  // model, and replica 0's ranks (whose states the other replicas equal) gather their optimizer
  // states for rank 0 to write one file per expert rank.
  auto checkpoint = [&](int64_t step) {
    const nlohmann::json state = {{"step", step},
                                  {"kind", "sft"},
                                  {"loss", loss_value},
                                  {"train_seconds", train_s},
                                  {"data_order", data.state()},
                                  {"parallel_ep", c.parallel.ep},
                                  {"sparse_attention", dsv ? dsv->state() : nlohmann::json()}};
    if (experts) {
      model::CausalLM& m = saved_model();
      if (experts->layout().dp_rank() != 0) return;
      const std::vector<std::string> states =
          experts->experts()->group().all_gather_bytes(optimizer_bytes(*optimizer));
      if (!writer) return;
      const std::vector<std::string> names = ep_optimizer_files(c.parallel.ep);
      std::map<std::string, std::string> files;
      for (size_t e = 0; e < names.size(); ++e) files[names[e]] = states[e];  // ranks 0 .. ep-1
      save_training_checkpoint(run_dir, step, m, tok->to_json(), files, state, c.checkpoint.keep);
      return;
    }
    if (!writer) return;
    save_training_checkpoint(run_dir, step, model, tok->to_json(), *optimizer, state,
                             c.checkpoint.keep, dsv.get());
  };

  // 3. Train. Batch k holds positions [k*B, (k+1)*B) of the data stream: the data position is a
  // function of the step, so a resumed run sees exactly the batches the uninterrupted one would.
  telemetry::Progress progress("sft " + c.run.name, c.steps);
  double last_eval_acc = -1;
  struct Batch {
    Demos demos;
    std::vector<uint64_t> problems;
  };
  const auto batch_of = [&](int64_t step) {
    Batch b;
    for (int i = 0; i < c.batch_size; ++i) {
      const uint64_t index = data.problem(static_cast<uint64_t>(step) * c.batch_size + i);
      b.demos.add(encoder,
                  draw_training_problem(task, c.run.seed, index, c.data.max_difficulty, nullptr),
                  max_len);
      b.problems.push_back(index);
    }
    return b;
  };
  // Pipeline stages: this replica's sequence lengths of a batch, what the planner splits.
  const auto replica_lengths = [&](const Demos& demos) {
    const auto [first, end] = pipe->replica_rows(static_cast<int64_t>(demos.prompts.size()));
    std::vector<int64_t> lengths;
    for (int64_t i = first; i < end; ++i) lengths.push_back(demos.length(static_cast<size_t>(i)));
    return lengths;
  };
  std::optional<Batch> next;  // with pipeline stages: built a step early, to plan it ahead
  for (int64_t step = start_step; step < c.steps; ++step) {
    const auto step_t0 = std::chrono::steady_clock::now();
    Batch batch = next ? std::move(*next) : batch_of(step);
    next.reset();
    if (pipe && step + 1 < c.steps) {  // the moe curriculum, which reorders data, is not here
      next = batch_of(step + 1);
      pipe->plan_ahead(replica_lengths(next->demos));
    }
    Demos& demos = batch.demos;
    const std::vector<uint64_t>& problems = batch.problems;
    // Token-mean over the whole batch: each micro-batch adds its summed loss divided by the
    // batch's total trained tokens, so the split does not change the update.
    const int64_t total_tokens = demos.trained_tokens;
    const double lr = lr_at(c.optim, step);
    set_lr(*optimizer, lr);
    clear_grads(*optimizer);
    loss_value = 0;
    model::MoeStats moe_stats;
    PipelineStepStats pipe_stats;
    if (pipe) {
      const double total = static_cast<double>(std::max<int64_t>(1, total_tokens));
      const int64_t first = pipe->replica_rows(static_cast<int64_t>(demos.prompts.size())).first;
      std::vector<SequenceBatch> micro;
      model::MoeStats router;  // this stage's layers
      // The router losses (means over a micro-batch) weighted by its share of the tokens.
      const auto router_loss = [&](int index, const model::MoeAuxLosses& aux) {
        const int64_t tokens = micro[static_cast<size_t>(index)].num_completion_tokens;
        router.add(aux, c.moe.aux_top1_only, tokens);
        return c.moe.loss(aux) * (static_cast<double>(tokens) / total);
      };
      pipe_stats = pipe->forward_backward(
          replica_lengths(demos),
          [&](const std::vector<int>& samples) {
            micro.push_back(demos.batch(samples, static_cast<size_t>(first)));
            return dist::StageBatch{micro.back().tokens, micro.back().valid, {}};
          },
          [&](int index, const model::ScoreOutput& out) {
            const torch::Tensor& mask = micro[static_cast<size_t>(index)].completion;
            torch::Tensor loss = -(out.logprobs * mask.to(out.logprobs.device())).sum() / total;
            return out.moe ? loss + router_loss(index, *out.moe) : loss;
          },
          {}, router_loss);
      loss_value = pipe_stats.loss;
      moe_stats = pipe->gather_router_stats(router);
    } else {
      if (dsv) dsv->begin_step();  // DSV: the predictors learn from the step's first micro-batch
      const auto train_micro = [&](const SequenceBatch& batch, const std::vector<size_t>& micro) {
        model::ScoreOptions options;
        const bool feeds = dsv && batch.num_completion_tokens > 0 && dsv->capture(options);
        auto out = model->score(batch.tokens, batch.valid, options);
        const double total = static_cast<double>(std::max<int64_t>(1, total_tokens));
        auto loss = -(out.logprobs * batch.completion.to(out.logprobs.device())).sum() / total;
        if (out.moe) {
          // The router losses are means over the micro-batch: weighted by its share of tokens.
          loss = loss + c.moe.loss(out.moe) * (batch.num_completion_tokens / total);
        }
        loss.backward();
        loss_value += loss.item<double>();
        if (feeds) dsv->observe_captured(batch.valid);
        if (out.moe && !micro.empty()) {
          moe_stats.add(*out.moe, c.moe.aux_top1_only, batch.num_completion_tokens);
          if (data.curriculum()) {
            const torch::Tensor rows =
                out.moe->two_expert_by_row.to(torch::kFloat64).cpu().contiguous();
            const int64_t L = rows.size(1);
            for (size_t b = 0; b < micro.size(); ++b) {
              const double* r = rows.data_ptr<double>() + static_cast<int64_t>(b) * L;
              data.observe(problems[micro[b]], RoutingProfile(r, r + L));
            }
          }
        }
      };
      if (world) {
        train_rank_share(demos, *world, c.micro_batch_tokens, experts.get(), train_micro);
        loss_value = world->all_reduce_sum(std::vector<double>{loss_value})[0];
        if (experts) {
          experts->all_reduce_gradients(model->named_parameters());
        } else {
          dist::all_reduce_gradients(*world, model->parameters());
        }
      } else {
        for_each_micro_batch(demos, c.micro_batch_tokens, train_micro);
      }
    }
    if (!std::isfinite(loss_value)) {
      auto last = latest_checkpoint(run_dir);
      throw RuntimeFailure(
          "sft loss is " + std::to_string(loss_value) + " at step " + std::to_string(step) +
          "; last good checkpoint: " + (last ? last->dir.string() : std::string("none")));
    }
    const double grad_norm = clip_grad_norm(*model, c.optim.grad_clip, experts.get());
    if (!std::isfinite(grad_norm)) {
      throw RuntimeFailure("sft gradient norm is not finite at step " + std::to_string(step));
    }
    optimizer->step();
    train_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - step_t0).count();

    const int64_t done = step + 1;
    nlohmann::json rec = {
        {"step", done},           {"loss", loss_value},     {"lr", lr},
        {"grad_norm", grad_norm}, {"tokens", total_tokens}, {"train_seconds", train_s}};
    if (!moe_stats.empty()) rec["moe"] = moe_stats.to_json(/*routing=*/false);
    if (dsv) rec["sparse_attention"] = dsv->metrics();
    if (pipe) rec["pipeline"] = pipe_stats.to_json();
    if (c.eval_every > 0 && done % c.eval_every == 0 && done < c.steps &&
        (c.eval.n > 0 || c.eval_loss_n > 0)) {  // saved_model() gathers the experts
      torch::NoGradGuard no_grad;
      model::CausalLM& m = saved_model();
      if (evaluates && c.eval.n > 0) {
        EvalResult er = evaluate(m, encoder, task, c.eval);
        last_eval_acc = er.accuracy;
        rec["eval"] = er.to_json();
      }
      if (evaluates && c.eval_loss_n > 0) {
        rec["eval_loss"] =
            heldout_loss(m, encoder, task, c.eval.seed, c.eval_loss_n, c.micro_batch_tokens);
      }
      if (eval_wait) eval_wait->barrier();
    }
    if (metrics && c.log_every > 0 && (done % c.log_every == 0 || done == c.steps)) {
      metrics->write(rec);
    }
    char status[64];
    std::snprintf(status, sizeof(status), "loss %.4f lr %.2e", loss_value, lr);
    std::string line = status;
    if (last_eval_acc >= 0) line += " eval acc " + std::to_string(last_eval_acc).substr(0, 5);
    progress.update(done, line);
    if (c.checkpoint.every > 0 && done % c.checkpoint.every == 0 && done < c.steps)
      checkpoint(done);
  }
  progress.finish();

  // 4. Final checkpoint (also as <run>/final for a stable path) and held-out evaluation.
  checkpoint(c.steps);
  // Under expert parallelism checkpoint() has just gathered the experts into `whole`.
  model::CausalLM& final_model = whole ? *whole : model;
  if (writer) {
    model::save_checkpoint(run_dir / "final", final_model, tok->to_json(),
                           model::checkpoint_side_files(c.init_from));
  }
  nlohmann::json result = {{"run_dir", run_dir.string()},
                           {"checkpoint", (run_dir / "final").string()},
                           {"steps", c.steps},
                           {"resumed_from_step", start_step},
                           {"final_loss", loss_value},
                           {"train_seconds", train_s}};
  if (dsv) result["sparse_attention"] = dsv->metrics();
  nlohmann::json final_rec = {{"step", c.steps}};
  if (evaluates && c.eval.n > 0) {
    torch::NoGradGuard no_grad;
    EvalResult er = evaluate(final_model, encoder, task, c.eval);
    result["eval"] = er.to_json();
    final_rec["final_eval"] = er.to_json();
  }
  if (evaluates && c.eval_loss_n > 0) {
    const double loss =
        heldout_loss(final_model, encoder, task, c.eval.seed, c.eval_loss_n, c.micro_batch_tokens);
    result["eval_loss"] = loss;
    final_rec["final_eval_loss"] = loss;
  }
  if (metrics && final_rec.size() > 1) metrics->write(final_rec);
  // The others wait for rank 0's final files (and, under expert parallelism, its evaluation).
  if (world) (eval_wait ? eval_wait : world)->barrier();
  return result;
}

}  // namespace streamrl::rl
