// A registry of named implementations (models, datasets) whose options are config structs.
// Implementations register themselves at static-initialisation time through a one-line macro;
// libraries holding registrations are linked whole (meson link_whole) so that nothing is dropped.
//
//   Registry<Model, const ModelContext&>& model_registry();    // a function-local static
//   AIACC_REGISTER(model_registry(), "mlp", Mlp);             // Mlp(const Mlp::Options&, ctx)
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config/schema.h"
#include "core/error.h"

namespace aiacc {

template <class Base, class... Args>
class Registry final : public config::Catalog {
 public:
  using Factory = std::function<std::unique_ptr<Base>(const config::Node& options, Args...)>;
  struct Entry {
    Factory create;
    std::function<void(const config::Node& options, config::Writer& writer)> write;
    std::function<void(const config::Node& options)> check;
  };

  // `kind` names what is registered ("model", "dataset") in messages.
  explicit Registry(std::string kind) : kind_(std::move(kind)) {}

  // Throws Error when `name` is already taken.
  void add(const std::string& name, Entry entry) {
    if (!entries_.emplace(name, std::move(entry)).second) {
      throw Error(fmt::format("{} '{}' is registered twice", kind_, name));
    }
  }

  // Registers Class, built as Class(const typename Class::Options&, Args...).
  template <class Class>
  bool add_class(const std::string& name) {
    using Options = typename Class::Options;
    add(name, Entry{
                  [](const config::Node& node, Args... args) -> std::unique_ptr<Base> {
                    return std::make_unique<Class>(config::read<Options>(node),
                                                   std::forward<Args>(args)...);
                  },
                  [](const config::Node& node, config::Writer& writer) {
                    Options options = config::read<Options>(node);
                    options.visit(writer);
                  },
                  [](const config::Node& node) { (void)config::read<Options>(node); },
              });
    return true;
  }

  bool contains(const std::string& name) const { return entries_.count(name) > 0; }

  // Builds `name` with the options in `options` (absent: defaults). Throws ConfigError for an
  // unknown name, listing the known ones.
  std::unique_ptr<Base> create(const std::string& name, const config::Node& options,
                               Args... args) const {
    return entry(name).create(options, std::forward<Args>(args)...);
  }

  std::vector<std::string> names() const override {
    std::vector<std::string> result;
    for (const auto& [name, entry] : entries_) result.push_back(name);
    return result;
  }
  void write_block(const std::string& name, const config::Node& block,
                   config::Writer& writer) const override {
    entry(name).write(block, writer);
  }
  void check_block(const std::string& name, const config::Node& block) const override {
    entry(name).check(block);
  }

  // A constraint for the `type` field: "expected one of: ..." with a suggestion.
  auto name_check() const {
    return [this](const std::string& value) { return config::one_of(names())(value); };
  }

 private:
  const Entry& entry(const std::string& name) const {
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      std::string hint = config::closest_name(name, names());
      throw ConfigError(fmt::format("unknown {} '{}'{}; known: {}", kind_, name,
                                    hint.empty() ? "" : fmt::format(" (did you mean '{}'?)", hint),
                                    config::join_names(names())));
    }
    return it->second;
  }
  std::string kind_;
  std::map<std::string, Entry> entries_;
};

}  // namespace aiacc

#define AIACC_CONCAT_INNER_(a, b) a##b
#define AIACC_CONCAT_(a, b) AIACC_CONCAT_INNER_(a, b)
// Registers Class under `name` in `registry` at static-initialisation time.
#define AIACC_REGISTER(registry, name, Class)                                   \
  [[maybe_unused]] static const bool AIACC_CONCAT_(aiacc_registered_, __COUNTER__) = \
      (registry).template add_class<Class>(name)
