#include "streamrl/rl/sequences.h"

#include <algorithm>

#include "streamrl/core/errors.h"
#include "streamrl/model/generation_config.h"
#include "streamrl/tasks/dataset.h"

namespace streamrl::rl {
namespace fs = std::filesystem;

PromptEncoder::PromptEncoder(const tokenizer::Tokenizer& tok) : tok_(&tok) {
  add_stop_id(tok.eos_id());
}

PromptEncoder::PromptEncoder(const tokenizer::Tokenizer& tok, const fs::path& dir,
                             std::optional<tokenizer::ChatTemplate> chat)
    : PromptEncoder(tok) {
  chat_ = std::move(chat);
  if (chat_ && !chat_->end_of_turn().empty()) {
    const std::string& end = chat_->end_of_turn();
    std::optional<int32_t> id = tok.token_to_id(end);
    if (!id) {
      throw InputError((dir / "tokenizer.json").string() + " has no token " + end +
                       ", which its chat template ends turns with");
    }
    end_of_turn_id_ = *id;
  }
  if (!dir.empty()) {
    for (int64_t id : model::load_generation_config(dir).eos_token_ids) add_stop_id(id);
  }
  add_stop_id(end_of_turn_id_);
}

PromptEncoder PromptEncoder::for_checkpoint(const tokenizer::Tokenizer& tok, const fs::path& dir) {
  return PromptEncoder(tok, dir, std::nullopt);
}

PromptEncoder PromptEncoder::for_task(const tokenizer::Tokenizer& tok, const fs::path& dir,
                                      const tasks::Task& task) {
  const auto* dataset = dynamic_cast<const tasks::JsonlTask*>(&task);
  const tasks::Problem* chat = dataset ? dataset->first_chat_problem() : nullptr;
  if (!chat) return for_checkpoint(tok, dir);
  const std::string where = chat->source +
                            ": a chat \"messages\" record needs the model's chat "
                            "template, but ";
  if (dir.empty()) throw InputError(where + "the model is not loaded from a checkpoint");
  try {
    return PromptEncoder(tok, dir, tokenizer::load_chat_template(dir));
  } catch (const InputError& e) {
    throw InputError(where + e.what());
  }
}

PromptEncoder PromptEncoder::for_chat(const tokenizer::Tokenizer& tok, const fs::path& dir) {
  return PromptEncoder(tok, dir, tokenizer::load_chat_template(dir));
}

void PromptEncoder::add_stop_id(int64_t id) {
  if (id < 0 || std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) return;
  stop_ids_.push_back(static_cast<int32_t>(id));
}

std::vector<int32_t> PromptEncoder::prompt_ids(const tasks::Problem& problem) const {
  if (problem.messages.empty()) return encode_prompt(*tok_, problem.prompt);
  if (!chat_) {
    throw InputError(problem.source +
                     ": a chat \"messages\" record needs the model's chat "
                     "template, but none is loaded");
  }
  return chat_prompt_ids(problem.messages);
}

std::vector<int32_t> PromptEncoder::chat_prompt_ids(
    const std::vector<tokenizer::ChatMessage>& messages) const {
  if (!chat_) throw InputError("chat messages need the model's chat template, but none is loaded");
  return tok_->encode(tokenizer::render_chat(*chat_, messages, /*add_generation_prompt=*/true));
}

PromptEncoder::Target PromptEncoder::target(const tasks::Problem& problem) const {
  Target t;
  auto add = [&t](const std::vector<int32_t>& ids, bool trained) {
    t.ids.insert(t.ids.end(), ids.begin(), ids.end());
    t.trained.insert(t.trained.end(), ids.size(), trained ? 1 : 0);
  };
  const int32_t end = problem.messages.empty() ? tok_->eos_id() : end_of_turn_id_;
  if (problem.turns.empty()) {
    add(tok_->encode(problem.demonstration.empty() ? problem.reference : problem.demonstration),
        true);
    if (end >= 0) add({end}, true);
    return t;
  }
  if (!problem.messages.empty()) {
    throw InputError(problem.source + ": multi-turn demonstrations need a plain-text prompt");
  }
  for (const auto& turn : problem.turns) {
    add(tok_->encode(turn.reply), true);
    if (end >= 0) add({end}, true);
    add(tok_->encode(turn.appended), false);
  }
  return t;
}

SequenceBatch make_sequence_batch(const std::vector<std::vector<int32_t>>& prompts,
                                  const std::vector<std::vector<int32_t>>& completions,
                                  const std::vector<const std::vector<uint8_t>*>& trained) {
  TORCH_CHECK(
      prompts.size() == completions.size() && (trained.empty() || trained.size() == prompts.size()),
      "make_sequence_batch: ", prompts.size(), " prompts but ", completions.size(),
      " completions and ", trained.size(), " masks");
  const int64_t B = prompts.size();
  int64_t T = 1;
  for (int64_t b = 0; b < B; ++b) {
    T = std::max<int64_t>(T, prompts[b].size() + completions[b].size());
  }
  SequenceBatch out;
  out.tokens = torch::zeros({B, T}, torch::kLong);
  out.valid = torch::zeros({B, T}, torch::kBool);
  out.completion = torch::zeros({B, T}, torch::kBool);
  auto tok = out.tokens.accessor<int64_t, 2>();
  auto valid = out.valid.accessor<bool, 2>();
  auto comp = out.completion.accessor<bool, 2>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t t = 0;
    for (int32_t id : prompts[b]) tok[b][t] = id, valid[b][t++] = true;
    const std::vector<uint8_t>* mask = trained.empty() ? nullptr : trained[b];
    const bool masked = mask != nullptr && !mask->empty();
    for (size_t i = 0; i < completions[b].size(); ++i, ++t) {
      const bool train = !masked || (i < mask->size() && (*mask)[i] != 0);
      tok[b][t] = completions[b][i], valid[b][t] = true, comp[b][t] = train;
      out.num_completion_tokens += train ? 1 : 0;
    }
  }
  return out;
}

}  // namespace streamrl::rl
