// Completion text for the OpenAI API: the text of each generated token (for `logprobs.tokens` and
// `text_offset`) and stop sequences. The engine stops on token ids only, so stop *strings* are
// applied here to the finished sample: the text is cut and the tokens after the match dropped.
#pragma once

#include <string>
#include <vector>

#include "streamrl/tokenizer/tokenizer.h"

namespace streamrl::server {

// The text of each token of `ids`, such that the pieces concatenate to the decoded completion
// (special tokens decode to ""). A token that ends inside a multi-byte character gets "" and the
// token that completes the character carries all of it. Each token is decoded with a few tokens of
// left context, so the cost is linear in ids.size(). Thread-safe (the tokenizer is).
std::vector<std::string> token_pieces(const tokenizer::Tokenizer& tok,
                                      const std::vector<int32_t>& ids);

struct StopResult {
  std::string text;      // completion text, ending before the earliest stop sequence
  size_t tokens = 0;     // tokens kept: up to and including the one that completed the match
  bool stopped = false;  // a stop sequence matched
};

// Cuts the concatenation of `pieces` at the earliest occurrence of any of `stop` (the match itself
// is not returned, as in OpenAI's API). Without a match the whole text and every token are kept.
StopResult apply_stop_sequences(const std::vector<std::string>& pieces,
                                const std::vector<std::string>& stop);

}  // namespace streamrl::server
