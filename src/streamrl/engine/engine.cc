#include "streamrl/engine/engine.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "streamrl/core/errors.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/engine/static_batch.h"
#include "streamrl/model/checkpoint.h"

namespace streamrl::engine {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// InputError naming `what` for a token id outside [0, vocab).
void check_token_ids(const std::vector<int32_t>& ids, int64_t vocab, const std::string& what) {
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab) {
      throw InputError(what + ": token id " + std::to_string(t) + " outside the vocabulary [0, " +
                       std::to_string(vocab) + ")");
    }
  }
}

int64_t reservation(const Request& r) {
  return static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_new_tokens;
}

// Reports every sample of a request that never started as aborted.
void abort_waiting(Request& r) {
  for (int i = 0; i < r.n; ++i) {
    Sample s;
    s.request_id = r.request_id;
    s.sample_index = i;
    s.prompt_ids = r.prompt_ids;
    s.finish_reason = FinishReason::kAborted;
    if (r.on_sample) r.on_sample(std::move(s));
  }
}

}  // namespace

AdmissionPolicy parse_admission_policy(const std::string& name) {
  if (name == "fifo") return AdmissionPolicy::kFifo;
  if (name == "lpt") return AdmissionPolicy::kLongestFirst;
  throw InputError("unknown admission policy '" + name + "' (known: fifo, lpt)");
}

struct Engine::Running {
  Sample sample;
  SamplingParams params;
  std::shared_ptr<SampleCallback> on_sample;  // shared by the request's samples
  std::shared_ptr<TokenCallback> on_token;    // shared too; may hold an empty function
  int slot = 0;
  int64_t reserved = 0;
  uint64_t stream = 0;
  double decode_start = 0;                // steady seconds when the first token was sampled
  bool hold = false;                      // Request::hold_kv
  std::shared_ptr<TurnCallback> on_turn;  // Request::on_turn, shared; may hold an empty function
  std::shared_ptr<TurnProgress> on_turn_token;   // Request::on_turn_token, shared; may be empty
  std::shared_ptr<TurnProgress> on_rollout_end;  // Request::on_rollout_end, likewise
  int turn_cap = 0;                              // the request's max_new_tokens, every turn's cap
  size_t turn_start = 0;  // output tokens before this turn (params.max_new_tokens counts after)
  // A continuation admitted this step: these tokens are fed from position `feed_from`.
  std::vector<int32_t> feed;
  int64_t feed_from = 0;
};

void Engine::deliver(std::unique_ptr<Running> run) {
  release(*run);
  if (*run->on_turn && *run->on_rollout_end) (*run->on_rollout_end)(run->sample, run->turn_start);
  if (*run->on_sample) (*run->on_sample)(std::move(run->sample));
}

template <class Pred>
void Engine::drop_held(Pred&& pred) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (!pred(it->first, *it->second)) {
      ++it;
      continue;
    }
    std::unique_ptr<Running> run = std::move(it->second);
    it = held_.erase(it);
    if (run->hold) {
      release(*run);  // the caller had every turn already
    } else {
      run->sample.finish_reason = FinishReason::kAborted;
      deliver(std::move(run));
    }
  }
}

Engine::Engine(model::CausalLM model, const EngineConfig& config, int64_t weight_version)
    : model_(std::move(model)),
      config_(config),
      cache_(model_->config(), config.max_batch_size,
             std::min<int64_t>(config.max_seq_len, model_->config().max_position_embeddings),
             model_->options()),
      weight_version_(weight_version) {
  if (config_.max_batch_size < 1 || config_.max_seq_len < 2) {
    throw InputError("engine needs max_batch_size >= 1 and max_seq_len >= 2");
  }
  config_.max_seq_len = static_cast<int>(cache_.max_tokens());
  if (config_.kv_token_budget <= 0) {
    config_.kv_token_budget = static_cast<int64_t>(config_.max_batch_size) * config_.max_seq_len;
  }
  for (int s = config_.max_batch_size - 1; s >= 0; --s) free_slots_.push_back(s);
  stats_.weight_version = weight_version;
}

Engine::~Engine() = default;

void Engine::add_request(Request request) {
  const std::string id = "request " + std::to_string(request.request_id);
  if (request.prompt_ids.empty()) throw InputError(id + ": empty prompt");
  if (request.n < 1) throw InputError(id + ": n must be >= 1");
  if (request.params.max_new_tokens < 1) throw InputError(id + ": max_new_tokens must be >= 1");
  if (request.hold_kv && request.on_turn) {
    throw InputError(id +
                     ": hold_kv and on_turn are exclusive (the caller or the engine runs the "
                     "turns)");
  }
  if (request.n > config_.max_batch_size) {
    throw InputError(id + ": n = " + std::to_string(request.n) + " exceeds max_batch_size " +
                     std::to_string(config_.max_batch_size));
  }
  if (reservation(request) > config_.max_seq_len) {
    throw InputError(id + ": prompt (" + std::to_string(request.prompt_ids.size()) +
                     " tokens) + max_new_tokens (" + std::to_string(request.params.max_new_tokens) +
                     ") exceeds max_seq_len " + std::to_string(config_.max_seq_len));
  }
  if (reservation(request) * request.n > config_.kv_token_budget) {
    throw InputError(id + ": needs " + std::to_string(reservation(request) * request.n) +
                     " KV tokens, more than the budget " + std::to_string(config_.kv_token_budget));
  }
  check_token_ids(request.prompt_ids, model_->config().vocab_size, id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.emplace_back(std::move(request), now_s());
  }
  work_cv_.notify_all();
}

void Engine::abort(int64_t request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborts_.push_back(request_id);
  }
  work_cv_.notify_all();
}

void Engine::update_weights(int64_t version, std::map<std::string, torch::Tensor> weights) {
  // Validate now, on the caller's thread, so a bad update fails its sender rather than the engine.
  model::check_weights(model_, weights, "update_weights v" + std::to_string(version));
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_weights_.emplace(version, std::move(weights));
  }
  work_cv_.notify_all();
}

void Engine::stop_sample(int64_t request_id, int32_t sample_index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stops_.emplace_back(request_id, sample_index);
  }
  work_cv_.notify_all();
}

void Engine::continue_sample(Continuation continuation) {
  check_token_ids(continuation.appended_ids, model_->config().vocab_size,
                  "continuation of request " + std::to_string(continuation.request_id));
  {
    std::lock_guard<std::mutex> lock(mu_);
    continuations_.push_back(std::move(continuation));
  }
  work_cv_.notify_all();
}

void Engine::release_sample(int64_t request_id, int32_t sample_index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    releases_.emplace_back(request_id, sample_index);
  }
  work_cv_.notify_all();
}

int64_t Engine::held_samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_count_;
}

void Engine::set_weight_version(int64_t version) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_version_ = version;
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return work_cv_.wait_for(lock, timeout, [&] {
    // Requests already waiting are not work by themselves: step() admits every one that fits, so
    // those left wait on something queued here (a release, an abort) or on running samples.
    return !inbox_.empty() || !aborts_.empty() || !stops_.empty() || !continuations_.empty() ||
           !turn_results_.empty() || !releases_.empty() || pending_weights_.has_value() ||
           stats_.running_samples > 0;
  });
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && continuations_.empty() && turns_out_ == 0 &&
         stats_.waiting_requests == 0 && stats_.running_samples == 0;
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  EngineStats s = stats_;
  s.waiting_requests += static_cast<int64_t>(inbox_.size());
  return s;
}

void Engine::apply_pending() {
  std::vector<std::pair<Request, double>> inbox;
  std::vector<int64_t> aborts;
  std::vector<std::pair<int64_t, int32_t>> stops, releases;
  std::vector<Continuation> continuations;
  std::optional<std::pair<int64_t, std::map<std::string, torch::Tensor>>> weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
    stops.swap(stops_);
    releases.swap(releases_);
    continuations.swap(continuations_);
    weights.swap(pending_weights_);
    if (pending_version_) weight_version_ = *std::exchange(pending_version_, std::nullopt);
  }
  for (auto& r : inbox) waiting_.push_back(std::move(r));
  for (auto& c : continuations) continuing_.push_back(std::move(c));
  apply_turn_results();
  for (const auto& key : releases) {
    drop_held([&](const auto& k, const Running& run) { return k == key && run.hold; });
  }
  for (int64_t id : aborts) {
    // A held sample of the request is released; its continuations are dropped.
    drop_held([id](const auto& k, const Running&) { return k.first == id; });
    std::erase_if(continuing_, [id](const Continuation& c) { return c.request_id == id; });
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->first.request_id != id) {
        ++it;
        continue;
      }
      abort_waiting(it->first);
      it = waiting_.erase(it);
    }
    for (size_t i = 0; i < running_.size();) {
      if (running_[i]->sample.request_id == id) {
        finish(i, FinishReason::kAborted);
      } else {
        ++i;
      }
    }
  }
  for (const auto& [id, index] : stops) {
    for (size_t i = 0; i < running_.size(); ++i) {
      if (running_[i]->sample.request_id == id && running_[i]->sample.sample_index == index) {
        finish(i, FinishReason::kStop);
        break;
      }
    }
  }
  if (weights) {
    if (last_good_.empty()) {
      // The weights in place before the first update, should that one fail half-copied.
      torch::NoGradGuard no_grad;
      for (auto& [name, t] : model_->named_weights()) last_good_[name] = t.detach().clone();
      last_good_version_ = weight_version_;
    }
    model::load_weights(model_, weights->second,
                        "update_weights v" + std::to_string(weights->first));
    weight_version_ = weights->first;
    last_good_ = std::move(weights->second);
    last_good_version_ = weights->first;
  }
}

void Engine::recover() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_weights_.reset();
  }
  while (!running_.empty()) finish(running_.size() - 1, FinishReason::kAborted);
  for (auto& [r, arrival] : waiting_) abort_waiting(r);
  waiting_.clear();
  drop_held([](const auto&, const Running&) { return true; });
  continuing_.clear();
  if (!last_good_.empty()) {
    model::load_weights(model_, last_good_, "recovery (last good weights)");
    weight_version_ = last_good_version_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.waiting_requests = 0;
  stats_.running_samples = 0;
  stats_.weight_version = weight_version_;
  held_count_ = 0;
}

size_t Engine::admit() {
  // Pick requests in policy order while slots and the token budget allow. Admission stops at the
  // first request that does not fit, so the order is never violated (no starvation).
  const size_t first_new = running_.size();
  const double now = now_s();
  while (!waiting_.empty()) {
    auto pick = waiting_.begin();
    if (config_.admission == AdmissionPolicy::kLongestFirst) {
      pick = std::max_element(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
        return a.first.length_estimate < b.first.length_estimate;
      });
    }
    Request& r = pick->first;
    const int64_t need = reservation(r) * r.n;
    if (static_cast<int>(free_slots_.size()) < r.n ||
        reserved_tokens_ + need > config_.kv_token_budget) {
      break;
    }
    reserved_tokens_ += need;
    auto cb = std::make_shared<SampleCallback>(std::move(r.on_sample));
    auto token_cb = std::make_shared<TokenCallback>(std::move(r.on_token));
    auto turn_cb = std::make_shared<TurnCallback>(std::move(r.on_turn));
    auto progress_cb = std::make_shared<TurnProgress>(std::move(r.on_turn_token));
    auto end_cb = std::make_shared<TurnProgress>(std::move(r.on_rollout_end));
    for (int k = 0; k < r.n; ++k) {
      auto run = std::make_unique<Running>();
      run->sample.request_id = r.request_id;
      run->sample.sample_index = k;
      run->sample.prompt_ids = r.prompt_ids;
      run->sample.weight_version = weight_version_;
      run->sample.queue_s = now - pick->second;
      run->params = r.params;
      run->on_sample = cb;
      run->on_token = token_cb;
      run->slot = free_slots_.back();
      free_slots_.pop_back();
      run->reserved = reservation(r);
      run->hold = r.hold_kv;
      run->on_turn = turn_cb;
      run->on_turn_token = progress_cb;
      run->on_rollout_end = end_cb;
      run->turn_cap = r.params.max_new_tokens;
      run->stream = sample_stream(static_cast<int64_t>(r.random_key.value_or(r.request_id)), k);
      running_.push_back(std::move(run));
    }
    waiting_.erase(pick);
  }
  return first_new;
}

void Engine::admit_continuations() {
  while (!continuing_.empty()) {
    Continuation& c = continuing_.front();
    auto it = held_.find({c.request_id, c.sample_index});
    if (it == held_.end()) {  // released or aborted meanwhile, or never held
      continuing_.pop_front();
      continue;
    }
    Running& r = *it->second;
    const int64_t length =
        static_cast<int64_t>(r.sample.prompt_ids.size() + r.sample.output_ids.size());
    const int64_t need = length + static_cast<int64_t>(c.appended_ids.size()) + c.max_new_tokens;
    if (c.max_new_tokens < 1 || need > config_.max_seq_len) {
      // Can never fit: the turn ends at once, nothing sampled; a caller's sample stays held, an
      // engine-run rollout ends there.
      continuing_.pop_front();
      if (!r.hold) {
        std::unique_ptr<Running> run = std::move(it->second);
        held_.erase(it);
        run->sample.finish_reason = FinishReason::kLength;
        deliver(std::move(run));
        continue;
      }
      Sample copy = r.sample;
      copy.finish_reason = FinishReason::kLength;
      if (*r.on_sample) (*r.on_sample)(std::move(copy));
      continue;
    }
    // The cache's slots are allocated up front and the budget only paces admission: with nothing
    // running, a continuation goes ahead over budget rather than wait on held samples forever.
    if (reserved_tokens_ - r.reserved + need > config_.kv_token_budget && !running_.empty()) break;
    std::unique_ptr<Running> run = std::move(it->second);
    held_.erase(it);
    reserved_tokens_ += need - run->reserved;
    run->reserved = need;
    // The last sampled token was never fed; it goes first, then the appended ones.
    run->feed = {run->sample.output_ids.back()};
    run->feed.insert(run->feed.end(), c.appended_ids.begin(), c.appended_ids.end());
    run->feed_from = length - 1;
    if (run->sample.sampled_mask.empty())
      run->sample.sampled_mask.assign(length - run->sample.prompt_ids.size(), 1);
    for (int32_t t : c.appended_ids) {
      run->sample.output_ids.push_back(t);
      run->sample.logprobs.push_back(0.0f);
      run->sample.sampled_mask.push_back(0);
      if (run->params.top_logprobs > 0) run->sample.top_logprobs.emplace_back();
    }
    run->turn_start = run->sample.output_ids.size();
    run->params.max_new_tokens = c.max_new_tokens;
    run->sample.turns += 1;
    run->sample.finish_reason = FinishReason::kLength;
    running_.push_back(std::move(run));
    continuing_.pop_front();
  }
}

void Engine::release(const Running& run) {
  free_slots_.push_back(run.slot);
  reserved_tokens_ -= run.reserved;
}

void Engine::forward_and_sample(size_t first_new) {
  // One packed forward per step, no padding: a row per token. Running samples contribute their
  // last sampled token; new requests contribute every prompt token (once per request with prefix
  // sharing, once per sample without). Keys and values are written before attention in each
  // layer, so prompt tokens of one sequence attend to each other within this same forward.
  std::vector<int64_t> tokens, positions, slots;
  std::vector<int64_t> logit_row(running_.size());  // row whose logits sample each running entry
  for (size_t i = 0; i < first_new; ++i) {
    const Sample& s = running_[i]->sample;
    logit_row[i] = static_cast<int64_t>(tokens.size());
    tokens.push_back(s.output_ids.back());
    positions.push_back(static_cast<int64_t>(s.prompt_ids.size() + s.output_ids.size() - 1));
    slots.push_back(running_[i]->slot);
  }
  std::vector<std::pair<size_t, size_t>> shared;  // (owner, follower) running indices
  for (size_t i = first_new; i < running_.size(); ++i) {
    const Running& r = *running_[i];
    if (!r.feed.empty()) {  // a continuation: only its new tokens
      for (size_t t = 0; t < r.feed.size(); ++t) {
        tokens.push_back(r.feed[t]);
        positions.push_back(r.feed_from + static_cast<int64_t>(t));
        slots.push_back(r.slot);
      }
      logit_row[i] = static_cast<int64_t>(tokens.size()) - 1;
      continue;
    }
    const bool owner = r.sample.sample_index == 0 || !config_.prefix_sharing;
    if (!owner) {
      const size_t o = i - r.sample.sample_index;
      shared.emplace_back(o, i);
      logit_row[i] = logit_row[o];
      continue;
    }
    for (size_t t = 0; t < r.sample.prompt_ids.size(); ++t) {
      tokens.push_back(r.sample.prompt_ids[t]);
      positions.push_back(static_cast<int64_t>(t));
      slots.push_back(r.slot);
    }
    logit_row[i] = static_cast<int64_t>(tokens.size()) - 1;
  }
  std::vector<int64_t> fed(running_.size(), 1);  // tokens each entry fed (routing records)
  for (size_t i = first_new; i < running_.size(); ++i) {
    Running& r = *running_[i];
    fed[i] = r.feed.empty() ? static_cast<int64_t>(r.sample.prompt_ids.size())
                            : static_cast<int64_t>(r.feed.size());
    r.feed.clear();
  }
  if (tokens.empty()) return;
  const double t0 = now_s();
  const int64_t N = static_cast<int64_t>(tokens.size());
  std::vector<torch::Tensor> routing;
  const bool record = config_.record_routing && model_->config().is_moe();
  torch::Tensor logits = model_->forward_cached(
      torch::tensor(tokens, torch::kLong).view({N, 1}),
      torch::tensor(positions, torch::kLong).view({N, 1}), torch::ones({N, 1}, torch::kBool),
      torch::tensor(slots, torch::kLong), cache_, record ? &routing : nullptr);
  if (record) record_routing(routing, logit_row, fed);
  for (const auto& [o, f] : shared) {
    cache_.copy_prefix(running_[o]->slot, running_[f]->slot, running_[o]->sample.prompt_ids.size());
  }

  std::vector<const SamplingParams*> params;
  std::vector<double> u;
  for (const auto& r : running_) {
    params.push_back(&r->params);
    u.push_back(counter_uniform(r->params.seed, r->stream, r->sample.output_ids.size()));
  }
  SampledTokens st = sample_tokens(
      logits.index_select(0, torch::tensor(logit_row, torch::kLong).to(logits.device())), params,
      u);
  // The step's one device-to-host copy: ids (exact in double below 2^53) beside their log-probs.
  const torch::Tensor host =
      torch::stack({st.tokens.to(torch::kDouble), st.logprobs.to(torch::kDouble)}).cpu();
  if (st.top_ids.defined()) {
    st.top_ids = st.top_ids.cpu();
    st.top_logprobs = st.top_logprobs.to(torch::kFloat32).cpu();
  }
  const double t1 = now_s();
  const torch::Tensor host_ids = host[0], host_lps = host[1];
  auto tok = host_ids.accessor<double, 1>();
  auto lp = host_lps.accessor<double, 1>();
  for (size_t i = 0; i < running_.size(); ++i) {
    Running& r = *running_[i];
    if (i >= first_new) {
      r.sample.prefill_s = t1 - t0;
      r.decode_start = t1;
    }
    r.sample.output_ids.push_back(static_cast<int32_t>(tok[i]));
    r.sample.logprobs.push_back(static_cast<float>(lp[i]));
    if (!r.sample.sampled_mask.empty()) r.sample.sampled_mask.push_back(1);
    if (r.params.top_logprobs > 0) {
      auto ids = st.top_ids.accessor<int64_t, 2>();
      auto lps = st.top_logprobs.accessor<float, 2>();
      std::vector<TokenLogprob> top;
      for (int64_t k = 0; k < std::min<int64_t>(r.params.top_logprobs, ids.size(1)); ++k) {
        top.push_back({static_cast<int32_t>(ids[i][k]), lps[i][k]});
      }
      r.sample.top_logprobs.push_back(std::move(top));
    }
    if (*r.on_token) {
      const auto* top = r.params.top_logprobs > 0 ? &r.sample.top_logprobs.back() : nullptr;
      (*r.on_token)(
          {r.sample.sample_index, r.sample.output_ids.back(), r.sample.logprobs.back(), top});
    }
    if (*r.on_turn && *r.on_turn_token) (*r.on_turn_token)(r.sample, r.turn_start);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.generated_tokens += static_cast<int64_t>(running_.size());
}

void Engine::record_routing(const std::vector<torch::Tensor>& routing,
                            const std::vector<int64_t>& logit_row,
                            const std::vector<int64_t>& fed) {
  const torch::Tensor all =
      torch::stack(routing, 1).to(torch::kShort).cpu().contiguous();  // [N, L, K]
  const int64_t L = all.size(1), K = all.size(2);
  const int16_t* ids = all.data_ptr<int16_t>();
  for (size_t i = 0; i < running_.size(); ++i) {
    Sample& s = running_[i]->sample;
    s.routing_layers = static_cast<int32_t>(L), s.routing_k = static_cast<int32_t>(K);
    // A decoding sample fed one token (its row); a new one its prompt, a continuation its new
    // tokens, ending at its row (a follower shares its owner's rows).
    const int64_t n = fed[i];
    const int16_t* from = ids + (logit_row[i] - n + 1) * L * K;
    s.routed_experts.insert(s.routed_experts.end(), from, from + n * L * K);
  }
}

void Engine::finish(size_t index, FinishReason reason) {
  std::unique_ptr<Running> run = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  run->sample.finish_reason = reason;
  if (run->decode_start > 0) run->sample.decode_s = now_s() - run->decode_start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.finished_samples += 1;
  }
  if (run->hold && reason != FinishReason::kAborted) {
    Sample copy = run->sample;
    auto callback = run->on_sample;
    held_[{copy.request_id, copy.sample_index}] = std::move(run);
    if (*callback) (*callback)(std::move(copy));
    return;
  }
  if (reason != FinishReason::kAborted && *run->on_turn) {
    // Deciding is quick and stays here: a rollout that ends leaves now, not a thread hop later.
    TurnWork work;
    std::exception_ptr error;
    try {
      work = (*run->on_turn)(run->sample, run->turn_start);
    } catch (...) {
      error = std::current_exception();
    }
    if (work || error) {
      start_turn(std::move(run), std::move(work), error);
      return;
    }
  }
  deliver(std::move(run));
}

void Engine::start_turn(std::unique_ptr<Running> run, TurnWork work, std::exception_ptr error) {
  // The sample keeps its slot and KV cache while its tools run.
  const std::pair<int64_t, int32_t> key{run->sample.request_id, run->sample.sample_index};
  Continuation next{key.first, key.second, {}, run->turn_cap};
  held_[key] = std::move(run);
  {
    std::lock_guard<std::mutex> lock(mu_);
    turns_out_ += 1;
    if (error) {  // on_turn threw: the outcome is known now
      turn_results_.emplace_back(std::move(next), error);
      return;
    }
  }
  turn_workers_.submit([this, next = std::move(next), work = std::move(work),
                        vocab = model_->config().vocab_size]() mutable {
    std::exception_ptr error;
    try {
      next.appended_ids = work();
      check_token_ids(next.appended_ids, vocab,
                      "turn of request " + std::to_string(next.request_id));
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      turn_results_.emplace_back(std::move(next), error);
    }
    work_cv_.notify_all();
  });
}

void Engine::apply_turn_results() {
  std::vector<std::pair<Continuation, std::exception_ptr>> results;
  {
    std::lock_guard<std::mutex> lock(mu_);
    results.swap(turn_results_);
    turns_out_ -= static_cast<int64_t>(results.size());
  }
  std::exception_ptr first_error;
  for (auto& [next, error] : results) {
    if (!error && !next.appended_ids.empty()) {
      continuing_.push_back(std::move(next));
      continue;
    }
    // The rollout ends here (unless an abort or recover() delivered it meanwhile).
    auto it = held_.find({next.request_id, next.sample_index});
    if (it == held_.end() || it->second->hold) continue;
    std::unique_ptr<Running> run = std::move(it->second);
    held_.erase(it);
    if (error) run->sample.finish_reason = FinishReason::kAborted;
    deliver(std::move(run));
    if (error && !first_error) first_error = error;
  }
  if (first_error) std::rethrow_exception(first_error);
}

bool Engine::step() {
  torch::NoGradGuard no_grad;
  const double t0 = now_s();
  apply_pending();
  if (waiting_.empty() && running_.empty() && continuing_.empty()) {
    // Aborts and weight swaps on an idle engine still show in the stats.
    std::lock_guard<std::mutex> lock(mu_);
    stats_.waiting_requests = 0;
    stats_.running_samples = 0;
    stats_.weight_version = weight_version_;
    held_count_ = static_cast<int64_t>(held_.size());
    return false;
  }
  const auto span_begin = std::chrono::steady_clock::now();
  const size_t first_new = admit();
  admit_continuations();  // after the new requests: prefix sharing indexes those from first_new
  const size_t admitted = running_.size() - first_new;
  const size_t batch = running_.size();
  if (running_.empty()) {
    // Requests wait on slots or budget that held samples keep: no progress until a release.
    std::lock_guard<std::mutex> lock(mu_);
    stats_.waiting_requests = static_cast<int64_t>(waiting_.size() + continuing_.size());
    stats_.running_samples = 0;
    held_count_ = static_cast<int64_t>(held_.size());
    return false;
  }
  forward_and_sample(first_new);
  if (config_.trace) {
    config_.trace->span(config_.trace_track, admitted > 0 ? "prefill+decode" : "decode", span_begin,
                        std::chrono::steady_clock::now(),
                        {{"batch", batch}, {"admitted", admitted}});
  }
  // Finished samples leave at once (stop token or length), in completion order.
  for (size_t i = 0; i < running_.size();) {
    const Running& r = *running_[i];
    const int32_t last = r.sample.output_ids.back();
    const auto& stop = r.params.stop_token_ids;
    if (std::find(stop.begin(), stop.end(), last) != stop.end()) {
      finish(i, FinishReason::kStop);
    } else if (static_cast<int>(r.sample.output_ids.size() - r.turn_start) >=
               r.params.max_new_tokens) {
      finish(i, FinishReason::kLength);
    } else {
      ++i;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.steps += 1;
  stats_.busy_seconds += now_s() - t0;
  stats_.waiting_requests = static_cast<int64_t>(waiting_.size() + continuing_.size());
  stats_.running_samples = static_cast<int64_t>(running_.size());
  stats_.weight_version = weight_version_;
  held_count_ = static_cast<int64_t>(held_.size());
  return true;
}

void Engine::run_until_idle() {
  for (;;) {
    while (step()) {
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (turns_out_ == 0) return;
    }
    wait_for_work(std::chrono::milliseconds(50));  // a rollout's tools are still running
  }
}

}  // namespace streamrl::engine
