#include "streamrl/tokenizer/jinja/lexer.h"

#include <cctype>

#include "streamrl/tokenizer/jinja/value.h"
#include "streamrl/tokenizer/unicode.h"

namespace streamrl::tokenizer::jinja {
namespace {

constexpr const char* kSpace = " \t\n\r\f\v";

bool is_space(char c) { return std::string_view(kSpace).find(c) != std::string_view::npos; }

class Lexer {
 public:
  // jinja2 drops one trailing newline of the source.
  explicit Lexer(std::string_view src) {
    if (!src.empty() && src.back() == '\n') src.remove_suffix(1);
    src_ = src;
  }

  std::vector<Token> run() {
    bool strip_next_text = false;
    while (pos_ < src_.size()) {
      size_t open = src_.find('{', pos_);
      while (open != std::string::npos &&
             (open + 1 >= src_.size() ||
              std::string_view("{%#").find(src_[open + 1]) == std::string_view::npos)) {
        open = src_.find('{', open + 1);
      }
      std::string text = src_.substr(pos_, open == std::string::npos ? open : open - pos_);
      const char kind = open == std::string::npos ? '\0' : src_[open + 1];
      const bool strip_before =
          open != std::string::npos && open + 2 < src_.size() && src_[open + 2] == '-';
      if (strip_next_text) text.erase(0, text.find_first_not_of(kSpace));
      if (strip_before) {
        text.erase(text.find_last_not_of(kSpace) + 1);
      } else if (kind == '%' || kind == '#') {
        lstrip_block(text);
      }
      count_lines(pos_, open == std::string::npos ? src_.size() : open);
      if (!text.empty()) tokens_.push_back({Token::Kind::kText, text, line_});
      if (open == std::string::npos) break;
      pos_ = open + 2 + (strip_before ? 1 : 0);
      if (kind == '#') {
        const size_t close = src_.find("#}", pos_);
        if (close == std::string::npos) fail("unterminated comment");
        strip_next_text = close > 0 && src_[close - 1] == '-';
        count_lines(pos_, close + 2);
        pos_ = close + 2;
        trim_block();
        continue;
      }
      const bool output = kind == '{';
      tokens_.push_back({output ? Token::Kind::kOutputOpen : Token::Kind::kBlockOpen, "", line_});
      strip_next_text = lex_tag(output);
      if (!output) trim_block();
    }
    tokens_.push_back({Token::Kind::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw TemplateError("chat template line " + std::to_string(line_) + ": " + what);
  }

  // lstrip_blocks: the spaces and tabs between a line start and a {% or {# tag go. `text` ends
  // at the tag and starts at pos_.
  void lstrip_block(std::string& text) const {
    const size_t newline = text.rfind('\n');
    if (newline == std::string::npos && pos_ > 0 && src_[pos_ - 1] != '\n') return;
    const size_t start = newline == std::string::npos ? 0 : newline + 1;
    if (text.find_first_not_of(" \t", start) == std::string::npos) text.erase(start);
  }

  // trim_blocks: the newline right after a %} or #} goes.
  void trim_block() {
    if (pos_ < src_.size() && src_[pos_] == '\n') ++pos_, ++line_;
  }

  void count_lines(size_t from, size_t to) {
    for (size_t i = from; i < to && i < src_.size(); ++i) line_ += src_[i] == '\n';
  }

  bool at(std::string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }

  // Tokens up to the closing }} or %}; returns whether it was -}} / -%}.
  bool lex_tag(bool output) {
    const std::string close = output ? "}}" : "%}";
    int braces = 0;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) fail("unterminated tag");
      if (braces == 0 && (at(close) || (at("-") && src_.compare(pos_ + 1, 2, close) == 0))) {
        const bool strip = src_[pos_] == '-';
        pos_ += strip ? 3 : 2;
        tokens_.push_back(
            {output ? Token::Kind::kOutputClose : Token::Kind::kBlockClose, "", line_});
        return strip;
      }
      const char c = src_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        const size_t start = pos_;
        while (pos_ < src_.size() &&
               (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
          ++pos_;
        tokens_.push_back({Token::Kind::kName, src_.substr(start, pos_ - start), line_});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        const size_t start = pos_;
        while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
        bool is_float = false;
        if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
          is_float = true;
          ++pos_;
          while (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) ++pos_;
        }
        tokens_.push_back({is_float ? Token::Kind::kFloat : Token::Kind::kInteger,
                           src_.substr(start, pos_ - start), line_});
      } else if (c == '\'' || c == '"') {
        tokens_.push_back({Token::Kind::kString, lex_string(c), line_});
      } else {
        static const char* kOperators[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                           "/",  "%",  "~",  "<",  ">",  "=",  "(", ")", "[",
                                           "]",  "{",  "}",  ",",  ".",  ":",  "|"};
        bool found = false;
        for (const char* op : kOperators) {
          if (at(op)) {
            braces += op[0] == '{' ? 1 : op[0] == '}' ? -1 : 0;
            tokens_.push_back({Token::Kind::kOperator, op, line_});
            pos_ += std::string_view(op).size();
            found = true;
            break;
          }
        }
        if (!found) fail(std::string("unexpected character '") + c + "'");
      }
    }
  }

  std::string lex_string(char quote) {
    std::string out;
    ++pos_;
    while (pos_ < src_.size() && src_[pos_] != quote) {
      char c = src_[pos_++];
      line_ += c == '\n';
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= src_.size()) break;
      c = src_[pos_++];
      switch (c) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'v':
          out += '\v';
          break;
        case '0':
          out += '\0';
          break;
        case 'x':
        case 'u': {
          const size_t n = c == 'x' ? 2 : 4;
          const std::string hex = src_.substr(pos_, n);
          if (hex.size() != n ||
              hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos) {
            fail("bad \\" + std::string(1, c) + " escape");
          }
          unicode::append_utf8(out, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
          pos_ += n;
          break;
        }
        default:
          out += c;  // \\ \' \" and unknown escapes keep the character
      }
    }
    if (pos_ >= src_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace streamrl::tokenizer::jinja
