// `streamrl generate`: batched generation from a checkpoint with the KV cache.
#include <iostream>

#include "commands.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/static_batch.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::cli {

void add_generate(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("generate", "Generate completions of a prompt from a checkpoint");
  struct Args {
    std::string ckpt;
    std::vector<std::string> prompts;
    engine::SamplingParams params;
    int n = 1;
    int threads = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  a->params.max_new_tokens = 64;
  app->add_option("--ckpt", a->ckpt, "Checkpoint directory")->required();
  app->add_option("--prompt", a->prompts, "Prompt text (repeat for a batch)")->required();
  app->add_option("--max-new-tokens", a->params.max_new_tokens, "Tokens to generate at most")
      ->check(CLI::PositiveNumber);
  app->add_option("--temperature", a->params.temperature, "0 = greedy")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--top-p", a->params.top_p, "Nucleus mass")->check(CLI::Range(0.0, 1.0));
  app->add_option("--top-k", a->params.top_k, "0 = no limit")->check(CLI::NonNegativeNumber);
  app->add_option("--seed", a->params.seed, "Sampling seed");
  app->add_option("--n", a->n, "Samples per prompt")->check(CLI::PositiveNumber);
  app->add_option("--threads", a->threads, "Threads (default: all cores)");
  app->add_flag("--json", a->json, "Print one JSON object");
  out.push_back({app, [a] {
                   core::apply_core_budget(a->threads > 0 ? a->threads : core::available_cores());
                   model::CausalLM lm = model::load_model(a->ckpt);
                   auto tok = tokenizer::load_tokenizer(a->ckpt);
                   if (tok->eos_id() >= 0) a->params.stop_token_ids = {tok->eos_id()};
                   std::vector<engine::GenerateRequest> reqs;
                   for (size_t i = 0; i < a->prompts.size(); ++i) {
                     engine::GenerateRequest r;
                     r.request_id = static_cast<int64_t>(i);
                     r.prompt_ids = tok->encode(a->prompts[i], /*add_special_tokens=*/true);
                     r.n = a->n;
                     r.params = a->params;
                     reqs.push_back(std::move(r));
                   }
                   auto samples = engine::generate_static(lm, reqs);
                   nlohmann::json out = nlohmann::json::array();
                   for (const auto& s : samples) {
                     std::string text = tok->decode(s.output_ids);
                     if (!a->json) {
                       std::cout << a->prompts[s.request_id] << text << "\n";
                       continue;
                     }
                     out.push_back({{"prompt", a->prompts[s.request_id]},
                                    {"completion", text},
                                    {"tokens", s.output_ids},
                                    {"logprobs", s.logprobs},
                                    {"finish_reason", engine::to_string(s.finish_reason)}});
                   }
                   if (a->json) std::cout << nlohmann::json{{"samples", out}}.dump() << std::endl;
                   return 0;
                 }});
}

}  // namespace streamrl::cli
