// Tokenizer factories: the built-in character tokenizer by name, or a tokenizer.json from disk.
#include "streamrl/tokenizer/tokenizer.h"

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/tokenizer/bpe_tokenizer.h"
#include "streamrl/tokenizer/char_tokenizer.h"

namespace streamrl::tokenizer {

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text) {
  std::vector<int32_t> body = tok.encode(text);
  const int32_t bos = tok.bos_id();
  if (bos < 0 || (!body.empty() && body.front() == bos)) return body;
  std::vector<int32_t> ids;
  ids.reserve(body.size() + 1);
  ids.push_back(bos);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  TokenizerConfig config;
  if (fs::is_directory(path)) {
    file = path / "tokenizer.json";
    if (!fs::exists(file)) throw InputError("no tokenizer.json in directory " + path.string());
    const fs::path config_file = path / "tokenizer_config.json";
    if (fs::exists(config_file)) {
      config = parse_tokenizer_config(core::read_file(config_file), config_file.string());
    }
  }
  return std::make_unique<BpeTokenizer>(core::read_file(file), file.string(), config);
}

std::unique_ptr<Tokenizer> make_tokenizer(std::string_view name_or_path) {
  if (name_or_path == "char") return std::make_unique<CharTokenizer>();
  return load_tokenizer(std::filesystem::path(name_or_path));
}

}  // namespace streamrl::tokenizer
