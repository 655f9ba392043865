// A configuration document (one YAML file plus --set overrides) and located views of its nodes.
// Every error raised through a Node names where the value came from: "job.yaml:12:5" for a file
// value, "--set model.depth=50" for an override, and the dotted key path.
#pragma once

#include <yaml-cpp/yaml.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace aiacc::config {

class Node;

class Document {
 public:
  // Parses `path`. Throws ConfigError naming file:line:column on a YAML syntax error, and
  // ConfigError when the file cannot be read.
  static Document from_file(const std::string& path);
  // Parses `text`; `name` stands in for the file name in messages.
  static Document from_string(const std::string& text, const std::string& name);

  // Applies "dotted.key=value" (value parsed as YAML, e.g. 3, 0.1, true, [1, 2], text),
  // creating maps along the path; "key[N]" steps into entry N of a list the config already
  // has. Throws ConfigError on a malformed assignment, no value (null), a step into something
  // that is not a section or list, or an index past a list's end.
  void apply_override(const std::string& assignment);

  Node root() const;
  const std::string& name() const;

 private:
  struct Info {
    std::string name;
    std::map<std::string, std::string> overrides;  // dotted path -> the --set text
  };
  Document(std::string name, YAML::Node root);
  std::shared_ptr<Info> info_;
  YAML::Node root_;
  friend class Node;
};

class Node {
 public:
  Node() = default;

  bool present() const;           // defined and not null
  bool is_null() const;           // written with no value: `key:`, `key: ~`, `key: null`
  bool is_map() const;
  bool is_sequence() const;
  bool is_scalar() const;
  const std::string& path() const { return path_; }
  const YAML::Node& yaml() const { return node_; }
  std::string scalar() const;     // throws ConfigError unless a scalar

  // Where this node's value came from: "file:line:col", "--set k=v", or both when --set
  // changed keys inside a section of the file ("file:line:col (changed by --set a.b=1)"). For
  // an absent node: where its nearest present section is, since that is what lacks it.
  std::string where() const;
  // Where the key `key` of this map is written (for unknown-key errors).
  std::string where_key(const std::string& key) const;

  Node child(const std::string& key) const;        // absent node when missing
  Node element(std::size_t index) const;           // for sequences
  std::size_t size() const;
  std::vector<std::string> keys() const;           // map keys in file order

  // Throws ConfigError "where: path: message".
  [[noreturn]] void fail(const std::string& message) const;
  [[noreturn]] void fail_key(const std::string& key, const std::string& message) const;

 private:
  Node(std::shared_ptr<const Document::Info> info, YAML::Node node, std::string path);
  std::string override_for(const std::string& path) const;
  // A missing node at `path` under this one, which remembers the nearest present section.
  Node absent(const std::string& path) const;
  // A null `node` at `path` under this one, located by this one (yaml-cpp's position for it is
  // the next token's).
  Node with_no_value(const YAML::Node& node, const std::string& path) const;
  // Where a node of the document at `path` (`node` as yaml-cpp has it) came from.
  std::string located(const YAML::Node& node, const std::string& path) const;
  std::shared_ptr<const Document::Info> info_;
  YAML::Node node_;
  std::string path_;
  // For an absent or null node: its nearest present ancestor and that one's path.
  YAML::Node anchor_;
  std::string anchor_path_;
  friend class Document;
};

// "a.b" + "c" -> "a.b.c"; "" + "c" -> "c".
std::string join_path(const std::string& parent, const std::string& key);

// Whether `key` is the key `path` or a section holding it, i.e. whether a --set of `key` writes
// `path`'s value: "cluster.ring" holds "cluster.ring.interface", "placement" holds
// "placement[0].tables"; "cluster.ring" does not hold "cluster.ring_size".
bool is_key_or_section_holding(const std::string& key, const std::string& path);

}  // namespace aiacc::config
