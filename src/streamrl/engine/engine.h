// One generation instance with iteration-level (continuous) batching. Every step
// admits waiting requests into free KV-cache slots (policy order: FIFO or longest-estimated-first),
// prefills them (the n samples of a prompt prefill once and share the prefix), decodes one token
// for every running sample, and hands each finished sample to its request's callback at once.
//
// Thread model: `step()` and `run_until_idle()` are called by one engine thread. `add_request`,
// `abort`, `update_weights` and `stats` may be called from any thread; their effects apply at the
// start of the next step, i.e. between decode steps.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "streamrl/core/worker_pool.h"
#include "streamrl/engine/sample.h"
#include "streamrl/model/kv_cache.h"
#include "streamrl/model/transformer.h"
#include "streamrl/telemetry/trace.h"

namespace streamrl::engine {

enum class AdmissionPolicy {
  kFifo,          // arrival order
  kLongestFirst,  // largest length_estimate first (LPT, StreamRL §5.3)
};

// Parses "fifo" / "lpt"; throws InputError otherwise.
AdmissionPolicy parse_admission_policy(const std::string& name);

struct EngineConfig {
  int max_batch_size = 64;      // running samples at once = KV-cache slots
  int max_seq_len = 1024;       // prompt + output tokens per slot (capped by the model's positions)
  int64_t kv_token_budget = 0;  // tokens reserved (prompt + max_new_tokens) over running samples;
                                // 0 = max_batch_size * max_seq_len (slots are the only limit)
  AdmissionPolicy admission = AdmissionPolicy::kFifo;
  bool prefix_sharing = true;         // prefill a prompt once for its n samples
  bool record_routing = false;        // MoE: record each token's experts in Sample (routing replay)
  telemetry::Trace* trace = nullptr;  // when set, every step is a span on `trace_track`
  int trace_track = 0;
};

using SampleCallback = std::function<void(Sample&&)>;

// One token just sampled for a running sample: what a per-token stream sends on.
struct TokenEvent {
  int32_t sample_index = 0;
  int32_t token = 0;
  float logprob = 0;
  const std::vector<TokenLogprob>* top = nullptr;  // params.top_logprobs alternatives, or empty
};
using TokenCallback = std::function<void(const TokenEvent&)>;
// A finished turn's follow-up work, run off the engine thread (e.g. a rollout's tool calls): it
// returns the ids to append before the next turn (empty: the rollout ends).
using TurnWork = std::function<std::vector<int32_t>()>;
// Called on the engine thread when a sample ends a turn, with the sample so far and where that
// turn starts in output_ids; it must be quick (parse the turn, decide). An empty TurnWork ends the
// rollout at once.
using TurnCallback = std::function<TurnWork(const Sample& sample, size_t turn_start)>;
// Called on the engine thread after every token an engine-run rollout samples, with the sample so
// far and where its turn starts; it must be quick (decoding pipelining: a tool call can start
// the moment its closing tag is sampled).
using TurnProgress = std::function<void(const Sample& sample, size_t turn_start)>;

struct Request {
  int64_t request_id = 0;
  std::vector<int32_t> prompt_ids;  // non-empty
  int n = 1;                        // samples from this prompt, admitted together
  SamplingParams params;
  double length_estimate = 0;  // predicted output length, for kLongestFirst
  SampleCallback on_sample;    // called on the engine thread for each finished sample
  // When set, called on the engine thread for every token as it is sampled (before the sample's
  // on_sample, in order); it must be quick: it runs between decode steps.
  TokenCallback on_token;
  // Keys the random streams of the samples (with each sample's index and params.seed); nullopt =
  // request_id. A server sets it from the prompt, so a seed reproduces across requests.
  std::optional<uint64_t> random_key;
  // Multi-turn rollouts: a sample that finishes (stop or length) keeps its slot and KV cache after
  // its on_sample, until the caller continues it (Engine::continue_sample) or releases it.
  bool hold_kv = false;
  // Multi-turn rollouts the engine runs to their end itself (RL on tool-using tasks): called each
  // time a sample ends a turn. The work it returns runs on a thread of the engine's pool, so the
  // other samples decode while a tool runs; the ids that work returns (e.g. rendered tool results)
  // are appended and the next turn is sampled, up to params.max_new_tokens, without the sample
  // leaving its slot. No work, or no ids, ends the rollout, and on_sample gets the whole
  // trajectory once. An exception (from either) ends the rollout as aborted and is rethrown by the
  // next step(). Not with hold_kv.
  TurnCallback on_turn;
  TurnProgress on_turn_token;  // with on_turn, optional: sees each sampled token of a turn
  // With on_turn, optional: called once when the rollout ends, however it ends (its last turn, an
  // abort, an error), just before on_sample; state kept per rollout by the hooks is dropped here.
  TurnProgress on_rollout_end;
};

// The next turn of a held sample: `appended_ids` (e.g. the rendered tool results and the next
// assistant header) are prefilled after what the sample holds, then up to `max_new_tokens` are
// sampled with the request's other parameters; the whole sample comes back through the request's
// on_sample again, held again.
struct Continuation {
  int64_t request_id = 0;
  int32_t sample_index = 0;
  std::vector<int32_t> appended_ids;
  int max_new_tokens = 128;
};

// Counters for /metrics and profiling. A consistent snapshot.
struct EngineStats {
  int64_t waiting_requests = 0;
  int64_t running_samples = 0;
  int64_t weight_version = 0;
  int64_t steps = 0;
  int64_t generated_tokens = 0;
  int64_t finished_samples = 0;
  double busy_seconds = 0;  // time inside step()
};

class Engine {
 public:
  // The engine owns `model` for inference; nothing else may run it concurrently.
  Engine(model::CausalLM model, const EngineConfig& config, int64_t weight_version = 0);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request. Throws InputError when it can never fit (prompt + max_new_tokens beyond
  // max_seq_len, n beyond max_batch_size, empty prompt) — checked here, not later.
  void add_request(Request request);

  // Drops a waiting or running request; its unfinished samples are reported with kAborted.
  void abort(int64_t request_id);

  // Finishes one running sample of a request at the next step with kStop (a stop sequence that
  // only the caller can see matched); a sample that is not running is left alone.
  void stop_sample(int64_t request_id, int32_t sample_index);

  // Continues a held sample at the next step, prefilling only the appended tokens (its earlier
  // turns stay in the KV cache). Any thread. It waits while the KV budget lacks room for it; a
  // continuation that can never fit max_seq_len, or names no held sample, finishes the sample at
  // once with kLength (nothing sampled), still held, or is dropped, respectively. InputError (on
  // the caller's thread) for a token id outside the vocabulary.
  void continue_sample(Continuation continuation);

  // Frees a held sample's slot and KV cache (a rollout that is done). Any thread.
  void release_sample(int64_t request_id, int32_t sample_index);

  // Samples held for another turn.
  int64_t held_samples() const;

  // Installs new weights (HF name -> tensor) at the next step boundary; samples started afterwards
  // carry `version`. Every tensor is checked here (model::check_weights), so a bad update throws
  // InputError to its caller and never reaches the engine thread. The engine keeps a copy of the
  // last installed weights from the first update on, for recover().
  void update_weights(int64_t version, std::map<std::string, torch::Tensor> weights);

  // After step() threw, on the engine thread: every waiting and running request is aborted (its
  // unfinished samples reported with kAborted), pending weights are dropped and the last weights
  // installed (if an update ever was) are loaded again, so the engine can serve on.
  void recover();

  // For an engine whose module another component updates in place (a colocated trainer): samples
  // started from the next step on carry `version`. Any thread.
  void set_weight_version(int64_t version);

  // One iteration: apply pending weights/aborts, admit, prefill, decode one token, emit finished
  // samples. Returns false when there was nothing to do, or nothing could run (every slot or the
  // KV budget held by samples waiting for their next turn).
  bool step();

  // Steps until no request is waiting or running and no rollout's turn callback is out, or none
  // can run until a held sample is released.
  void run_until_idle();

  // Blocks up to `timeout` until there is work (a request, abort or weight update queued, or
  // samples running). Returns true when there is work. Any thread.
  bool wait_for_work(std::chrono::milliseconds timeout);

  bool idle() const;
  EngineStats stats() const;
  const EngineConfig& config() const { return config_; }
  model::CausalLM& model() { return model_; }

 private:
  struct Running;  // one sample in a slot
  void apply_pending();
  size_t admit();  // returns the index in running_ of the first newly admitted sample
  void forward_and_sample(size_t first_new);
  // Appends each running sample's fed tokens' experts (one [N, K] tensor per MoE layer).
  void record_routing(const std::vector<torch::Tensor>& routing,
                      const std::vector<int64_t>& logit_row, const std::vector<int64_t>& fed);
  void finish(size_t running_index, FinishReason reason);
  void release(const Running& run);  // frees its slot and reservation
  // Frees the slot of a sample that is done and hands it to its on_sample.
  void deliver(std::unique_ptr<Running> run);
  // Releases held samples matching `pred`; those between engine-run turns (Request::on_turn) are
  // reported as aborted, since their caller has not had them yet.
  template <class Pred>
  void drop_held(Pred&& pred);
  void admit_continuations();
  // Holds a sample whose turn ended and runs the turn's work off the engine thread (or takes the
  // error its on_turn threw); the outcome comes back in turn_results_.
  void start_turn(std::unique_ptr<Running> run, TurnWork work, std::exception_ptr error);
  void apply_turn_results();

  model::CausalLM model_;
  EngineConfig config_;
  model::KVCache cache_;

  // Engine-thread state.
  std::vector<int> free_slots_;
  std::vector<std::unique_ptr<Running>> running_;
  std::deque<std::pair<Request, double>> waiting_;  // request, arrival time (steady seconds)
  // Held samples by (request id, sample index), and continuations waiting for KV budget.
  std::map<std::pair<int64_t, int32_t>, std::unique_ptr<Running>> held_;
  std::deque<Continuation> continuing_;
  int64_t reserved_tokens_ = 0;
  int64_t weight_version_;

  // Inbox from other threads, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::vector<std::pair<Request, double>> inbox_;
  std::vector<int64_t> aborts_;
  std::vector<std::pair<int64_t, int32_t>> stops_;
  std::vector<Continuation> continuations_;
  std::vector<std::pair<int64_t, int32_t>> releases_;
  int64_t held_count_ = 0;
  // Engine-run turns: what their callbacks returned or threw (an empty `appended_ids` ends the
  // rollout), and how many were started and not yet applied.
  std::vector<std::pair<Continuation, std::exception_ptr>> turn_results_;
  int64_t turns_out_ = 0;
  std::optional<std::pair<int64_t, std::map<std::string, torch::Tensor>>> pending_weights_;
  std::optional<int64_t> pending_version_;
  EngineStats stats_;

  // Engine-thread state: the last weights installed and their version, for recover().
  std::map<std::string, torch::Tensor> last_good_;
  int64_t last_good_version_ = 0;
  // The threads running turn work; last, so it is destroyed (waiting for work still out, which
  // pushes into this engine) before anything that work touches.
  core::WorkerPool turn_workers_;
};

}  // namespace streamrl::engine
