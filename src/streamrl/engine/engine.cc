#include "streamrl/engine/engine.h"

#include <algorithm>
#include <chrono>

#include "streamrl/core/errors.h"
#include "streamrl/engine/sampler.h"
#include "streamrl/engine/static_batch.h"
#include "streamrl/model/checkpoint.h"

namespace streamrl::engine {
namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int64_t reservation(const Request& r) {
  return static_cast<int64_t>(r.prompt_ids.size()) + r.params.max_new_tokens;
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
  int slot = 0;
  int64_t reserved = 0;
  uint64_t stream = 0;
  double decode_start = 0;  // steady seconds when the first token was sampled
};

Engine::Engine(model::CausalLM model, const EngineConfig& config, int64_t weight_version)
    : model_(std::move(model)),
      config_(config),
      cache_(model_->config(), config.max_batch_size,
             std::min<int64_t>(config.max_seq_len, model_->config().max_position_embeddings)),
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
  const int64_t vocab = model_->config().vocab_size;
  for (int32_t t : request.prompt_ids) {
    if (t < 0 || t >= vocab) {
      throw InputError(id + ": token id " + std::to_string(t) + " outside the vocabulary [0, " +
                       std::to_string(vocab) + ")");
    }
  }
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
  std::map<std::string, torch::Tensor> expected;
  for (auto& [name, t] : model_->named_weights()) expected[name] = t;
  for (const auto& [name, t] : expected) {
    auto it = weights.find(name);
    if (it == weights.end()) throw InputError("update_weights: tensor '" + name + "' is missing");
    if (it->second.sizes() != t.sizes()) {
      throw InputError("update_weights: tensor '" + name + "' has the wrong shape");
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_weights_.emplace(version, std::move(weights));
  }
  work_cv_.notify_all();
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return work_cv_.wait_for(lock, timeout, [&] {
    return !inbox_.empty() || !aborts_.empty() || pending_weights_.has_value() ||
           stats_.waiting_requests > 0 || stats_.running_samples > 0;
  });
}

bool Engine::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inbox_.empty() && stats_.waiting_requests == 0 && stats_.running_samples == 0;
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
  std::optional<std::pair<int64_t, std::map<std::string, torch::Tensor>>> weights;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox.swap(inbox_);
    aborts.swap(aborts_);
    weights.swap(pending_weights_);
  }
  for (auto& r : inbox) waiting_.push_back(std::move(r));
  for (int64_t id : aborts) {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (it->first.request_id != id) {
        ++it;
        continue;
      }
      for (int i = 0; i < it->first.n; ++i) {
        Sample s;
        s.request_id = id;
        s.sample_index = i;
        s.prompt_ids = it->first.prompt_ids;
        s.finish_reason = FinishReason::kAborted;
        if (it->first.on_sample) it->first.on_sample(std::move(s));
      }
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
  if (weights) {
    model::load_weights(model_, weights->second,
                        "update_weights v" + std::to_string(weights->first));
    weight_version_ = weights->first;
  }
}

void Engine::admit_and_prefill() {
  // 1. Pick requests in policy order while slots and the token budget allow. Admission stops at
  // the first request that does not fit, so the order is never violated (no starvation).
  std::vector<std::pair<Request, double>> admitted;
  int free_slots = static_cast<int>(free_slots_.size());
  while (!waiting_.empty()) {
    auto pick = waiting_.begin();
    if (config_.admission == AdmissionPolicy::kLongestFirst) {
      pick = std::max_element(waiting_.begin(), waiting_.end(), [](const auto& a, const auto& b) {
        return a.first.length_estimate < b.first.length_estimate;
      });
    }
    const int64_t need = reservation(pick->first) * pick->first.n;
    if (free_slots < pick->first.n || reserved_tokens_ + need > config_.kv_token_budget) break;
    free_slots -= pick->first.n;
    reserved_tokens_ += need;
    admitted.push_back(std::move(*pick));
    waiting_.erase(pick);
  }
  if (admitted.empty()) return;

  // 2. Prefill each prompt once into its first sample's slot (right-padded batch); without prefix
  // sharing every sample's slot is prefilled on its own row.
  const double t0 = now_s();
  const int64_t R = static_cast<int64_t>(admitted.size());
  std::vector<std::vector<int>> slots_of(R);
  std::vector<int64_t> prefill_req, prefill_slot;  // one entry per prefill row
  int64_t max_prompt = 1;
  for (int64_t i = 0; i < R; ++i) {
    const Request& r = admitted[i].first;
    max_prompt = std::max<int64_t>(max_prompt, r.prompt_ids.size());
    for (int k = 0; k < r.n; ++k) {
      slots_of[i].push_back(free_slots_.back());
      free_slots_.pop_back();
      if (k == 0 || !config_.prefix_sharing) {
        prefill_req.push_back(i);
        prefill_slot.push_back(slots_of[i][k]);
      }
    }
  }
  const int64_t P = static_cast<int64_t>(prefill_req.size());
  auto tokens = torch::zeros({P, max_prompt}, torch::kLong);
  auto valid = torch::zeros({P, max_prompt}, torch::kBool);
  auto positions = torch::arange(max_prompt, torch::kLong).repeat({P, 1});
  auto tok_a = tokens.accessor<int64_t, 2>();
  auto valid_a = valid.accessor<bool, 2>();
  for (int64_t p = 0; p < P; ++p) {
    const auto& ids = admitted[prefill_req[p]].first.prompt_ids;
    for (size_t t = 0; t < ids.size(); ++t) tok_a[p][t] = ids[t], valid_a[p][t] = true;
  }
  torch::Tensor logits = model_->forward_cached(tokens, positions, valid,
                                                torch::tensor(prefill_slot, torch::kLong), cache_);

  // 3. Share the prefix with the other samples and sample every new sample's first token.
  std::vector<int64_t> rows;  // prefill row whose logits each new sample uses
  const size_t first_new = running_.size();
  int64_t row = 0;
  for (int64_t i = 0; i < R; ++i) {
    Request& r = admitted[i].first;
    auto cb = std::make_shared<SampleCallback>(std::move(r.on_sample));
    const int64_t shared_row = row;
    for (int k = 0; k < r.n; ++k) {
      if (config_.prefix_sharing) {
        cache_.copy_prefix(slots_of[i][0], slots_of[i][k], r.prompt_ids.size());
        rows.push_back(shared_row);
      } else {
        rows.push_back(shared_row + k);
      }
      auto run = std::make_unique<Running>();
      run->sample.request_id = r.request_id;
      run->sample.sample_index = k;
      run->sample.prompt_ids = r.prompt_ids;
      run->sample.weight_version = weight_version_;
      run->sample.queue_s = t0 - admitted[i].second;
      run->params = r.params;
      run->on_sample = cb;
      run->slot = slots_of[i][k];
      run->reserved = reservation(r);
      run->stream = sample_stream(r.request_id, k);
      running_.push_back(std::move(run));
    }
    row += config_.prefix_sharing ? 1 : r.n;
  }
  torch::Tensor row_logits = logits.index_select(0, torch::tensor(rows, torch::kLong));
  std::vector<const SamplingParams*> params;
  std::vector<double> u;
  for (size_t j = first_new; j < running_.size(); ++j) {
    params.push_back(&running_[j]->params);
    u.push_back(counter_uniform(running_[j]->params.seed, running_[j]->stream, 0));
  }
  SampledTokens st = sample_tokens(row_logits, params, u);
  const double t1 = now_s();
  auto tok = st.tokens.accessor<int64_t, 1>();
  auto lp = st.logprobs.accessor<float, 1>();
  for (size_t j = running_.size(); j-- > first_new;) {
    Running& run = *running_[j];
    run.sample.prefill_s = t1 - t0;
    run.decode_start = t1;
    run.sample.output_ids.push_back(static_cast<int32_t>(tok[j - first_new]));
    run.sample.logprobs.push_back(lp[j - first_new]);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.generated_tokens += static_cast<int64_t>(running_.size() - first_new);
}

void Engine::decode() {
  // decode() runs before admission, so every running sample holds one sampled token that the
  // model has not seen yet: feed it and sample the next.
  std::vector<size_t> rows(running_.size());
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = i;
  if (rows.empty()) return;
  const int64_t A = static_cast<int64_t>(rows.size());
  auto tokens = torch::empty({A, 1}, torch::kLong);
  auto pos = torch::empty({A, 1}, torch::kLong);
  std::vector<int64_t> slots(A);
  auto tok_a = tokens.accessor<int64_t, 2>();
  auto pos_a = pos.accessor<int64_t, 2>();
  for (int64_t i = 0; i < A; ++i) {
    const Sample& s = running_[rows[i]]->sample;
    tok_a[i][0] = s.output_ids.back();
    pos_a[i][0] = static_cast<int64_t>(s.prompt_ids.size() + s.output_ids.size() - 1);
    slots[i] = running_[rows[i]]->slot;
  }
  torch::Tensor logits = model_->forward_cached(tokens, pos, torch::ones({A, 1}, torch::kBool),
                                                torch::tensor(slots, torch::kLong), cache_);
  std::vector<const SamplingParams*> params;
  std::vector<double> u;
  for (size_t i : rows) {
    const Running& r = *running_[i];
    params.push_back(&r.params);
    u.push_back(counter_uniform(r.params.seed, r.stream, r.sample.output_ids.size()));
  }
  SampledTokens st = sample_tokens(logits, params, u);
  auto tok = st.tokens.accessor<int64_t, 1>();
  auto lp = st.logprobs.accessor<float, 1>();
  for (int64_t i = 0; i < A; ++i) {
    Sample& s = running_[rows[i]]->sample;
    s.output_ids.push_back(static_cast<int32_t>(tok[i]));
    s.logprobs.push_back(lp[i]);
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.generated_tokens += A;
}

void Engine::finish(size_t index, FinishReason reason) {
  std::unique_ptr<Running> run = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  run->sample.finish_reason = reason;
  if (run->decode_start > 0) run->sample.decode_s = now_s() - run->decode_start;
  free_slots_.push_back(run->slot);
  reserved_tokens_ -= run->reserved;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.finished_samples += 1;
  }
  if (*run->on_sample) (*run->on_sample)(std::move(run->sample));
}

bool Engine::step() {
  torch::NoGradGuard no_grad;
  const double t0 = now_s();
  apply_pending();
  if (waiting_.empty() && running_.empty()) return false;
  decode();
  admit_and_prefill();
  // Finished samples leave at once (stop token or length), in completion order.
  for (size_t i = 0; i < running_.size();) {
    const Running& r = *running_[i];
    const int32_t last = r.sample.output_ids.back();
    const auto& stop = r.params.stop_token_ids;
    if (std::find(stop.begin(), stop.end(), last) != stop.end()) {
      finish(i, FinishReason::kStop);
    } else if (static_cast<int>(r.sample.output_ids.size()) >= r.params.max_new_tokens) {
      finish(i, FinishReason::kLength);
    } else {
      ++i;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.steps += 1;
  stats_.busy_seconds += now_s() - t0;
  stats_.waiting_requests = static_cast<int64_t>(waiting_.size());
  stats_.running_samples = static_cast<int64_t>(running_.size());
  stats_.weight_version = weight_version_;
  return true;
}

void Engine::run_until_idle() {
  while (step()) {
  }
}

}  // namespace streamrl::engine
