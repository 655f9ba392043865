// Typed configuration structs. A struct lists its fields once, in a visit() member:
//
//   struct OptimizerOptions {
//     std::string type = "sgd";
//     double lr = 0.1;
//     template <class V> void visit(V& v) {
//       v.field("type", type, "update rule", config::one_of({"sgd", "adam"}));
//       v.field("lr", lr, "base learning rate", config::greater_than(0.0));
//     }
//   };
//
// and the same list drives reading (config::read<T>: typed, bounded, unknown keys rejected with
// a suggestion, every error located) and writing (config::write<T>: the resolved config, or the
// reference with every default and its doc). An optional `void validate(const Node&) const`
// member runs after reading for checks that span fields.
#pragma once

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/config/node.h"
#include "core/config/suggest.h"

namespace aiacc::config {

class Reader;
class Writer;

// ---- constraints: callables returning "" when the value is fine, else what was expected ----

struct NoCheck {
  template <class T>
  std::string operator()(const T&) const { return {}; }
};

// A bound is no bound for an infinite float (.inf passes ">= 0"): bounded keys want finite values.
template <class V>
bool finite_if_float(const V& v) {
  if constexpr (std::is_floating_point_v<V>) return std::isfinite(v);
  return true;
}

template <class V>
constexpr const char* finite_word() {
  return std::is_floating_point_v<V> ? "finite " : "";
}

template <class T>
auto at_least(T low) {
  return [low](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    return v >= low && finite_if_float(v) ? std::string()
                                          : fmt::format("expected a {}value >= {}", finite_word<V>(), low);
  };
}
template <class T>
auto greater_than(T low) {
  return [low](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    return v > low && finite_if_float(v) ? std::string()
                                         : fmt::format("expected a {}value > {}", finite_word<V>(), low);
  };
}
template <class T>
auto in_range(T low, T high) {
  return [low, high](const auto& v) {
    return (v >= low && v <= high) ? std::string()
                                   : fmt::format("expected a value in [{}, {}]", low, high);
  };
}
inline auto one_of(std::vector<std::string> allowed) {
  return [allowed = std::move(allowed)](const std::string& v) {
    for (const auto& a : allowed) if (a == v) return std::string();
    std::string hint = closest_name(v, allowed);
    return fmt::format("expected one of: {}{}", join_names(allowed),
                       hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint));
  };
}
inline auto non_empty() {
  return [](const auto& v) { return v.empty() ? std::string("expected a non-empty value") : std::string(); };
}

// ---- polymorphic sections: `type` picks an implementation, `<type>:` holds its options ----

// A set of named implementations whose options are config structs (models, datasets, ...).
class Catalog {
 public:
  virtual ~Catalog() = default;
  virtual std::vector<std::string> names() const = 0;
  // Parses `block` (absent: all defaults) with `name`'s options schema and writes it.
  virtual void write_block(const std::string& name, const Node& block, Writer& writer) const = 0;
  // Parses `block` with `name`'s schema only to validate it (throws ConfigError).
  virtual void check_block(const std::string& name, const Node& block) const = 0;
};

// The raw option blocks of a polymorphic section, keyed by implementation name.
// An option block of a type other than the selected one: it changes nothing (it may be kept for
// switching types with --set ...type=...).
struct UnusedBlock {
  std::string where;              // where the block is written (file:line:col, or the --set)
  std::vector<std::string> keys;  // its keys in full ("model.resnet.depth"), or the block when empty
};

struct TypedBlocks {
  std::map<std::string, Node> blocks;
  // The block for `type`, or an absent node (all defaults).
  Node block(const std::string& type) const {
    auto it = blocks.find(type);
    return it == blocks.end() ? Node() : it->second;
  }
  // The blocks of every type but `selected`.
  std::vector<UnusedBlock> unused(const std::string& selected) const;
};

// ---- type traits ----

template <class T, class = void>
struct is_section : std::false_type {};
template <class T>
struct is_section<T, std::void_t<decltype(std::declval<T&>().visit(std::declval<Reader&>()))>>
    : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};
template <class T>
struct is_string_map : std::false_type {};
template <class T>
struct is_string_map<std::map<std::string, T>> : std::true_type {};
template <class T>
struct is_section_vector : std::false_type {};
template <class T>
struct is_section_vector<std::vector<T>> : is_section<T> {};
template <class T>
struct is_optional : std::false_type {};
template <class T>
struct is_optional<std::optional<T>> : std::true_type {};

// Text of a scalar value as YAML would show it (strings quoted when needed).
// Whether `text` is well-formed UTF-8. Every string (and map key) a config reads must be: the
// resolved config is stored in JSON (checkpoint manifests), which takes UTF-8 only.
bool is_utf8(std::string_view text);

std::string scalar_text(const std::string& value);
std::string scalar_text(bool value);
std::string scalar_text(double value);
template <class T>
std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, std::string> scalar_text(T value) {
  return fmt::format("{}", value);
}
inline std::string scalar_text(float value) { return scalar_text(static_cast<double>(value)); }

template <class T>
std::string value_text(const T& value);

// ---- reading ----

// The shape of a value, for the hint of the error when a key has none.
enum class ValueKind { scalar, text, list, map, section };
template <class T>
constexpr ValueKind value_kind() {
  if constexpr (is_optional<T>::value) return value_kind<typename T::value_type>();
  else if constexpr (is_section<T>::value) return ValueKind::section;
  else if constexpr (is_vector<T>::value) return ValueKind::list;
  else if constexpr (is_string_map<T>::value) return ValueKind::map;
  else if constexpr (std::is_same_v<T, std::string>) return ValueKind::text;
  else return ValueKind::scalar;
}

// Key `key` of `parent` is written with no value (`key:`, `key: ~`, `key: null`, or a template
// placeholder that was not filled in). YAML reads that as null, which would otherwise be taken
// for "not set" and give the key its default without a word, so it is an error, as in --set.
[[noreturn]] void fail_no_value(const Node& parent, const std::string& key, ValueKind kind);
// The same for an entry of a list (`[1, ~]`, a bare `-`).
[[noreturn]] void fail_no_value(const Node& entry, ValueKind kind);

void decode(const Node& node, bool& value);
void decode(const Node& node, std::string& value);
void decode(const Node& node, double& value);
void decode(const Node& node, float& value);
void decode_integer(const Node& node, long long& value, long long low, long long high);
void decode_unsigned(const Node& node, unsigned long long& value, unsigned long long high);

template <class T>
void decode(const Node& node, T& value);

class Reader {
 public:
  // `node` must be a map, or absent/null (then every field keeps its default).
  explicit Reader(const Node& node);

  template <class T, class Check = NoCheck>
  void field(const char* key, T& value, const char* doc, Check check = {}) {
    (void)doc;
    known_.emplace_back(key);
    Node child = node_.child(key);
    if constexpr (is_optional<T>::value) {
      if (!child.present()) {
        if (child.yaml().IsDefined() && child.yaml().IsNull()) value.reset();
        return;
      }
      typename T::value_type inner{};
      decode(child, inner);
      value = inner;
    } else {
      if (child.is_null()) fail_no_value(node_, key, value_kind<T>());
      if (!child.present()) return;
      decode(child, value);
    }
    std::string problem = check(value);
    if (!problem.empty()) child.fail(fmt::format("{}, got {}", problem, value_text(value)));
  }

  void blocks(const Catalog& catalog, const std::string& type, TypedBlocks& blocks, const char* doc);

  // Rejects keys no field() or blocks() claimed, suggesting the closest known key.
  void finish() const;

  const Node& node() const { return node_; }

 private:
  Node node_;
  std::vector<std::string> known_;
};

template <class T>
void decode(const Node& node, T& value) {
  if constexpr (is_section<T>::value) {
    if (node.present() && !node.is_map()) node.fail("expected a section (a map of keys)");
    Reader reader(node);
    value.visit(reader);
    reader.finish();
    if constexpr (requires { value.validate(node); }) value.validate(node);
  } else if constexpr (is_vector<T>::value) {
    if (!node.is_sequence()) node.fail("expected a list, e.g. [a, b]");
    value.clear();
    for (std::size_t i = 0; i < node.size(); ++i) {
      const Node entry = node.element(i);
      if (entry.is_null()) fail_no_value(entry, value_kind<typename T::value_type>());
      typename T::value_type element{};
      decode(entry, element);
      value.push_back(std::move(element));
    }
  } else if constexpr (is_string_map<T>::value) {
    if (!node.is_map()) node.fail("expected a map of name: value");
    value.clear();
    for (const auto& key : node.keys()) {
      if (!is_utf8(key)) node.fail_key(key, "expected UTF-8 text");
      const Node entry = node.child(key);
      if (entry.is_null()) fail_no_value(node, key, value_kind<typename T::mapped_type>());
      typename T::mapped_type element{};
      decode(entry, element);
      value.emplace(key, std::move(element));
    }
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    long long wide = 0;
    decode_integer(node, wide, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    value = static_cast<T>(wide);
  } else if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) {
    unsigned long long wide = 0;
    decode_unsigned(node, wide, std::numeric_limits<T>::max());
    value = static_cast<T>(wide);
  } else {
    static_assert(sizeof(T) == 0, "config::decode: unsupported field type");
  }
}

// Reads a whole struct from `node` (absent: defaults). Throws ConfigError with location.
template <class T>
T read(const Node& node) {
  T value{};
  decode(node, value);
  return value;
}

// ---- writing ----

class Writer {
 public:
  enum class Mode {
    reference,  // every field and every polymorphic block, with its doc as a comment
    resolved,   // the values in force, only the selected block of a polymorphic section
  };
  explicit Writer(Mode mode) : mode_(mode) {}

  template <class T, class Check = NoCheck>
  void field(const char* key, const T& value, const char* doc, Check = {}) {
    const std::string comment = mode_ == Mode::reference ? doc : "";
    if constexpr (is_section<T>::value) {
      add_line(std::string(key) + ":", comment);
      indent_ += 2;
      std::size_t before = lines_.size();
      T copy = value;
      copy.visit(*this);
      indent_ -= 2;
      if (lines_.size() == before) lines_.back().text += " {}";
    } else if constexpr (is_section_vector<T>::value) {
      if (value.empty()) {
        add_line(std::string(key) + ": []", comment);
        return;
      }
      add_line(std::string(key) + ":", comment);
      for (const auto& element : value) {
        Writer item(mode_);
        auto copy = element;
        copy.visit(item);
        bool first = true;
        for (const auto& line : item.lines_) {
          lines_.push_back({std::string(indent_ + 2, ' ') + (first ? "- " : "  ") + line.text,
                            line.comment});
          first = false;
        }
      }
    } else if constexpr (is_string_map<T>::value) {
      if (value.empty()) {
        add_line(std::string(key) + ": {}", comment);
        return;
      }
      add_line(std::string(key) + ":", comment);
      indent_ += 2;
      // Keys are user text (e.g. log.levels): quoted like values when YAML would misread them.
      for (const auto& [name, element] : value) field(scalar_text(name).c_str(), element, "");
      indent_ -= 2;
    } else {
      add_line(std::string(key) + ": " + value_text(value), comment);
    }
  }

  void blocks(const Catalog& catalog, const std::string& type, const TypedBlocks& blocks,
              const char* doc);

  // A whole-line comment (reference mode only).
  void comment(const std::string& text);

  Mode mode() const { return mode_; }
  std::string str() const;

 private:
  struct Line {
    std::string text;
    std::string comment;
  };
  void add_line(const std::string& text, const std::string& comment) {
    lines_.push_back({std::string(indent_, ' ') + text, comment});
  }
  Mode mode_;
  int indent_ = 0;
  std::vector<Line> lines_;
};

// Writes a struct as YAML text. Mode::reference includes every doc as a comment.
template <class T>
std::string write(const T& value, Writer::Mode mode) {
  Writer writer(mode);
  T copy = value;
  copy.visit(writer);
  return writer.str();
}

template <class T>
std::string value_text(const T& value) {
  if constexpr (is_optional<T>::value) {
    return value ? value_text(*value) : std::string("null");
  } else if constexpr (is_vector<T>::value) {
    std::string out = "[";
    for (std::size_t i = 0; i < value.size(); ++i) {
      if (i) out += ", ";
      out += value_text(value[i]);
    }
    return out + "]";
  } else if constexpr (is_string_map<T>::value) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : value) {
      out += (first ? "" : ", ") + scalar_text(k) + ": " + value_text(v);
      first = false;
    }
    return out + "}";
  } else if constexpr (is_section<T>::value) {
    return "{...}";
  } else {
    return scalar_text(value);
  }
}

}  // namespace aiacc::config
