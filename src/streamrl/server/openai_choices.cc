// OpenAI choices as tokens stream in, and the response JSON (see openai_api.h).
#include "streamrl/server/openai_api.h"

namespace streamrl::server {
namespace {

std::vector<int> bytes_of(const std::string& s) {
  std::vector<int> out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

}  // namespace

struct CompletionChoices::State {
  State(const tokenizer::Tokenizer& tok, const std::vector<std::string>& stop) : text(tok, stop) {}
  ChoiceText text;
  std::string all_text;           // released so far
  std::vector<TokenText> tokens;  // released so far (whole response only)
  int64_t offset = 0;             // text_offset of the next released token
  bool started = false;           // a chunk was sent (chat: the role went with it)
  std::string finish_reason;      // "" while running
};

CompletionChoices::CompletionChoices(const CompletionRequest& request,
                                     const tokenizer::Tokenizer& tok)
    : request_(request), tok_(tok) {
  for (const auto& job : request.jobs) {
    for (int i = 0; i < job.n; ++i) states_.emplace_back(tok, request.stop);
  }
}

CompletionChoices::~CompletionChoices() = default;

namespace {

// Log-probs of released tokens: completions {tokens, token_logprobs, top_logprobs, text_offset},
// chat {content: [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json logprobs_json(const CompletionRequest& r, const std::vector<TokenText>& tokens,
                             int64_t offset, const tokenizer::Tokenizer& tok) {
  if (r.logprobs < 0) return nullptr;
  auto alt_text = [&](int32_t id) { return tok.decode({id}); };
  if (r.chat) {
    nlohmann::json content = nlohmann::json::array();
    for (const auto& t : tokens) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& a : t.top) {
        const std::string s = alt_text(a.token);
        top.push_back({{"token", s}, {"logprob", a.logprob}, {"bytes", bytes_of(s)}});
      }
      content.push_back({{"token", t.piece},
                         {"logprob", t.logprob},
                         {"bytes", bytes_of(t.piece)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  nlohmann::json pieces = nlohmann::json::array(), lps = nlohmann::json::array(),
                 offsets = nlohmann::json::array();
  nlohmann::json tops = r.logprobs > 0 ? nlohmann::json::array() : nlohmann::json(nullptr);
  for (const auto& t : tokens) {
    pieces.push_back(t.piece);
    lps.push_back(t.logprob);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(t.piece.size());
    if (r.logprobs > 0) {
      nlohmann::json top = nlohmann::json::object();
      for (const auto& a : t.top) top[alt_text(a.token)] = a.logprob;
      tops.push_back(std::move(top));
    }
  }
  return {{"tokens", std::move(pieces)},
          {"token_logprobs", std::move(lps)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

const char* finish_reason(engine::FinishReason reason, bool stopped) {
  if (stopped || reason == engine::FinishReason::kStop) return "stop";
  return reason == engine::FinishReason::kLength ? "length" : "abort";
}

}  // namespace

CompletionChoices::Update CompletionChoices::apply(const InflightEvent& e) {
  const int64_t index = static_cast<int64_t>(e.job) * request_.jobs.at(e.job).n + e.sample_index;
  State& st = states_.at(static_cast<size_t>(index));
  Update out;
  if (!st.finish_reason.empty()) return out;  // stopped early: later tokens are not wanted
  ChoiceDelta delta;
  if (e.sample) {
    delta = st.text.finish();
    st.finish_reason = finish_reason(e.sample->finish_reason, st.text.stopped());
  } else {
    delta = st.text.add(e.token, e.logprob, e.top);
    if (st.text.stopped()) {
      st.finish_reason = "stop";
      out.stop_sample = true;
    }
  }
  completion_tokens_ += static_cast<int64_t>(delta.tokens.size());
  nlohmann::json logprobs = logprobs_json(request_, delta.tokens, st.offset, tok_);
  for (const auto& t : delta.tokens) st.offset += static_cast<int64_t>(t.piece.size());
  st.all_text += delta.text;
  if (!request_.stream) {
    for (auto& t : delta.tokens) st.tokens.push_back(std::move(t));
    return out;
  }
  if (delta.empty() && st.finish_reason.empty()) return out;
  const nlohmann::json reason =
      st.finish_reason.empty() ? nlohmann::json(nullptr) : nlohmann::json(st.finish_reason);
  nlohmann::json choice = {
      {"index", index}, {"logprobs", std::move(logprobs)}, {"finish_reason", reason}};
  if (request_.chat) {
    nlohmann::json d = {{"content", delta.text}};
    if (!st.started) d["role"] = "assistant";
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta.text;
  }
  st.started = true;
  out.chunk_choices.push_back(std::move(choice));
  return out;
}

std::vector<nlohmann::json> CompletionChoices::choices() const {
  std::vector<nlohmann::json> out;
  for (size_t i = 0; i < states_.size(); ++i) {
    const State& st = states_[i];
    nlohmann::json c = {{"index", i},
                        {"logprobs", logprobs_json(request_, st.tokens, 0, tok_)},
                        {"finish_reason", st.finish_reason}};
    if (request_.chat) {
      c["message"] = {{"role", "assistant"}, {"content", st.all_text}};
    } else {
      c["text"] = st.all_text;
    }
    out.push_back(std::move(c));
  }
  return out;
}

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json completion_response(const CompletionRequest& request, const CompletionMeta& meta,
                                   std::vector<nlohmann::json> choices, const nlohmann::json& usage,
                                   bool chunk) {
  const char* object = !request.chat ? "text_completion"
                       : chunk       ? "chat.completion.chunk"
                                     : "chat.completion";
  return {{"id", meta.id},
          {"object", object},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", std::move(choices)},
          {"usage", usage}};
}

nlohmann::json models_json(const std::string& model, int64_t created, int max_seq_len) {
  return {{"object", "list"},
          {"data",
           {{{"id", model},
             {"object", "model"},
             {"created", created},
             {"owned_by", "streamrl"},
             {"max_model_len", max_seq_len}}}}};
}

}  // namespace streamrl::server
