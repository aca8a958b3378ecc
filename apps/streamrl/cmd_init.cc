// `streamrl init`: a randomly initialised checkpoint from a model config and a tokenizer.
#include <iostream>

#include "commands.h"
#include "streamrl/core/errors.h"
#include "streamrl/model/checkpoint.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::cli {

void add_init(CLI::App& root, CommandList& out) {
  auto* app = root.add_subcommand("init", "Create a randomly initialised checkpoint directory");
  struct Args {
    std::string model_config, tokenizer = "char", out_dir;
    uint64_t seed = 0;
    bool json = false;
  };
  auto a = std::make_shared<Args>();
  app->add_option("--model-config", a->model_config, "HF-style config.json")->required();
  app->add_option("--tokenizer", a->tokenizer, "'char' or a tokenizer.json file/directory");
  app->add_option("--out", a->out_dir, "Checkpoint directory to create")->required();
  app->add_option("--seed", a->seed, "Initialisation seed");
  app->add_flag("--json", a->json, "Print one JSON object");
  out.push_back({app, [a] {
                   model::ModelConfig cfg = model::load_model_config(a->model_config);
                   auto tok = tokenizer::make_tokenizer(a->tokenizer);
                   if (tok->vocab_size() > cfg.vocab_size) {
                     throw InputError("tokenizer has " + std::to_string(tok->vocab_size()) +
                                      " tokens but " + a->model_config + " has vocab_size " +
                                      std::to_string(cfg.vocab_size));
                   }
                   model::CausalLM lm(cfg, a->seed);
                   model::save_checkpoint(a->out_dir, lm, tok->to_json());
                   nlohmann::json r = {{"checkpoint", a->out_dir},
                                       {"parameters", lm->num_parameters()},
                                       {"vocab_size", cfg.vocab_size}};
                   if (a->json) {
                     std::cout << r.dump() << std::endl;
                   } else {
                     std::cout << "wrote " << a->out_dir << " (" << lm->num_parameters()
                               << " parameters)" << std::endl;
                   }
                   return 0;
                 }});
}

}  // namespace streamrl::cli
