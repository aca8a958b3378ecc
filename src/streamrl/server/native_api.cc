// Native batch generate API: parsing and sample lines (see native_api.h).
#include "streamrl/server/native_api.h"

#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "streamrl/core/errors.h"
#include "streamrl/engine/tool_turns.h"
#include "streamrl/server/json_fields.h"
#include "streamrl/tools/builtin_tools.h"

namespace streamrl::server {
namespace {

// One runner per set of tool names for the whole process, so its bound on abandoned (hung) calls
// holds across requests rather than per request.
std::shared_ptr<const tools::ToolRunner> shared_tool_runner(const std::vector<std::string>& names) {
  static std::mutex mu;
  static std::map<std::vector<std::string>, std::shared_ptr<const tools::ToolRunner>> runners;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = runners.find(names); it != runners.end()) return it->second;
  // Built before it is kept: an unknown name throws and leaves nothing behind.
  auto runner = std::make_shared<const tools::ToolRunner>(tools::builtin_tool_runner(names));
  runners.emplace(names, runner);
  return runner;
}

PromptJob parse_job(const nlohmann::json& r, const tokenizer::Tokenizer& tok,
                    const RequestDefaults& request_defaults, const std::string& where) {
  if (!r.is_object()) throw InputError(where + " must be an object");
  reject_unknown_fields(
      r,
      {"id", "prompt", "prompt_ids", "n", "max_new_tokens", "temperature", "top_p", "top_k", "seed",
       "stop_token_ids", "length_estimate", "ignore_eos", "tools", "max_turns"},
      where);
  const bool has_text = r.contains("prompt") && !r["prompt"].is_null();
  const bool has_ids = r.contains("prompt_ids") && !r["prompt_ids"].is_null();
  if (has_text == has_ids) throw InputError(where + ": give exactly one of 'prompt', 'prompt_ids'");
  PromptJob job;
  if (has_text) {
    if (!r["prompt"].is_string()) throw InputError(where + ": 'prompt' must be a string");
    job.prompt_ids = tokenizer::encode_prompt(tok, r["prompt"].get<std::string>());
  } else {
    job.prompt_ids = token_ids(r["prompt_ids"], "prompt_ids");
  }
  try {
    const engine::SamplingParams defaults;
    constexpr double kNoLimit = std::numeric_limits<double>::max();
    job.n = static_cast<int>(int_field(r, "n", 1, 1, 1 << 16));
    job.params.max_new_tokens =
        static_cast<int>(int_field(r, "max_new_tokens", defaults.max_new_tokens, 1, 1 << 30));
    job.params.temperature = static_cast<float>(
        number_field(r, "temperature", request_defaults.temperature, 0, kNoLimit));
    job.params.top_p = static_cast<float>(number_field(r, "top_p", request_defaults.top_p, 0, 1));
    if (job.params.top_p <= 0) throw InputError("'top_p' must be a number in (0, 1]");
    job.params.top_k = static_cast<int>(int_field(r, "top_k", request_defaults.top_k, 0, 1 << 30));
    if (r.contains("seed") && !r["seed"].is_null()) {
      if (!r["seed"].is_number_integer()) throw InputError("'seed' must be an integer");
      job.params.seed = r["seed"].get<uint64_t>();
    }
    if (r.contains("stop_token_ids") && !r["stop_token_ids"].is_null()) {
      job.params.stop_token_ids = token_ids(r["stop_token_ids"], "stop_token_ids");
    }
    job.length_estimate = number_field(r, "length_estimate", 0, 0, kNoLimit);
    // Multi-turn tool rollouts with built-in tools (each turn capped at max_new_tokens): the
    // trainer's remote generation of a tool-using task.
    if (r.contains("tools") && !r["tools"].is_null()) {
      if (!r["tools"].is_array() || r["tools"].empty()) {
        throw InputError("'tools' must be a non-empty array of built-in tool names");
      }
      std::vector<std::string> names;
      for (const auto& name : r["tools"]) {
        if (!name.is_string()) throw InputError("'tools' must hold tool names (strings)");
        names.push_back(name.get<std::string>());
      }
      const int max_turns = static_cast<int>(int_field(r, "max_turns", 8, 1, 1 << 10));
      job.turn_hooks = engine::tool_turns(shared_tool_runner(names), tok, max_turns);
    } else if (r.contains("max_turns") && !r["max_turns"].is_null()) {
      throw InputError("'max_turns' needs 'tools'");
    }
    if (!bool_field(r, "ignore_eos", false)) {
      add_stop_ids(&job.params.stop_token_ids, request_defaults.stop_token_ids, tok.eos_id());
    }
  } catch (const InputError& e) {
    throw InputError(where + ": " + e.what());
  }
  return job;
}

}  // namespace

GenerateRequest parse_generate_request(std::string_view body, const tokenizer::Tokenizer& tok,
                                       const RequestDefaults& defaults) {
  const nlohmann::json j = parse_json_object(body);
  reject_unknown_fields(j, {"requests", "run_id"}, "generate request");
  if (!j.contains("requests") || !j["requests"].is_array() || j["requests"].empty()) {
    throw InputError("'requests' must be a non-empty array");
  }
  GenerateRequest out;
  if (j.contains("run_id") && !j["run_id"].is_null()) {
    if (!j["run_id"].is_string()) throw InputError("'run_id' must be a string");
    out.run_id = j["run_id"].get<std::string>();
  }
  const auto& requests = j["requests"];
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::string where = "requests[" + std::to_string(i) + "]";
    out.jobs.push_back(parse_job(requests[i], tok, defaults, where));
    const auto id = requests[i].find("id");
    out.ids.push_back(id == requests[i].end() || id->is_null() ? nlohmann::json(i) : *id);
  }
  return out;
}

nlohmann::json sample_line(const nlohmann::json& id, const engine::Sample& s,
                           const tokenizer::Tokenizer& tok) {
  nlohmann::json line = {{"id", id},
                         {"sample_index", s.sample_index},
                         {"prompt_ids", s.prompt_ids},
                         {"output_ids", s.output_ids},
                         {"text", tok.decode(s.output_ids)},
                         {"logprobs", s.logprobs},
                         {"finish_reason", engine::to_string(s.finish_reason)},
                         {"weight_version", s.weight_version},
                         {"queue_s", s.queue_s},
                         {"prefill_s", s.prefill_s},
                         {"decode_s", s.decode_s}};
  if (!s.sampled_mask.empty()) {  // a multi-turn rollout: which output tokens the model sampled
    line["sampled_mask"] = s.sampled_mask;
    line["turns"] = s.turns;
  }
  return line;
}

}  // namespace streamrl::server
