#include "streamrl/core/config.h"

#include <algorithm>
#include <functional>

#include "streamrl/core/fs.h"

namespace streamrl::core {
namespace {

std::vector<std::string> split_dots(std::string_view key) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    parts.emplace_back(key.substr(start, dot == std::string_view::npos ? dot : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return parts;
}

// Sets root[a][b][c] = value, creating maps on the way. yaml-cpp nodes are handles, so assigning
// through a chain of operator[] results mutates the tree.
void set_path(YAML::Node root, const std::vector<std::string>& parts, const YAML::Node& value) {
  YAML::Node cur = root;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node next = cur[parts[i]];
    if (!next.IsDefined() || !next.IsMap()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    }
    cur.reset(next);
  }
  cur[parts.back()] = value;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

Config Config::from_string(const std::string& yaml, const std::vector<std::string>& overrides,
                           const std::string& source) {
  auto state = std::make_shared<State>();
  state->source = source;
  try {
    state->root = yaml.empty() ? YAML::Node(YAML::NodeType::Map) : YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw InputError(source + ": malformed YAML at line " + std::to_string(e.mark.line + 1) + ": " +
                     e.msg);
  }
  if (state->root.IsNull()) state->root = YAML::Node(YAML::NodeType::Map);
  if (!state->root.IsMap()) throw InputError(source + ": top level must be a mapping of keys");
  for (const std::string& ov : overrides) {
    size_t eq = ov.find('=');
    if (eq == std::string::npos || eq == 0) {
      throw InputError("override '" + ov + "' must have the form key.sub=value");
    }
    YAML::Node value;
    try {
      value = YAML::Load(ov.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      throw InputError("override '" + ov + "': malformed value: " + e.msg);
    }
    set_path(state->root, split_dots(ov.substr(0, eq)), value);
  }
  state->resolved = YAML::Node(YAML::NodeType::Map);
  YAML::Node root = state->root;
  return Config(std::move(state), root, "");
}

Config Config::from_file(const std::string& path, const std::vector<std::string>& overrides) {
  return from_string(read_file(path), overrides, path);
}

std::string Config::full_key(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : prefix_ + "." + std::string(key);
}

bool Config::has(std::string_view key) const {
  YAML::Node n = node_[std::string(key)];
  return n.IsDefined() && !n.IsNull();
}

Config Config::section(std::string_view key) const {
  std::string full = full_key(key);
  YAML::Node n = node_[std::string(key)];
  if (n.IsDefined() && !n.IsNull() && !n.IsMap()) {
    throw InputError("config key '" + full + "' must be a mapping");
  }
  state_->used.insert(full);
  // An absent section reads as an empty map (a fresh node: `n` may be an invalid handle).
  YAML::Node sub = (n.IsDefined() && !n.IsNull()) ? n : YAML::Node(YAML::NodeType::Map);
  return Config(state_, sub, full);
}

void Config::record(const std::string& full_key, const YAML::Node& value) const {
  set_path(state_->resolved, split_dots(full_key), value);
}

void Config::check_all_used() const {
  std::vector<std::string> leaves;
  std::function<void(const YAML::Node&, const std::string&)> walk = [&](const YAML::Node& n,
                                                                        const std::string& path) {
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string key =
          path.empty() ? it->first.as<std::string>() : path + "." + it->first.as<std::string>();
      if (!state_->used.count(key)) {
        leaves.push_back(key);
      } else if (it->second.IsMap()) {
        walk(it->second, key);
      }
    }
  };
  walk(node_, prefix_);
  if (leaves.empty()) return;
  const std::string& bad = leaves.front();
  std::string best;
  size_t best_d = 3;
  for (const std::string& known : state_->known) {
    size_t d = edit_distance(bad, known);
    if (d < best_d) best_d = d, best = known;
  }
  std::string msg = state_->source + ": unknown config key '" + bad + "'";
  if (!best.empty()) msg += " (did you mean '" + best + "'?)";
  throw InputError(msg);
}

std::string Config::resolved_yaml() const {
  YAML::Emitter out;
  out << state_->resolved;
  return std::string(out.c_str()) + "\n";
}

}  // namespace streamrl::core
