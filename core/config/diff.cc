// Flattens each document to (dotted key, value text) pairs and compares them by key, so a list
// grown by one item shows as that key, not as every later line shifted.
#include "core/config/diff.h"

#include <yaml-cpp/yaml.h>

#include <map>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace aiacc::config {
namespace {

constexpr const char* kAbsent = "(absent)";

using Flat = std::vector<std::pair<std::string, std::string>>;

std::string child_key(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

bool all_scalars(const YAML::Node& sequence) {
  for (const auto& item : sequence) {
    if (!item.IsScalar() && !item.IsNull()) return false;
  }
  return true;
}

std::string scalar_text(const YAML::Node& node) { return node.IsNull() ? "null" : node.Scalar(); }

// Configs nest a few levels; an alias of an enclosing node (`&a {b: *a}`) nests for ever.
constexpr int kMaxDepth = 32;

void flatten(const YAML::Node& node, const std::string& key, Flat& out, int depth = 0) {
  if (depth > kMaxDepth) {
    out.emplace_back(key, "(nested too deep)");
  } else if (node.IsMap()) {
    if (node.size() == 0) out.emplace_back(key, "{}");
    for (const auto& entry : node) {
      flatten(entry.second, child_key(key, entry.first.as<std::string>()), out, depth + 1);
    }
  } else if (node.IsSequence() && all_scalars(node)) {
    std::vector<std::string> items;
    for (const auto& item : node) items.push_back(scalar_text(item));
    out.emplace_back(key, fmt::format("[{}]", fmt::join(items, ", ")));
  } else if (node.IsSequence()) {
    for (std::size_t i = 0; i < node.size(); ++i) flatten(node[i], fmt::format("{}[{}]", key, i), out, depth + 1);
  } else {
    out.emplace_back(key.empty() ? "(document)" : key, scalar_text(node));
  }
}

Flat flat_document(const std::string& text) {
  Flat out;
  try {
    flatten(YAML::Load(text), "", out);
  } catch (const YAML::Exception&) {
    out = {{"(document)", text}};
  }
  return out;
}

}  // namespace

std::vector<ValueDifference> yaml_differences(const std::string& first, const std::string& second) {
  const Flat a = flat_document(first), b = flat_document(second);
  std::map<std::string, const std::string*> in_b;
  for (const auto& [key, value] : b) in_b.emplace(key, &value);
  std::map<std::string, bool> in_a;
  std::vector<ValueDifference> out;
  for (const auto& [key, value] : a) {
    in_a.emplace(key, true);
    const auto it = in_b.find(key);
    const std::string other = it == in_b.end() ? kAbsent : *it->second;
    if (other != value) out.push_back({key, value, other});
  }
  for (const auto& [key, value] : b) {
    if (!in_a.count(key)) out.push_back({key, kAbsent, value});
  }
  return out;
}

std::string format_differences(const std::vector<ValueDifference>& differences, std::size_t limit) {
  std::vector<std::string> shown;
  for (std::size_t i = 0; i < differences.size() && i < limit; ++i) {
    const auto& d = differences[i];
    shown.push_back(fmt::format("{}: {} -> {}", d.key, d.first, d.second));
  }
  std::string text = fmt::format("{}", fmt::join(shown, "; "));
  if (differences.size() > limit) text += fmt::format("; and {} more", differences.size() - limit);
  return text;
}

}  // namespace aiacc::config
