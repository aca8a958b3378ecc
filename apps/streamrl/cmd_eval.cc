// `streamrl eval`: held-out accuracy of a checkpoint on a built-in task or a JSONL dataset.
#include <iostream>

#include "commands.h"
#include "streamrl/core/errors.h"
#include "streamrl/core/threads.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/model/generation_config.h"
#include "streamrl/rl/evaluate.h"
#include "streamrl/tasks/dataset.h"

namespace streamrl::cli {

void add_eval(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("eval", "Held-out accuracy of a checkpoint on a task or dataset");
  struct Args {
    std::string ckpt, task, data, verifier = "numeric";
    rl::EvalConfig eval;
    int threads = 0;
    DeviceFlags device;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_option("--ckpt", a->ckpt, "Checkpoint directory")->required();
  auto* task_opt = app->add_option("--task", a->task, "Built-in task name");
  app->add_option("--data", a->data,
                  "JSONL dataset ({\"prompt\" or \"messages\", \"answer\"} per line)")
      ->excludes(task_opt);
  app->add_option("--verifier", a->verifier, "exact | numeric | choice (with --data)");
  app->add_option("--n", a->eval.n, "Problems")->check(CLI::PositiveNumber);
  app->add_option("--max-new-tokens", a->eval.max_new_tokens, "Response cap")
      ->check(CLI::PositiveNumber);
  app->add_option("--temperature", a->eval.temperature,
                  "0 = greedy; sampling uses top_p/top_k of generation_config.json")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", a->eval.seed, "Problem draw and sampling seed");
  app->add_option("--samples", a->eval.samples,
                  "Also sample this many completions per problem: sampled pass@1 and pass@k")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--sample-temperature", a->eval.sample_temperature,
                  "Temperature of the --samples pass")
      ->check(CLI::PositiveNumber);
  app->add_option("--threads", a->threads, "Threads (default: all cores)");
  add_device_flags(app, &a->device);
  app->add_flag("--json", a->json, "Print one JSON object");
  out.push_back(
      {app, [a] {
         core::apply_core_budget(a->threads > 0 ? a->threads : core::available_cores());
         std::unique_ptr<tasks::Task> dataset;
         if (!a->data.empty()) {
           dataset = std::make_unique<tasks::JsonlTask>(a->data, a->verifier);
         }
         const tasks::Task& task =
             dataset ? *dataset
                     : tasks::get_task(a->task.empty() ? tasks::default_task_name() : a->task);
         model::CausalLM lm = model::load_model(a->ckpt);
         model::place_for_inference(lm, a->device.device, a->device.dtype);
         auto tok = tokenizer::load_tokenizer(a->ckpt);
         const auto prompts = rl::PromptEncoder::for_task(*tok, a->ckpt, task);
         // Sampling evals take the rest of the checkpoint's sampling defaults.
         const model::GenerationDefaults gen = model::load_generation_config(a->ckpt);
         a->eval.top_p = gen.top_p.value_or(a->eval.top_p);
         a->eval.top_k = gen.top_k.value_or(a->eval.top_k);
         torch::NoGradGuard no_grad;
         rl::EvalResult r = rl::evaluate(lm, prompts, task, a->eval);
         nlohmann::json j = r.to_json();
         j["task"] = task.name();
         j["checkpoint"] = a->ckpt;
         if (a->json) {
           std::cout << j.dump() << std::endl;
           return 0;
         }
         std::printf("%s on %s: accuracy %.3f (n=%d), mean length %.1f, p90 %.0f\n",
                     a->ckpt.c_str(), task.name().c_str(), r.accuracy, r.n, r.mean_length,
                     r.p90_length);
         if (r.uses_tools)
           std::printf("    tool calls per problem %.2f\n", r.tool_calls_per_problem);
         auto print_sampled = [&](const rl::SampledStats& s) {
           if (r.samples == 0) return;
           std::printf("    sampled pass@1 %.3f", s.pass_at_1);
           for (const auto& [k, v] : s.pass_at_k) std::printf(", pass@%d %.3f", k, v);
           std::printf("\n");
         };
         print_sampled(r.sampled);
         for (const auto& [d, s] : r.by_difficulty) {
           std::printf("  difficulty %d: accuracy %.3f (n=%d, %d distinct), mean length %.1f\n", d,
                       s.accuracy, s.n, s.distinct_prompts, s.mean_length);
           print_sampled(s.sampled);
         }
         return 0;
       }});
}

}  // namespace streamrl::cli
