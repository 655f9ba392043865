// Scalar decoding, unknown-key detection and YAML text output for config structs.
#include "core/config/schema.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace aiacc::config {

namespace {

bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  if (s.front() == ' ' || s.back() == ' ') return true;
  static const std::string kSpecialFirst = "-?:,[]{}#&*!|>'\"%@`";
  if (kSpecialFirst.find(s.front()) != std::string::npos) return true;
  if (s.find(": ") != std::string::npos || s.find(" #") != std::string::npos) return true;
  // A trailing ':' makes a plain scalar a map key, and flow indicators anywhere split or end it
  // inside the [a, b] lists value_text() writes.
  if (s.back() == ':' || s.find_first_of(",[]{}") != std::string::npos) return true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  // Strings that YAML would read as another type keep their quotes.
  static const std::vector<std::string> kWords = {"true", "false", "yes", "no", "on", "off",
                                                  "null", "~", "True", "False", "Null", "NULL"};
  if (std::find(kWords.begin(), kWords.end(), s) != kWords.end()) return true;
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end && *end == '\0';
}

}  // namespace

std::vector<UnusedBlock> TypedBlocks::unused(const std::string& selected) const {
  std::vector<UnusedBlock> out;
  for (const auto& [name, block] : blocks) {
    if (name == selected) continue;
    UnusedBlock entry{block.where(), {}};
    for (const auto& key : block.keys()) entry.keys.push_back(join_path(block.path(), key));
    if (entry.keys.empty()) entry.keys.push_back(block.path());
    out.push_back(std::move(entry));
  }
  return out;
}

// Well-formed UTF-8: no stray continuation bytes, overlong forms, surrogates or code points
// above U+10FFFF (what nlohmann::json accepts when it writes a string).
bool is_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    std::size_t extra = 0;
    std::uint32_t code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      extra = 1;
      code = c & 0x1fu;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2;
      code = c & 0x0fu;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3;
      code = c & 0x07u;
    } else {
      return false;
    }
    if (text.size() - i <= extra) return false;
    for (std::size_t k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code = (code << 6) | (next & 0x3f);
    }
    if ((extra == 2 && (code < 0x800 || (code >= 0xd800 && code <= 0xdfff))) ||
        (extra == 3 && (code < 0x10000 || code > 0x10ffff))) {
      return false;
    }
    i += extra + 1;
  }
  return true;
}

std::string scalar_text(const std::string& value) {
  if (!needs_quotes(value)) return value;
  std::string out = "\"";
  for (char c : value) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        // Other control characters are not allowed raw in a quoted scalar: YAML's \xHH escape.
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string scalar_text(bool value) { return value ? "true" : "false"; }

std::string scalar_text(double value) {
  if (std::isinf(value)) return value > 0 ? ".inf" : "-.inf";
  if (std::isnan(value)) return ".nan";
  std::string text = fmt::format("{}", value);
  // Keep a float looking like a float, so the reference reads back as the same type.
  if (text.find_first_of(".eE") == std::string::npos) text += ".0";
  return text;
}

void decode(const Node& node, bool& value) {
  const std::string text = node.scalar();
  if (text == "true" || text == "True" || text == "yes" || text == "on") {
    value = true;
  } else if (text == "false" || text == "False" || text == "no" || text == "off") {
    value = false;
  } else {
    node.fail(fmt::format("expected true or false, got '{}'", text));
  }
}

void decode(const Node& node, std::string& value) {
  value = node.scalar();
  // Config text ends up in JSON (checkpoint manifests, stats), which takes UTF-8 only.
  if (!is_utf8(value)) node.fail("expected UTF-8 text");
}

void decode(const Node& node, double& value) {
  const std::string text = node.scalar();
  if (text == ".inf" || text == "+.inf") { value = HUGE_VAL; return; }
  if (text == "-.inf") { value = -HUGE_VAL; return; }
  char* end = nullptr;
  errno = 0;
  double parsed = std::strtod(text.c_str(), &end);
  if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || std::isnan(parsed)) {
    node.fail(fmt::format("expected a number, got '{}'", text));
  }
  value = parsed;
}

void decode(const Node& node, float& value) {
  double wide = 0;
  decode(node, wide);
  value = static_cast<float>(wide);
}

void decode_integer(const Node& node, long long& value, long long low, long long high) {
  const std::string text = node.scalar();
  long long parsed = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), parsed);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) {
    // Accept whole numbers written in exponent form (1e6), common for step counts.
    double as_double = 0;
    char* dend = nullptr;
    as_double = std::strtod(text.c_str(), &dend);
    if (!text.empty() && *dend == '\0' && std::floor(as_double) == as_double &&
        std::abs(as_double) < 9.0e18) {
      parsed = static_cast<long long>(as_double);
    } else {
      node.fail(fmt::format("expected an integer, got '{}'", text));
    }
  }
  if (parsed < low || parsed > high) {
    node.fail(fmt::format("expected an integer in [{}, {}], got {}", low, high, parsed));
  }
  value = parsed;
}

void decode_unsigned(const Node& node, unsigned long long& value, unsigned long long high) {
  long long signed_value = 0;
  decode_integer(node, signed_value, 0, std::numeric_limits<long long>::max());
  if (static_cast<unsigned long long>(signed_value) > high) {
    node.fail(fmt::format("expected an integer in [0, {}], got {}", high, signed_value));
  }
  value = static_cast<unsigned long long>(signed_value);
}

namespace {

// How to write an empty value of this shape on purpose.
const char* empty_form(ValueKind kind) {
  switch (kind) {
    case ValueKind::text: return "for an empty string, write ''";
    case ValueKind::list: return "for an empty list, write []";
    case ValueKind::map: return "for an empty map, write {}";
    case ValueKind::section: return "for a section of defaults, write {}; keys meant to be inside it go indented under it";
    case ValueKind::scalar: break;
  }
  return "";
}

}  // namespace

void fail_no_value(const Node& parent, const std::string& key, ValueKind kind) {
  const std::string hint = empty_form(kind);
  parent.fail_key(key, fmt::format("no value (to give the key its default, leave it out{}{})",
                                   hint.empty() ? "" : "; ", hint));
}

void fail_no_value(const Node& entry, ValueKind kind) {
  const std::string hint = empty_form(kind);
  entry.fail(fmt::format("no value (write the entry's value or leave the entry out{}{})",
                         hint.empty() ? "" : "; ", hint));
}

Reader::Reader(const Node& node) : node_(node) {
  if (node_.present() && !node_.is_map()) node_.fail("expected a section (a map of keys)");
}

void Reader::blocks(const Catalog& catalog, const std::string& type, TypedBlocks& blocks,
                    const char* doc) {
  (void)doc;
  (void)type;
  for (const auto& name : catalog.names()) {
    known_.push_back(name);
    Node child = node_.child(name);
    if (child.is_null()) fail_no_value(node_, name, ValueKind::section);
    if (!child.present()) continue;
    if (!child.is_map()) child.fail("expected a section of options for '" + name + "'");
    catalog.check_block(name, child);
    blocks.blocks[name] = child;
  }
}

void Reader::finish() const {
  for (const auto& key : node_.keys()) {
    if (std::find(known_.begin(), known_.end(), key) != known_.end()) continue;
    std::string hint = closest_name(key, known_);
    node_.fail_key(key, fmt::format("unknown key{}; known keys here: {}",
                                    hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                                    join_names(known_)));
  }
}

void Writer::blocks(const Catalog& catalog, const std::string& type, const TypedBlocks& blocks,
                    const char* doc) {
  for (const auto& name : catalog.names()) {
    if (mode_ == Mode::resolved && name != type) continue;
    add_line(name + ":", mode_ == Mode::reference ? fmt::format("{} ({})", doc, name) : "");
    std::size_t before = lines_.size();
    Writer inner(mode_);
    catalog.write_block(name, blocks.block(name), inner);
    for (const auto& line : inner.lines_) {
      lines_.push_back({std::string(indent_ + 2, ' ') + line.text, line.comment});
    }
    if (lines_.size() == before) lines_.back().text += " {}";
  }
}

void Writer::comment(const std::string& text) {
  if (mode_ == Mode::reference) lines_.push_back({std::string(indent_, ' ') + "# " + text, ""});
}

std::string Writer::str() const {
  std::size_t column = 0;
  for (const auto& line : lines_) {
    if (!line.comment.empty()) column = std::max(column, line.text.size());
  }
  column = std::min<std::size_t>(column, 48);
  std::string out;
  for (const auto& line : lines_) {
    out += line.text;
    if (!line.comment.empty()) {
      out += std::string(line.text.size() < column ? column - line.text.size() : 0, ' ');
      out += "  # " + line.comment;
    }
    out += '\n';
  }
  return out;
}

}  // namespace aiacc::config
