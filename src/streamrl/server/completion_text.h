// Completion text for the OpenAI API: the text of each generated token (for `logprobs.tokens` and
// `text_offset`) and stop sequences. The engine stops on token ids only, so stop *strings* are
// matched here, token by token as a sample streams: text that might begin a stop sequence is held
// back until it cannot, and neither the match nor a token that reaches into it is ever returned.
#pragma once

#include <string>
#include <vector>

#include "streamrl/engine/sample.h"
#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::server {

// The text of each token as tokens arrive, such that the pieces concatenate to the decoded
// completion (special tokens decode to ""). A token that ends inside a multi-byte character is held
// until the token that completes the character, which carries all of it (the held ones get "").
// Each token is decoded with a few tokens of left context, so the cost is linear in the tokens.
class PieceDecoder {
 public:
  explicit PieceDecoder(const tokenizer::Tokenizer& tok) : tok_(tok) {}

  // Adds a token; returns the pieces of the tokens settled by it, oldest first (none while a
  // character is unfinished).
  std::vector<std::string> push(int32_t id);
  // Settles the held tokens at the end of the sample (an unfinished character decodes as the
  // tokenizer renders it).
  std::vector<std::string> finish();

 private:
  std::vector<std::string> settle(bool final);

  const tokenizer::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t emitted_ = 0;  // tokens [0, emitted_) are settled
};

// PieceDecoder over all of `ids`. Thread-safe (the tokenizer is).
std::vector<std::string> token_pieces(const tokenizer::Tokenizer& tok,
                                      const std::vector<int32_t>& ids);

// One returned token: its text, id and log-probs.
struct TokenText {
  std::string piece;
  int32_t id = 0;
  float logprob = 0;
  std::vector<engine::TokenLogprob> top;
};

// What a choice releases at a time: text and the tokens whose whole text it is. Only at a stop
// match may `text` end with part of a token that is not listed (the part before the match).
struct ChoiceDelta {
  std::string text;
  std::vector<TokenText> tokens;
  bool empty() const { return text.empty() && tokens.empty(); }
};

// The text of one choice (one sample) as its tokens stream in, cut at the earliest stop sequence.
class ChoiceText {
 public:
  ChoiceText(const tokenizer::Tokenizer& tok, std::vector<std::string> stop)
      : decoder_(tok), stop_(std::move(stop)) {}

  // Adds the next sampled token; returns what can be released now. Nothing once stopped().
  ChoiceDelta add(int32_t id, float logprob, std::vector<engine::TokenLogprob> top);
  // The sample ended: releases everything held (still cut at a stop match).
  ChoiceDelta finish();
  // A stop sequence matched: the choice is complete and wants no more tokens.
  bool stopped() const { return stopped_; }

 private:
  ChoiceDelta release(bool final);

  PieceDecoder decoder_;
  const std::vector<std::string> stop_;
  std::vector<TokenText> unsettled_;  // added, text not yet known (PieceDecoder holds them)
  std::vector<TokenText> pending_;    // text known, not yet released
  bool stopped_ = false;
};

}  // namespace streamrl::server
