// Located YAML nodes and --set overrides.
#include "core/config/node.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <utility>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include "core/error.h"

namespace aiacc::config {

namespace {

std::string mark_text(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return file;
  return fmt::format("{}:{}:{}", file, mark.line + 1, mark.column + 1);
}

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  std::string current;
  for (char c : path) {
    if (c == '.') {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

// Whether `path` lies inside `prefix`: "a.b" and "a[0]" inside "a"; every path but "" inside "".
bool inside(const std::string& path, const std::string& prefix) {
  if (prefix.empty()) return !path.empty();
  return path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 &&
         (path[prefix.size()] == '.' || path[prefix.size()] == '[');
}

// The --set arguments that wrote somewhere inside `path`, as one phrase ("" when none).
std::string overrides_inside(const std::map<std::string, std::string>& overrides, const std::string& path) {
  constexpr std::size_t kNamed = 3;
  std::string out;
  std::size_t count = 0;
  for (const auto& [key, shown] : overrides) {
    if (!inside(key, path)) continue;
    if (count < kNamed) out += (count == 0 ? "" : "; ") + shown;
    ++count;
  }
  if (count > kNamed) out += fmt::format(" and {} more --set", count - kNamed);
  return out;
}

// Where `mark` (a position in the value of the --set `shown`) is, counted in the KEY=VALUE
// argument as typed: "column 26"; "" when the node has no position (made by --set itself).
std::string set_position(const std::string& shown, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return {};
  constexpr std::size_t kPrefix = 6;  // "--set "
  const std::size_t equals = shown.find('=', kPrefix);
  if (equals == std::string::npos) return {};
  if (mark.line > 0) return fmt::format("line {}, column {} of its value", mark.line + 1, mark.column + 1);
  return fmt::format("column {}", equals - kPrefix + 1 + mark.column + 1);
}

// One step of a --set key path: a map key, or an index into a list ("placement[0]").
struct Step {
  std::string key;
  bool is_index = false;
  std::size_t index = 0;
};

// "a.b[0].c" -> a, b, [0], c. Throws naming the assignment on an empty key or a malformed index.
std::vector<Step> parse_steps(const std::string& path, const std::string& shown) {
  std::vector<Step> steps;
  for (const auto& part : split_path(path)) {
    const std::size_t open = part.find('[');
    const std::string key = part.substr(0, open);
    if (key.empty()) throw ConfigError(fmt::format("{}: empty key in '{}'", shown, path));
    const auto malformed = [&] {
      return ConfigError(fmt::format("{}: '{}' is neither a key nor key[index] (an index is a whole number, "
                                     "e.g. placement[0])", shown, part));
    };
    if (key.find(']') != std::string::npos) throw malformed();
    steps.push_back({key});
    for (std::size_t at = open; at != std::string::npos && at < part.size();) {
      const std::size_t close = part.find(']', at);
      if (part[at] != '[' || close == std::string::npos || close == at + 1 || close - at - 1 > 9) throw malformed();
      const std::string digits = part.substr(at + 1, close - at - 1);
      if (digits.find_first_not_of("0123456789") != std::string::npos) throw malformed();
      steps.push_back({"", true, static_cast<std::size_t>(std::stoul(digits))});
      at = close + 1;
    }
  }
  return steps;
}

// Records where the first node of a document after the first one starts, if any has one.
class LaterDocumentFinder : public YAML::EventHandler {
 public:
  std::optional<YAML::Mark> found;
  int documents = 0;

  void OnDocumentStart(const YAML::Mark&) override { ++documents; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}  // an empty document is harmless
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

 private:
  void node(const YAML::Mark& mark) {
    if (documents > 1 && !found) found = mark;
  }
};

// Where a document after the first one holds something. Walks the event stream itself, with a
// bound on documents: yaml-cpp 0.7's LoadAll never returns on some malformed input (",job").
std::optional<YAML::Mark> later_document_content(const std::string& text) {
  constexpr int kMaxDocuments = 64;
  std::istringstream in(text);
  YAML::Parser parser(in);
  LaterDocumentFinder finder;
  for (int i = 0; i < kMaxDocuments && !finder.found && parser.HandleNextDocument(finder); ++i) {
  }
  return finder.found;
}

// The first line of `text` that holds something other than blanks, comments, directives and
// document markers, as (line, column) counted from 0. yaml-cpp reads some garbage (",job") as
// an empty document, which would otherwise run the default job.
std::optional<std::pair<int, int>> first_content(const std::string& text) {
  std::istringstream in(text);
  int line_number = 0;
  for (std::string line; std::getline(in, line); ++line_number) {
    std::size_t at = 0;
    if (line.rfind("%", 0) == 0) continue;
    if (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) {
      if (line.size() > 3 && line[3] != ' ' && line[3] != '\t' && line[3] != '\r') return std::pair{line_number, 0};
      at = 3;
    }
    at = line.find_first_not_of(" \t\r", at);
    if (at == std::string::npos || line[at] == '#') continue;
    return std::pair{line_number, static_cast<int>(at)};
  }
  return std::nullopt;
}

}  // namespace

std::string join_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

bool is_key_or_section_holding(const std::string& key, const std::string& path) {
  return path == key || inside(path, key);
}

Document::Document(std::string name, YAML::Node root)
    : info_(std::make_shared<Info>(Info{std::move(name), {}})), root_(std::move(root)) {
  if (!root_.IsDefined() || root_.IsNull()) root_ = YAML::Node(YAML::NodeType::Map);
}

Document Document::from_string(const std::string& text, const std::string& name) {
  try {
    YAML::Node root = YAML::Load(text);
    // Load reads the first document only: a second one (after "---") would be dropped without
    // a word, and with it whatever the user meant it to set.
    if (const auto second = later_document_content(text)) {
      throw ConfigError(fmt::format("{}: a second YAML document (after '---'); a config file holds one job, "
                                    "so merge the documents or split them into files",
                                    mark_text(name, *second)));
    }
    if (!root.IsDefined() || root.IsNull()) {
      if (const auto content = first_content(text)) {
        YAML::Mark mark;
        mark.line = content->first;
        mark.column = content->second;
        throw ConfigError(fmt::format("{}: reads as an empty YAML document; the top level must be a map of "
                                      "sections (job:, model:, ...)",
                                      mark_text(name, mark)));
      }
    } else if (!root.IsMap()) {
      throw ConfigError(fmt::format("{}: the top level must be a map of sections (job:, model:, ...)",
                                    mark_text(name, root.Mark())));
    }
    return Document(name, root);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}: YAML syntax error: {}", mark_text(name, e.mark), e.msg));
  }
}

Document Document::from_file(const std::string& path) {
  // A folder opens as an empty stream on Linux: it would read as a config of defaults.
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw ConfigError(fmt::format("{}: is a folder, not a config file", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot open the config file", path));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("{}: cannot read the config file", path));
  return from_string(text.str(), path);
}

void Document::apply_override(const std::string& assignment) {
  const std::string shown = "--set " + assignment;
  auto equals = assignment.find('=');
  if (equals == std::string::npos || equals == 0) {
    throw ConfigError(fmt::format("{}: expected key.path=value", shown));
  }
  const std::string path = assignment.substr(0, equals);
  const std::string text = assignment.substr(equals + 1);
  const std::vector<Step> steps = parse_steps(path, shown);
  YAML::Node value;
  try {
    value = YAML::Load(text);
    if (!value.IsDefined()) value = YAML::Node(text);
  } catch (const YAML::Exception&) {
    value = YAML::Node(text);  // not YAML: take it as a plain string
  }
  // YAML reads "", "~", "null", "# ..." as null, which the schema takes for "not set": the key
  // would fall back to its default without a word.
  if (value.IsNull()) {
    throw ConfigError(fmt::format("{}: no value (to give the key its default, leave it out; for an empty string, "
                                  "write --set \"{}=''\")", shown, path));
  }
  // yaml-cpp nodes are handles: walk with copies that alias the tree and assign in place. Each
  // step checks that the next one can be taken: `current` is a map before a key and a list
  // holding the index before an index (yaml-cpp would turn a list into a map for a key, or for
  // an index past its end).
  YAML::Node current = root_;
  std::string walked;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    walked = step.is_index ? fmt::format("{}[{}]", walked, step.index) : join_path(walked, step.key);
    if (i + 1 == steps.size()) {
      if (step.is_index) {
        current[step.index] = value;
      } else {
        current[step.key] = value;
      }
      break;
    }
    YAML::Node next = step.is_index ? current[step.index] : current[step.key];
    const Step& following = steps[i + 1];
    if (following.is_index) {
      const std::string whole = fmt::format("give the whole list instead: --set '{}=[...]'", walked);
      if (!next.IsDefined() || next.IsNull()) {
        throw ConfigError(fmt::format("{}: '{}' is not in the config, so it has no entry [{}]; {}", shown, walked,
                                      following.index, whole));
      }
      if (!next.IsSequence()) {
        throw ConfigError(fmt::format("{}: '{}' is not a list, so it has no entry [{}]", shown, walked,
                                      following.index));
      }
      if (following.index >= next.size()) {
        throw ConfigError(fmt::format("{}: '{}' has {} entr{}, so it has no entry [{}]; to add or remove entries, {}",
                                      shown, walked, next.size(), next.size() == 1 ? "y" : "ies", following.index,
                                      whole));
      }
    } else if (!next.IsDefined() || next.IsNull()) {
      current[step.key] = YAML::Node(YAML::NodeType::Map);  // a key step: `current` is a map
      next = current[step.key];
    } else if (!next.IsMap()) {
      throw ConfigError(fmt::format("{}: '{}' is not a section, so it has no key '{}'", shown,
                                    walked, following.key));
    }
    current.reset(next);
  }
  // The value replaces whatever earlier --set arguments wrote inside it.
  for (auto it = info_->overrides.begin(); it != info_->overrides.end();) {
    it = inside(it->first, walked) ? info_->overrides.erase(it) : std::next(it);
  }
  info_->overrides[walked] = shown;
}

Node Document::root() const { return Node(info_, root_, ""); }
const std::string& Document::name() const { return info_->name; }

Node::Node(std::shared_ptr<const Document::Info> info, YAML::Node node, std::string path)
    : info_(std::move(info)), node_(std::move(node)), path_(std::move(path)) {}

bool Node::present() const { return info_ && node_.IsDefined() && !node_.IsNull(); }
bool Node::is_null() const { return info_ && node_.IsDefined() && node_.IsNull(); }
bool Node::is_map() const { return present() && node_.IsMap(); }
bool Node::is_sequence() const { return present() && node_.IsSequence(); }
bool Node::is_scalar() const { return present() && node_.IsScalar(); }

std::string Node::scalar() const {
  if (!is_scalar()) fail("expected a single value");
  return node_.Scalar();
}

std::string Node::override_for(const std::string& path) const {
  if (!info_) return {};
  // The longest overridden prefix of `path` explains where the value came from: "a.b" explains
  // "a.b.c" and, for a list value, "a.b[0].c".
  std::string best;
  for (const auto& [key, shown] : info_->overrides) {
    if (is_key_or_section_holding(key, path) && (best.empty() || key.size() > best.size())) best = key;
  }
  return best.empty() ? std::string() : info_->overrides.at(best);
}

std::string Node::located(const YAML::Node& node, const std::string& path) const {
  std::string shown = override_for(path);
  if (!shown.empty()) return shown;
  // The whole document: its first line would say nothing about the problem.
  if (path.empty()) return info_->name;
  // A value the file holds, perhaps with keys inside it that --set changed; or a section that
  // --set made (yaml-cpp gives a node it did not read from the text no position).
  const std::string changed = overrides_inside(info_->overrides, path);
  if (!node.IsDefined() || node.Mark().is_null()) return changed.empty() ? info_->name : changed;
  const std::string at = mark_text(info_->name, node.Mark());
  return changed.empty() ? at : fmt::format("{} (changed by {})", at, changed);
}

std::string Node::where() const {
  if (!info_) return "<config>";
  if (node_.IsDefined() && !node_.IsNull()) return located(node_, path_);
  // Absent, or null: what lacks it is the nearest section (or list) that is there.
  if (anchor_.IsDefined() && !anchor_.IsNull()) return located(anchor_, anchor_path_);
  std::string shown = override_for(path_);
  return shown.empty() ? info_->name : shown;
}

std::string Node::where_key(const std::string& key) const {
  std::string full = join_path(path_, key);
  std::string shown = override_for(full);
  if (!shown.empty()) return shown;
  if (is_map()) {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == key) return located(it->first, full);
    }
  }
  return where();
}

// Missing keys are represented by an Undefined node (present() false, no location).
Node Node::child(const std::string& key) const {
  if (is_map()) {
    const YAML::Node& const_node = node_;
    YAML::Node looked = const_node[key];
    if (looked.IsDefined() && !looked.IsNull()) return Node(info_, looked, join_path(path_, key));
    if (looked.IsDefined()) return with_no_value(looked, join_path(path_, key));
  }
  return absent(join_path(path_, key));
}

Node Node::element(std::size_t index) const {
  std::string path = fmt::format("{}[{}]", path_, index);
  if (is_sequence() && index < node_.size()) {
    const YAML::Node& const_node = node_;
    const YAML::Node& entry = const_node[index];
    return entry.IsNull() ? with_no_value(entry, path) : Node(info_, entry, path);
  }
  return absent(path);
}

// yaml-cpp places a value written as nothing (`key:`, a bare `-`) at the next token, which may
// be lines further on.
Node Node::with_no_value(const YAML::Node& node, const std::string& path) const {
  Node result = absent(path);
  result.node_ = node;
  return result;
}

Node Node::absent(const std::string& path) const {
  Node node(info_, YAML::Node(YAML::NodeType::Undefined), path);
  if (present()) {
    node.anchor_ = node_;
    node.anchor_path_ = path_;
  } else {
    node.anchor_ = anchor_;
    node.anchor_path_ = anchor_path_;
  }
  return node;
}

std::size_t Node::size() const { return present() ? node_.size() : 0; }

std::vector<std::string> Node::keys() const {
  std::vector<std::string> result;
  if (!is_map()) return result;
  // yaml-cpp keeps a repeated key and lookups find its first value: the later one would be
  // dropped without a word (a second `train:` section, a key set twice).
  std::map<std::string, YAML::Mark> first_seen;
  // A map inside a --set value: its positions are in that argument, not in the file.
  const std::string shown = override_for(path_);
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    std::string key = it->first.IsScalar() ? it->first.Scalar() : std::string("<non-scalar key>");
    if (it->first.IsScalar()) {
      const auto [first, fresh] = first_seen.emplace(key, it->first.Mark());
      if (!fresh && shown.empty()) {
        throw ConfigError(fmt::format("{}: {}: set a second time in this section (first at line {}); give it once",
                                      mark_text(info_->name, it->first.Mark()), join_path(path_, key),
                                      first->second.line + 1));
      } else if (!fresh) {
        const std::string second_at = set_position(shown, it->first.Mark());
        const std::string first_at = set_position(shown, first->second);
        throw ConfigError(fmt::format("{}{}: {}: set a second time in this --set value{}; give it once", shown,
                                      second_at.empty() ? "" : " (at " + second_at + ")", join_path(path_, key),
                                      first_at.empty() ? "" : " (first at " + first_at + ")"));
      }
    }
    result.push_back(std::move(key));
  }
  return result;
}

void Node::fail(const std::string& message) const {
  throw ConfigError(fmt::format("{}: {}: {}", where(), path_.empty() ? "<top level>" : path_,
                                message));
}

void Node::fail_key(const std::string& key, const std::string& message) const {
  throw ConfigError(fmt::format("{}: {}: {}", where_key(key), join_path(path_, key), message));
}

}  // namespace aiacc::config
