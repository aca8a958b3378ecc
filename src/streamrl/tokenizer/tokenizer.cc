// Tokenizer factories: the built-in character tokenizer by name, or a tokenizer.json from disk.
#include "streamrl/tokenizer/tokenizer.h"

#include "streamrl/core/errors.h"
#include "streamrl/core/fs.h"
#include "streamrl/tokenizer/bpe_tokenizer.h"
#include "streamrl/tokenizer/char_tokenizer.h"

namespace streamrl::tokenizer {

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
