#include "streamrl/tokenizer/char_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "run_binary.h"
#include "streamrl/core/fs.h"
#include "streamrl/tokenizer/bpe_tokenizer.h"

namespace streamrl::tokenizer {
namespace {

using Ids = std::vector<int32_t>;

std::string printable_ascii() {
  std::string text = "\n";
  for (char c = ' '; c <= '~'; ++c) text.push_back(c);
  return text;
}

TEST(CharTokenizer, IdsAndRoundTrip) {
  CharTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 100);
  EXPECT_EQ(tok.encode("1+2=3\n"), (Ids{22, 16, 23, 34, 24, 4}));
  const std::string all = printable_ascii();
  const Ids ids = tok.encode(all);
  ASSERT_EQ(ids.size(), all.size());
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<int32_t>(i) + 4);
  EXPECT_EQ(tok.decode(ids), all);
}

TEST(CharTokenizer, UnknownCharactersAreOneUnkPerCodePoint) {
  CharTokenizer tok;
  EXPECT_EQ(tok.encode("é\t中😀x"), (Ids{3, 3, 3, 3, 93}));
  EXPECT_EQ(tok.encode("a\xFF"
                       "b"),
            (Ids{70, 3, 71}));  // ill-formed byte: one U+FFFD
  EXPECT_EQ(tok.decode({70, 3, 71}),
            "a\xEF\xBF\xBD"
            "b");
  EXPECT_EQ(tok.decode({70, 3, 71}, false), "a<unk>b");
}

TEST(CharTokenizer, SpecialTokens) {
  CharTokenizer tok;
  EXPECT_EQ(tok.encode("<bos>hi<eos><b"), (Ids{1, 77, 78, 2, 33, 71}));
  EXPECT_EQ(tok.encode("hi", true), (Ids{1, 77, 78}));
  EXPECT_EQ(tok.decode({1, 77, 78, 2, 0, 0}), "hi");
  EXPECT_EQ(tok.decode({1, 77, 78, 2, 0}, false), "<bos>hi<eos><pad>");
  EXPECT_EQ(tok.decode({77, 100, -1, 78}), "hi");  // out-of-range ids are skipped
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.token_to_id("<unk>"), 3);
  EXPECT_EQ(tok.token_to_id("a"), 70);
  EXPECT_EQ(tok.token_to_id("ab"), std::nullopt);
  EXPECT_EQ(tok.token_to_id("\t"), std::nullopt);
  EXPECT_EQ(tok.id_to_token(4), "\n");
  EXPECT_EQ(tok.id_to_token(100), std::nullopt);
}

TEST(CharTokenizer, ToJsonLoadsBackWithIdenticalIds) {
  CharTokenizer builtin;
  BpeTokenizer loaded(builtin.to_json(), "char.json");
  const std::string texts[] = {printable_ascii(), "Q: 12*(3+4)=?\nA: 84<eos>",
                               "<bos><pad><unk>é\t中😀 x\xFF<b",
                               std::string(1000, 'z') + "\n" + std::string(300, ' ')};
  for (const std::string& text : texts) {
    for (bool add_special : {false, true}) {
      const Ids ids = builtin.encode(text, add_special);
      EXPECT_EQ(loaded.encode(text, add_special), ids) << text;
      EXPECT_EQ(loaded.decode(ids, false), builtin.decode(ids, false)) << text;
    }
  }
  EXPECT_EQ(loaded.vocab_size(), builtin.vocab_size());
  EXPECT_EQ(loaded.bos_id(), builtin.bos_id());
  EXPECT_EQ(loaded.eos_id(), builtin.eos_id());
  EXPECT_EQ(loaded.pad_id(), builtin.pad_id());
  for (int32_t id = 0; id < builtin.vocab_size(); ++id) {
    EXPECT_EQ(loaded.id_to_token(id), builtin.id_to_token(id));
  }
}

TEST(CharTokenizer, SavedDirectoryLoadsThroughTheFactory) {
  namespace fs = std::filesystem;
  const fs::path dir = testing_util::fresh_temp_dir("char_tokenizer_test");
  CharTokenizer builtin;
  core::write_file_atomic(dir / "tokenizer.json", builtin.to_json());
  auto loaded = load_tokenizer(dir);
  EXPECT_EQ(loaded->encode("x=1\n", true), builtin.encode("x=1\n", true));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace streamrl::tokenizer
