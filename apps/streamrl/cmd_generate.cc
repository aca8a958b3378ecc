// `streamrl generate`: batched generation from a checkpoint with the KV cache.
#include <iostream>

#include "commands.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/engine/static_batch.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/generation_config.h"
#include "streamrl/rl/sequences.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::cli {

void add_generate(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("generate", "Generate completions of a prompt from a checkpoint");
  struct Args {
    std::string ckpt;
    std::vector<std::string> prompts;
    bool chat = false;
    std::string system;
    engine::SamplingParams params;
    int n = 1;
    int threads = 0;
    DeviceFlags device;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  a->params.max_new_tokens = 64;
  app->add_option("--ckpt", a->ckpt, "Checkpoint directory")->required();
  app->add_option("--prompt", a->prompts, "Prompt text (repeat for a batch)")->required();
  app->add_flag("--chat", a->chat,
                "Send each prompt as a user message in the checkpoint's chat template");
  app->add_option("--system", a->system, "System message (with --chat)");
  app->add_option("--max-new-tokens", a->params.max_new_tokens,
                  "Tokens to generate at most (default: generation_config.json, else 64)")
      ->check(CLI::PositiveNumber);
  app->add_option("--temperature", a->params.temperature,
                  "0 = greedy (default: generation_config.json, else 1)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--top-p", a->params.top_p, "Nucleus mass (default: generation_config.json)")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--top-k", a->params.top_k, "0 = no limit (default: generation_config.json)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", a->params.seed, "Sampling seed");
  app->add_option("--n", a->n, "Samples per prompt")->check(CLI::PositiveNumber);
  app->add_option("--threads", a->threads, "Threads (default: all cores)");
  add_device_flags(app, &a->device);
  app->add_flag("--json", a->json, "Print one JSON object");
  out.push_back({app, [a, app] {
                   if (!a->system.empty() && !a->chat) {
                     throw InputError("--system needs --chat");
                   }
                   core::apply_core_budget(a->threads > 0 ? a->threads : core::available_cores());
                   model::CausalLM lm = model::load_model(a->ckpt);
                   model::place_for_inference(lm, a->device.device, a->device.dtype);
                   auto tok = tokenizer::load_tokenizer(a->ckpt);
                   const auto prompts = a->chat ? rl::PromptEncoder::for_chat(*tok, a->ckpt)
                                                : rl::PromptEncoder::for_checkpoint(*tok, a->ckpt);
                   // generation_config.json supplies what the command line leaves out.
                   const model::GenerationDefaults gen = model::load_generation_config(a->ckpt);
                   engine::SamplingParams& p = a->params;
                   if (!app->count("--temperature")) {
                     p.temperature = model::default_temperature(gen, p.temperature);
                   }
                   if (!app->count("--top-p")) p.top_p = gen.top_p.value_or(p.top_p);
                   if (!app->count("--top-k")) p.top_k = gen.top_k.value_or(p.top_k);
                   if (!app->count("--max-new-tokens")) {
                     p.max_new_tokens = gen.max_new_tokens.value_or(p.max_new_tokens);
                   }
                   p.stop_token_ids = prompts.stop_ids();
                   std::vector<engine::GenerateRequest> reqs;
                   for (size_t i = 0; i < a->prompts.size(); ++i) {
                     engine::GenerateRequest r;
                     r.request_id = static_cast<int64_t>(i);
                     if (a->chat) {
                       std::vector<tokenizer::ChatMessage> messages;
                       if (!a->system.empty()) messages.push_back({"system", a->system});
                       messages.push_back({"user", a->prompts[i]});
                       r.prompt_ids = prompts.chat_prompt_ids(messages);
                     } else {
                       r.prompt_ids = rl::encode_prompt(*tok, a->prompts[i]);
                     }
                     r.n = a->n;
                     r.params = p;
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
