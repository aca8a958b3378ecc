// A Hugging Face checkpoint used unchanged by the CLI: a tiny Qwen2-style model written here
// byte by byte as sharded BF16 safetensors (not by streamrl's own writer), with a byte-level BPE
// tokenizer.json, a tokenizer_config.json carrying a ChatML template and a generation_config.json.
// `generate`, `eval --data chat.jsonl`, `sft` and `train` run on it; generation_config.json's
// sampling defaults and EOS ids take effect; a chat dataset on a checkpoint without a template is a
// one-line error naming the record.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "run_binary.h"

namespace streamrl {
namespace {
using nlohmann::json;
using testing_util::last_line;
using testing_util::run_streamrl;
namespace fs = std::filesystem;

constexpr int kHidden = 32, kInter = 64, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 8;
constexpr int kMaxPositions = 256;
// Byte tokens 0..255, then the merges, then the special tokens.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "s"}};
constexpr int kEndOfText = 260, kImStart = 261, kImEnd = 262, kVocab = 272;

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others move to U+0100+.
std::string byte_char(unsigned char b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
  int cp = b;
  if (!printable) {
    int shift = 0;
    for (int c = 0; c < b; ++c) {
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE)) ++shift;
    }
    cp = 256 + shift;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string mapped(const std::string& raw) {
  std::string out;
  for (unsigned char c : raw) out += byte_char(c);
  return out;
}

json tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  json merges = json::array();
  for (size_t i = 0; i < kMerges.size(); ++i) {
    const auto& [a, b] = kMerges[i];
    vocab[mapped(a + b)] = 256 + static_cast<int>(i);
    // Both merge forms appear in real files; use the pair form for half of them.
    if (i % 2) {
      merges.push_back({mapped(a), mapped(b)});
    } else {
      merges.push_back(mapped(a) + " " + mapped(b));
    }
  }
  json added = json::array();
  int id = kEndOfText;
  for (const char* t : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    added.push_back({{"id", id++},
                     {"content", t},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  const char* qwen2_pattern =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"},
                 {"pattern", {{"Regex", qwen2_pattern}}},
                 {"behavior", "Isolated"},
                 {"invert", false}},
                {{"type", "ByteLevel"},
                 {"add_prefix_space", false},
                 {"trim_offsets", false},
                 {"use_regex", false}}}}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", {{"type", "NFC"}}},
          {"pre_tokenizer", pre},
          {"post_processor",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", false},
            {"use_regex", false}}},
          {"decoder",
           {{"type", "ByteLevel"},
            {"add_prefix_space", false},
            {"trim_offsets", false},
            {"use_regex", false}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", ""},
            {"end_of_word_suffix", ""},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merges}}}};
}

// Qwen2.5-Instruct's template, shortened to its non-tool branch (what selection looks at).
constexpr const char* kChatMlTemplate =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] "
    "+ '<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba "
    "Cloud. You are a helpful assistant.<|im_end|>\\n' }}{%- endif %}{%- for message in messages "
    "%}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- "
    "endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// A tensor of `shape` in BF16 bytes: deterministic values around `center` with spread `scale`.
std::string bf16_bytes(const std::vector<int64_t>& shape, float center, float scale,
                       uint64_t* state) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    const float u = static_cast<float>(*state >> 40) / static_cast<float>(1 << 24);  // [0, 1)
    const float v = center + scale * (2 * u - 1);
    uint32_t bits;
    std::memcpy(&bits, &v, 4);
    const uint16_t bf = static_cast<uint16_t>(bits >> 16);  // truncation is a valid BF16 value
    out += static_cast<char>(bf & 0xFF);
    out += static_cast<char>(bf >> 8);
  }
  return out;
}

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string bytes;
};

void write_safetensors(const fs::path& path, const std::vector<Tensor>& tensors) {
  json header = {{"__metadata__", {{"format", "pt"}}}};
  size_t offset = 0;
  for (const Tensor& t : tensors) {
    header[t.name] = {
        {"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  const uint64_t len = h.size();
  std::ofstream f(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xFF));
  f << h;
  for (const Tensor& t : tensors) f << t.bytes;
}

// Qwen2 layout: QKV bias, tied embeddings; layer 0 and the embedding in one shard, the rest in
// the other.
void write_checkpoint(const fs::path& dir) {
  fs::create_directories(dir);
  uint64_t state = 12345;
  std::vector<Tensor> shard[2];
  auto add = [&](int s, const std::string& name, std::vector<int64_t> shape, float center,
                 float scale) {
    shard[s].push_back({name, shape, bf16_bytes(shape, center, scale, &state)});
  };
  add(0, "model.embed_tokens.weight", {kVocab, kHidden}, 0, 0.5f);
  for (int l = 0; l < kLayers; ++l) {
    const int s = l == 0 ? 0 : 1;
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(s, p + "input_layernorm.weight", {kHidden}, 1, 0.1f);
    add(s, p + "self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden}, 0, 0.3f);
    add(s, p + "self_attn.q_proj.bias", {kHeads * kHeadDim}, 0, 0.1f);
    add(s, p + "self_attn.k_proj.weight", {kKvHeads * kHeadDim, kHidden}, 0, 0.3f);
    add(s, p + "self_attn.k_proj.bias", {kKvHeads * kHeadDim}, 0, 0.1f);
    add(s, p + "self_attn.v_proj.weight", {kKvHeads * kHeadDim, kHidden}, 0, 0.3f);
    add(s, p + "self_attn.v_proj.bias", {kKvHeads * kHeadDim}, 0, 0.1f);
    add(s, p + "self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim}, 0, 0.3f);
    add(s, p + "post_attention_layernorm.weight", {kHidden}, 1, 0.1f);
    add(s, p + "mlp.gate_proj.weight", {kInter, kHidden}, 0, 0.3f);
    add(s, p + "mlp.up_proj.weight", {kInter, kHidden}, 0, 0.3f);
    add(s, p + "mlp.down_proj.weight", {kHidden, kInter}, 0, 0.3f);
  }
  add(1, "model.norm.weight", {kHidden}, 1, 0.1f);
  json weight_map = json::object();
  for (int s = 0; s < 2; ++s) {
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-00002.safetensors";
    write_safetensors(dir / file, shard[s]);
    for (const Tensor& t : shard[s]) weight_map[t.name] = file;
  }
  std::ofstream(dir / "model.safetensors.index.json")
      << json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump(2);
  std::ofstream(dir / "config.json") << json{
      {"architectures", {"Qwen2ForCausalLM"}},
      {"model_type", "qwen2"},
      {"vocab_size", kVocab},
      {"hidden_size", kHidden},
      {"intermediate_size", kInter},
      {"num_hidden_layers", kLayers},
      {"num_attention_heads", kHeads},
      {"num_key_value_heads", kKvHeads},
      {"max_position_embeddings", kMaxPositions},
      {"max_window_layers", kLayers},
      {"rope_theta", 1000000.0},
      {"rope_scaling", nullptr},
      {"rms_norm_eps", 1e-6},
      {"hidden_act", "silu"},
      {"sliding_window", nullptr},
      {"use_sliding_window", false},
      {"tie_word_embeddings", true},
      {"torch_dtype", "bfloat16"},
      {"bos_token_id", kEndOfText},
      {"eos_token_id", kImEnd}}.dump(2);
  std::ofstream(dir / "tokenizer.json") << tokenizer_json().dump();
  std::ofstream(dir / "tokenizer_config.json")
      << json{{"add_bos_token", false},    {"bos_token", nullptr},
              {"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"},
              {"model_max_length", 32768}, {"chat_template", kChatMlTemplate}}
             .dump(2);
}

void write_generation_config(const fs::path& dir, const json& config) {
  std::ofstream(dir / "generation_config.json") << config.dump(2);
}

class HfCheckpointCli : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing_util::fresh_temp_dir("hf_checkpoint_cli");
    write_checkpoint(ckpt());
    std::ofstream data(dir_ + "/chat.jsonl");
    for (int a = 1; a <= 8; ++a) {
      for (int b = 1; b <= 6; ++b) {
        json messages = {
            {{"role", "user"},
             {"content", "What is " + std::to_string(a) + "+" + std::to_string(b) + "?"}}};
        if (b % 2) messages.push_back({{"role", "assistant"}, {"content", std::to_string(a + b)}});
        data << json{{"messages", messages}, {"answer", a + b}}.dump() << "\n";
      }
    }
  }
  static fs::path ckpt() { return fs::path(dir_) / "qwen2-tiny"; }

  void SetUp() override {
    write_generation_config(ckpt(), {{"bos_token_id", kEndOfText},
                                     {"eos_token_id", {kImEnd, kEndOfText}},
                                     {"do_sample", true},
                                     {"temperature", 0.7},
                                     {"top_p", 0.8},
                                     {"top_k", 20}});
  }

  // The output tokens of `streamrl generate` for one chat prompt.
  std::vector<int> generate(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {
        "generate",         "--ckpt", ckpt().string(), "--prompt", "What is 2+2?", "--chat",
        "--max-new-tokens", "6",      "--threads",     "1",        "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_streamrl(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    if (r.exit_code != 0) return {};
    json j = json::parse(last_line(r.output));
    return j["samples"][0]["tokens"].get<std::vector<int>>();
  }

  static std::string dir_;
};
std::string HfCheckpointCli::dir_;

TEST_F(HfCheckpointCli, GenerateTakesSamplingDefaultsAndEosIdsFromGenerationConfig) {
  // Sampling at the file's temperature: different seeds give different samples.
  const std::vector<int> a = generate({"--seed", "1"}), b = generate({"--seed", "2"});
  ASSERT_FALSE(a.empty());
  EXPECT_NE(a, b);
  // "do_sample": false makes the default greedy: seeds no longer matter.
  write_generation_config(ckpt(), {{"do_sample", false}});
  const std::vector<int> g1 = generate({"--seed", "1"}), g2 = generate({"--seed", "2"});
  ASSERT_EQ(g1.size(), 6u);
  EXPECT_EQ(g1, g2);
  // An explicit --temperature still wins over the file.
  EXPECT_NE(generate({"--seed", "1", "--temperature", "5"}), g1);
  // The file's EOS ids stop generation: make the first greedy token one of them.
  write_generation_config(ckpt(), {{"do_sample", false}, {"eos_token_id", {kImEnd, g1[0]}}});
  EXPECT_EQ(generate({}), std::vector<int>{g1[0]});
}

TEST_F(HfCheckpointCli, EvalOnChatDataset) {
  auto r = run_streamrl({"eval", "--ckpt", ckpt().string(), "--data", dir_ + "/chat.jsonl", "--n",
                         "4", "--max-new-tokens", "4", "--threads", "1", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(last_line(r.output));
  EXPECT_EQ(j["n"], 4);
  EXPECT_LE(j["mean_length"].get<double>(), 4.0);
}

TEST_F(HfCheckpointCli, SftAndOneTrainIterationOnChatDataset) {
  std::ofstream sft(dir_ + "/sft.yaml");
  sft << "run: {dir: " << dir_ << "/runs, name: sft, threads: 1}\n"
      << "model: {init_from: " << ckpt().string() << "}\n"
      << "data: {jsonl: " << dir_ << "/chat.jsonl, verifier: numeric}\n"
      << "train: {steps: 2, batch_size: 4}\n"
      << "eval: {n: 2, max_new_tokens: 4}\ncheckpoint: {every: 0}\n";
  sft.close();
  auto r = run_streamrl({"sft", "--config", dir_ + "/sft.yaml", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::ofstream rl(dir_ + "/rl.yaml");
  rl << "run: {dir: " << dir_ << "/runs, name: rl, threads: 1}\n"
     << "policy: {init_from: " << ckpt().string() << "}\n"
     << "data: {jsonl: " << dir_ << "/chat.jsonl, verifier: numeric}\n"
     << "rollout: {prompts_per_iteration: 2, group_size: 2, max_new_tokens: 6}\n"
     << "train: {iterations: 1}\n"
     << "eval: {n: 2, max_new_tokens: 4}\ncheckpoint: {every: 0}\n";
  rl.close();
  r = run_streamrl({"train", "--config", dir_ + "/rl.yaml", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  json j = json::parse(last_line(r.output));
  EXPECT_TRUE(j.contains("accuracy_after")) << j.dump();
  // The fine-tuned checkpoints keep the chat template and generation defaults, so they can be
  // evaluated on the chat dataset as they are.
  for (const char* run : {"sft", "rl"}) {
    const fs::path final_dir = fs::path(dir_) / "runs" / run / "final";
    EXPECT_TRUE(fs::exists(final_dir / "tokenizer_config.json")) << run;
    EXPECT_TRUE(fs::exists(final_dir / "generation_config.json")) << run;
  }
  r = run_streamrl({"eval", "--ckpt", dir_ + "/runs/rl/final", "--data", dir_ + "/chat.jsonl",
                    "--n", "2", "--max-new-tokens", "4", "--threads", "1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(HfCheckpointCli, ChatDatasetWithoutTemplateIsOneLineError) {
  const fs::path plain = fs::path(dir_) / "no-template";
  fs::create_directories(plain);
  for (const char* f : {"config.json", "tokenizer.json", "model.safetensors.index.json",
                        "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    fs::copy_file(ckpt() / f, plain / f, fs::copy_options::overwrite_existing);
  }
  auto r = run_streamrl({"eval", "--ckpt", plain.string(), "--data", dir_ + "/chat.jsonl", "--n",
                         "2", "--threads", "1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir_ +
                          "/chat.jsonl:1: a chat \"messages\" record needs the model's "
                          "chat template, but no chat template in " +
                          (plain / "tokenizer_config.json").string()),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace streamrl
