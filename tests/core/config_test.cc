// Config reading and writing: typed fields, bounds, unknown keys with suggestions, located
// errors for file values and --set overrides, polymorphic blocks, and reference round trips.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/config/diff.h"
#include "core/config/node.h"
#include "core/config/schema.h"
#include "core/error.h"
#include "core/registry.h"

namespace aiacc::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct ScheduleOptions {
  std::string type = "cosine";
  int warmup_steps = 0;
  template <class V>
  void visit(V& v) {
    v.field("type", type, "decay shape", one_of({"constant", "step", "cosine"}));
    v.field("warmup_steps", warmup_steps, "steps of linear warm-up", at_least(0));
  }
};

struct OptimOptions {
  std::string type = "sgd";
  double lr = 0.1;
  std::int64_t steps = 100;
  bool nesterov = false;
  std::vector<int> milestones = {30, 60};
  std::optional<double> clip;
  std::map<std::string, std::string> levels;
  ScheduleOptions schedule;
  template <class V>
  void visit(V& v) {
    v.field("type", type, "update rule", one_of({"sgd", "adam"}));
    v.field("lr", lr, "base learning rate", greater_than(0.0));
    v.field("steps", steps, "training steps", at_least<std::int64_t>(1));
    v.field("nesterov", nesterov, "Nesterov momentum");
    v.field("milestones", milestones, "step decay points");
    v.field("clip", clip, "gradient clipping norm (null: off)");
    v.field("levels", levels, "per-subsystem levels");
    v.field("schedule", schedule, "learning-rate schedule");
  }
  void validate(const Node& node) const {
    if (schedule.warmup_steps > steps) node.child("schedule").fail("warmup_steps exceeds steps");
  }
};

struct Rule {
  std::string match;
  std::string place = "ring";
  template <class V>
  void visit(V& v) {
    v.field("match", match, "parameter name glob");
    v.field("place", place, "where", one_of({"ps", "ring"}));
  }
};

struct Rules {
  std::vector<Rule> placement;
  template <class V>
  void visit(V& v) {
    v.field("placement", placement, "placement rules");
  }
};

// A map whose check covers all its entries (like log.levels).
struct Levels {
  std::map<std::string, std::string> names;
  double lr = 0.1;
  template <class V>
  void visit(V& v) {
    v.field("names", names, "levels by subsystem", [](const std::map<std::string, std::string>& m) {
      for (const auto& [name, level] : m) {
        if (name != "ring" && name != "data") return "no subsystem '" + name + "'";
      }
      return std::string();
    });
    v.field("lr", lr, "unused");
  }
};

// A validation of a key that another key makes necessary (like a multistep schedule's milestones).
struct Plan {
  std::string type = "cosine";
  std::vector<int> milestones;
  template <class V>
  void visit(V& v) {
    v.field("type", type, "shape", one_of({"cosine", "multistep"}));
    v.field("milestones", milestones, "steps");
  }
  void validate(const Node& node) const {
    if (type == "multistep" && milestones.empty()) node.child("milestones").fail("multistep needs at least one milestone");
  }
};

struct Planned {
  Plan plan;
  int other = 0;
  template <class V>
  void visit(V& v) {
    v.field("plan", plan, "schedule");
    v.field("other", other, "unused");
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

OptimOptions parse(const std::string& text) {
  return read<OptimOptions>(Document::from_string(text, "job.yaml").root());
}

TEST(Config, ReadsTypedValuesAndKeepsDefaults) {
  auto o = parse("lr: 0.5\nsteps: 1e3\nnesterov: true\nmilestones: [1, 2, 3]\nclip: 2.5\n"
                 "schedule: {warmup_steps: 7}\nlevels: {ring: debug}\n");
  EXPECT_EQ(o.type, "sgd");
  EXPECT_DOUBLE_EQ(o.lr, 0.5);
  EXPECT_EQ(o.steps, 1000);
  EXPECT_TRUE(o.nesterov);
  EXPECT_EQ(o.milestones, (std::vector<int>{1, 2, 3}));
  ASSERT_TRUE(o.clip.has_value());
  EXPECT_DOUBLE_EQ(*o.clip, 2.5);
  EXPECT_EQ(o.schedule.type, "cosine");
  EXPECT_EQ(o.schedule.warmup_steps, 7);
  EXPECT_EQ(o.levels.at("ring"), "debug");
}

TEST(Config, UnknownKeyNamesLineAndSuggests) {
  std::string message = error_of([] { parse("lr: 0.5\nschedule:\n  warmup_step: 3\n"); });
  EXPECT_THAT(message, HasSubstr("job.yaml:3:3"));
  EXPECT_THAT(message, HasSubstr("schedule.warmup_step"));
  EXPECT_THAT(message, HasSubstr("did you mean 'warmup_steps'"));
}

// yaml-cpp keeps a repeated key and lookups return its first value: a second value must be an
// error naming both lines, in sections, in a repeated section, and in string maps.
TEST(Config, AKeySetTwiceInASectionNamesBothLines) {
  std::string message = error_of([] { parse("lr: 0.5\nsteps: 10\nlr: 0.1\n"); });
  EXPECT_THAT(message, HasSubstr("job.yaml:3:1: lr: set a second time in this section (first at line 1)"));
  message = error_of([] { parse("schedule:\n  warmup_steps: 1\nsteps: 10\nschedule:\n  warmup_steps: 2\n"); });
  EXPECT_THAT(message, HasSubstr("job.yaml:4:1: schedule: set a second time"));
  message = error_of([] { parse("schedule: {warmup_steps: 1, warmup_steps: 2}\n"); });
  EXPECT_THAT(message, HasSubstr("schedule.warmup_steps: set a second time"));
  message = error_of([] { parse("levels:\n  ring: debug\n  ring: info\n"); });
  EXPECT_THAT(message, HasSubstr("job.yaml:3:3: levels.ring: set a second time in this section (first at line 2)"));
}

TEST(Config, WrongTypeSaysWhatWasExpected) {
  EXPECT_THAT(error_of([] { parse("steps: 1.5\n"); }), HasSubstr("expected an integer, got '1.5'"));
  EXPECT_THAT(error_of([] { parse("lr: fast\n"); }), HasSubstr("job.yaml:1:5: lr: expected a number"));
  EXPECT_THAT(error_of([] { parse("nesterov: maybe\n"); }), HasSubstr("expected true or false"));
  EXPECT_THAT(error_of([] { parse("milestones: 3\n"); }), HasSubstr("expected a list"));
  EXPECT_THAT(error_of([] { parse("schedule: 3\n"); }), HasSubstr("expected a section"));
}

TEST(Config, OutOfRangeAndChoices) {
  EXPECT_THAT(error_of([] { parse("lr: 0\n"); }), HasSubstr("lr: expected a finite value > 0, got 0.0"));
  EXPECT_THAT(error_of([] { parse("lr: .inf\n"); }), HasSubstr("lr: expected a finite value > 0"));
  EXPECT_THAT(error_of([] { parse("lr: .nan\n"); }), HasSubstr("lr: expected a number"));
  EXPECT_THAT(error_of([] { parse("type: adma\n"); }),
              HasSubstr("expected one of: sgd, adam (did you mean 'adam'?)"));
  EXPECT_THAT(error_of([] { parse("steps: 5\nschedule: {warmup_steps: 9}\n"); }),
              HasSubstr("warmup_steps exceeds steps"));
}

TEST(Config, SyntaxErrorNamesLine) {
  std::string message = error_of([] { parse("lr: 0.5\nschedule: {type: step\nsteps: 3\n"); });
  EXPECT_THAT(message, HasSubstr("job.yaml:"));
  EXPECT_THAT(message, HasSubstr("YAML syntax error"));
}

// yaml-cpp's Load reads the first document: a second one used to be dropped in silence.
TEST(Config, ASecondYamlDocumentIsRefusedWithItsLine) {
  std::string message = error_of([] { parse("lr: 0.5\n---\nlr: 0.1\n"); });
  EXPECT_THAT(message, HasSubstr("job.yaml:3:1: a second YAML document (after '---')"));
  // A document marker before the one document, or an empty document after it, is fine.
  EXPECT_DOUBLE_EQ(parse("---\nlr: 0.25\n").lr, 0.25);
  EXPECT_DOUBLE_EQ(parse("lr: 0.25\n---\n").lr, 0.25);
  EXPECT_DOUBLE_EQ(parse("lr: 0.25\n...\n").lr, 0.25);
  // yaml-cpp 0.7's LoadAll never returns on this input (found by the config fuzzer).
  EXPECT_THAT(error_of([] { parse(",job"); }), HasSubstr("job.yaml:1:1: reads as an empty YAML document"));
}

// yaml-cpp reads some garbage as an empty document: it must not run the default job.
TEST(Config, TextThatReadsAsAnEmptyDocumentIsRefused) {
  EXPECT_THAT(error_of([] { parse("# a job\n\n  ,job\n"); }), HasSubstr("job.yaml:3:3: reads as an empty YAML document"));
  EXPECT_THAT(error_of([] { parse("~\n"); }), HasSubstr("job.yaml:1:1: reads as an empty YAML document"));
  EXPECT_THAT(error_of([] { parse("--- null\n"); }), HasSubstr("job.yaml:1:5: reads as an empty YAML document"));
  // Blanks, comments, directives and markers alone are an empty config: the defaults.
  EXPECT_EQ(error_of([] { parse(""); }), "<no ConfigError>");
  EXPECT_EQ(error_of([] { parse("# nothing yet\n\n--- # a marker\n...\n"); }), "<no ConfigError>");
  EXPECT_EQ(error_of([] { parse("%YAML 1.2\n---\n"); }), "<no ConfigError>");
}

// Keys, not lines: a list grown by one item is one difference, not every later line shifted.
TEST(Config, DifferencesAreNamedByKey) {
  const std::string a = "job: {name: a, seed: 1}\nopt:\n  milestones: [5, 6]\n  lr: 0.1\nrules:\n  - {m: x, p: ring}\n";
  const std::string b = "job: {name: a, seed: 2}\nopt:\n  milestones: [5, 6, 7]\n  lr: 0.1\nrules:\n  - {m: y, p: ring}\n"
                        "extra: true\n";
  const auto d = yaml_differences(a, b);
  ASSERT_EQ(d.size(), 4u);
  EXPECT_EQ(format_differences(d), "job.seed: 1 -> 2; opt.milestones: [5, 6] -> [5, 6, 7]; rules[0].m: x -> y; "
                                   "extra: (absent) -> true");
  EXPECT_EQ(format_differences(d, 2), "job.seed: 1 -> 2; opt.milestones: [5, 6] -> [5, 6, 7]; and 2 more");
  EXPECT_TRUE(yaml_differences(a, a).empty());
  EXPECT_EQ(yaml_differences("lr: 0.1\n", "lr: [\n").back().key, "(document)");
}

TEST(Config, OverridesApplyAndAreNamedInErrors) {
  auto doc = Document::from_string("lr: 0.5\n", "job.yaml");
  doc.apply_override("schedule.type=step");
  doc.apply_override("milestones=[5, 6]");
  auto o = read<OptimOptions>(doc.root());
  EXPECT_EQ(o.schedule.type, "step");
  EXPECT_EQ(o.milestones, (std::vector<int>{5, 6}));

  auto bad = Document::from_string("lr: 0.5\n", "job.yaml");
  bad.apply_override("schedule.no_such_key=1");
  std::string message = error_of([&] { read<OptimOptions>(bad.root()); });
  EXPECT_THAT(message, HasSubstr("--set schedule.no_such_key=1"));
  EXPECT_THAT(message, HasSubstr("schedule.no_such_key: unknown key"));

  auto not_map = Document::from_string("lr: 0.5\n", "job.yaml");
  EXPECT_THAT(error_of([&] { not_map.apply_override("lr.x=1"); }), HasSubstr("'lr' is not a section"));
  EXPECT_THAT(error_of([&] { not_map.apply_override("novalue"); }), HasSubstr("expected key.path=value"));
  // No value would read as null, that is "not set": the key's default without a word.
  for (const char* empty : {"lr=", "lr= ", "lr=~", "lr=null", "lr=NULL", "lr=# a comment"}) {
    EXPECT_THAT(error_of([&] { not_map.apply_override(empty); }), HasSubstr(": no value (to give the key its default"))
        << empty;
  }
  not_map.apply_override("schedule.type=''");  // an empty string, said so, is a value

  // An error inside a list given by --set names the --set, not a line of the file.
  auto list = Document::from_string("lr: 0.5\n", "job.yaml");
  list.apply_override("milestones=[5, x]");
  message = error_of([&] { read<OptimOptions>(list.root()); });
  EXPECT_THAT(message, HasSubstr("--set milestones=[5, x]"));
  EXPECT_THAT(message, Not(HasSubstr("job.yaml")));
}

// YAML reads `key:`, `key: ~` and `key: null` as null, which used to mean "not set": the file's
// key took its default without a word (a template placeholder left empty, say), while --set
// refused the same. Written-out empty values ({}, [], '') are values.
TEST(Config, AKeyWithNoValueInTheFileIsRefusedNamingIt) {
  EXPECT_THAT(error_of([] { parse("steps: 3\nlr:\nnesterov: true\n"); }),
              HasSubstr("job.yaml:2:1: lr: no value (to give the key its default, leave it out)"));
  EXPECT_THAT(error_of([] { parse("lr: ~\n"); }), HasSubstr("job.yaml:1:1: lr: no value"));
  EXPECT_THAT(error_of([] { parse("lr: null\n"); }), HasSubstr("job.yaml:1:1: lr: no value"));
  EXPECT_THAT(error_of([] { parse("type:\n"); }), HasSubstr("type: no value (to give the key its default, leave it "
                                                             "out; for an empty string, write '')"));
  EXPECT_THAT(error_of([] { parse("schedule: {type: null}\n"); }), HasSubstr("job.yaml:1:12: schedule.type: no value"));
  EXPECT_THAT(error_of([] { parse("milestones:\n"); }), HasSubstr("milestones: no value (to give the key its "
                                                                   "default, leave it out; for an empty list, write [])"));
  // A list entry is located by its list: yaml-cpp places a bare `-` at the next token.
  EXPECT_THAT(error_of([] { parse("milestones: [1, ~]\n"); }),
              HasSubstr("job.yaml:1:13: milestones[1]: no value (write the entry's value or leave the entry out)"));
  EXPECT_THAT(error_of([] { parse("milestones:\n  - 1\n  -\n  - 3\nsteps: 4\n"); }),
              HasSubstr("job.yaml:2:3: milestones[1]: no value"));
  EXPECT_THAT(error_of([] { parse("levels: {ring: }\n"); }), HasSubstr("job.yaml:1:10: levels.ring: no value"));
  EXPECT_THAT(error_of([] { parse("levels:\n"); }), HasSubstr("levels: no value (to give the key its default, leave "
                                                               "it out; for an empty map, write {})"));
  // A section with nothing indented under it, e.g. its keys written at the top level.
  EXPECT_THAT(error_of([] { parse("lr: 0.5\nschedule:\nwarmup_steps: 3\n"); }),
              HasSubstr("job.yaml:2:1: schedule: no value (to give the key its default, leave it out; for a section "
                        "of defaults, write {}; keys meant to be inside it go indented under it)"));
  EXPECT_THAT(error_of([] { parse("schedule:\n"); }), HasSubstr("job.yaml:1:1: schedule: no value"));
  EXPECT_THAT(error_of([] { read<Rules>(Document::from_string("placement: [{match: a}, ~]\n", "r.yaml").root()); }),
              HasSubstr("r.yaml:1:12: placement[1]: no value"));

  // Empty values written out are values.
  const auto empty = parse("milestones: []\nlevels: {ring: ''}\nschedule: {}\n");
  EXPECT_EQ(empty.levels.at("ring"), "");
  EXPECT_TRUE(parse("levels: {}\n").levels.empty());
  EXPECT_TRUE(empty.milestones.empty());
  EXPECT_EQ(empty.schedule.type, "cosine");
  // An optional key's null is its documented "off" (the writer writes it so).
  EXPECT_FALSE(parse("clip: null\n").clip.has_value());
}

TEST(Config, AnUnknownTopLevelKeyFromSetNamesTheSet) {
  auto doc = Document::from_string("lr: 0.5\nschedule: {type: step}\n", "job.yaml");
  doc.apply_override("schedul.type=cosine");
  const std::string message = error_of([&] { read<OptimOptions>(doc.root()); });
  EXPECT_THAT(message, HasSubstr("--set schedul.type=cosine: schedul: unknown key (did you mean 'schedule'?)"));
  EXPECT_THAT(message, Not(HasSubstr("job.yaml")));
}

// A key twice inside a --set flow value: the position is in that argument, counted from its
// first character, not a line of the file.
TEST(Config, AKeySetTwiceInASetValueNamesTheSetAndItsColumns) {
  auto doc = Document::from_string("# a comment\nlr: 0.5\n", "job.yaml");
  doc.apply_override("levels={ring: debug, ring: warn}");
  const std::string message = error_of([&] { read<OptimOptions>(doc.root()); });
  EXPECT_THAT(message, HasSubstr("--set levels={ring: debug, ring: warn} (at column 22): levels.ring: set a second "
                                 "time in this --set value (first at column 9); give it once"));
  EXPECT_THAT(message, Not(HasSubstr("job.yaml")));
  // Deeper: the section came from the --set.
  auto deeper = Document::from_string("lr: 0.5\n", "job.yaml");
  deeper.apply_override("schedule={type: step, warmup_steps: 1, type: cosine}");
  EXPECT_THAT(error_of([&] { read<OptimOptions>(deeper.root()); }),
              HasSubstr("--set schedule={type: step, warmup_steps: 1, type: cosine} (at column 40): schedule.type: set "
                        "a second time in this --set value (first at column 11)"));
}

// A check of a whole map, list or section fails on that node: when --set changed entries inside
// it, it names the --set (and the file's line where the file holds the rest).
TEST(Config, ACheckOfASectionNamesTheSetThatChangedIt) {
  auto made = Document::from_string("lr: 0.5\n", "job.yaml");
  made.apply_override("names.rin=debug");
  std::string message = error_of([&] { read<Levels>(made.root()); });
  EXPECT_THAT(message, HasSubstr("--set names.rin=debug: names: no subsystem 'rin', got {rin: debug}"));
  EXPECT_THAT(message, Not(HasSubstr("job.yaml")));

  auto mixed = Document::from_string("lr: 0.5\nnames: {ring: info}\n", "job.yaml");
  mixed.apply_override("names.rin=debug");
  EXPECT_THAT(error_of([&] { read<Levels>(mixed.root()); }),
              HasSubstr("job.yaml:2:8 (changed by --set names.rin=debug): names: no subsystem 'rin'"));

  auto validated = Document::from_string("steps: 5\n", "job.yaml");
  validated.apply_override("schedule.warmup_steps=9");
  EXPECT_THAT(error_of([&] { read<OptimOptions>(validated.root()); }),
              HasSubstr("--set schedule.warmup_steps=9: schedule: warmup_steps exceeds steps"));
}

// A check that a key is missing, caused by another key: the location is the section that lacks
// it (with the --set that changed it), never the file alone for a value it does not hold.
TEST(Config, AMissingKeyNamesItsSectionAndTheSetThatChangedIt) {
  auto changed = Document::from_string("plan:\n  type: cosine\n", "job.yaml");
  changed.apply_override("plan.type=multistep");
  EXPECT_THAT(error_of([&] { read<Planned>(changed.root()); }),
              HasSubstr("job.yaml:2:3 (changed by --set plan.type=multistep): plan.milestones: multistep needs at least "
                        "one milestone"));

  auto made = Document::from_string("other: 1\n", "job.yaml");
  made.apply_override("plan.type=multistep");
  std::string message = error_of([&] { read<Planned>(made.root()); });
  EXPECT_THAT(message, HasSubstr("--set plan.type=multistep: plan.milestones: multistep needs"));
  EXPECT_THAT(message, Not(HasSubstr("job.yaml")));

  auto whole = Document::from_string("other: 1\n", "job.yaml");
  whole.apply_override("plan={type: multistep}");
  EXPECT_THAT(error_of([&] { read<Planned>(whole.root()); }),
              HasSubstr("--set plan={type: multistep}: plan.milestones: multistep needs"));

  EXPECT_THAT(error_of([] { read<Planned>(Document::from_string("plan: {type: multistep}\n", "job.yaml").root()); }),
              HasSubstr("job.yaml:1:7: plan.milestones: multistep needs"));
}

// --set takes key[N] for an entry of a list the config has; other list edits give the whole list.
TEST(Config, SetStepsIntoListEntries) {
  auto doc = Document::from_string("milestones: [5, 6]\n", "job.yaml");
  doc.apply_override("milestones[1]=7");
  EXPECT_EQ(read<OptimOptions>(doc.root()).milestones, (std::vector<int>{5, 7}));
  doc.apply_override("milestones[0]=x");
  std::string message = error_of([&] { read<OptimOptions>(doc.root()); });
  EXPECT_THAT(message, HasSubstr("--set milestones[0]=x: milestones[0]: expected an integer, got 'x'"));

  EXPECT_THAT(error_of([&] { doc.apply_override("milestones[2]=9"); }),
              HasSubstr("--set milestones[2]=9: 'milestones' has 2 entries, so it has no entry [2]; to add or remove "
                        "entries, give the whole list instead: --set 'milestones=[...]'"));
  EXPECT_THAT(error_of([&] { doc.apply_override("lr[0]=1"); }), HasSubstr("'lr' is not in the config, so it has no "
                                                                          "entry [0]; give the whole list instead"));
  doc.apply_override("lr=0.5");
  EXPECT_THAT(error_of([&] { doc.apply_override("lr[0]=1"); }), HasSubstr("'lr' is not a list, so it has no entry [0]"));
  EXPECT_THAT(error_of([&] { doc.apply_override("milestones[0].x=1"); }),
              HasSubstr("'milestones[0]' is not a section, so it has no key 'x'"));
  for (const char* bad : {"milestones[x]=1", "milestones[]=1", "milestones[-1]=1", "milestones[0=1", "milestones]=1",
                          "milestones[0]x=1"}) {
    EXPECT_THAT(error_of([&] { doc.apply_override(bad); }), HasSubstr("is neither a key nor key[index]")) << bad;
  }

  auto rules = Document::from_string("placement:\n  - {match: a, place: ps}\n  - {match: b, place: ps}\n", "r.yaml");
  rules.apply_override("placement[1].place=ring");
  const auto read_rules = read<Rules>(rules.root());
  EXPECT_EQ(read_rules.placement.at(0).place, "ps");
  EXPECT_EQ(read_rules.placement.at(1).place, "ring");
  rules.apply_override("placement[0].plac=ring");
  message = error_of([&] { read<Rules>(rules.root()); });
  EXPECT_THAT(message, HasSubstr("--set placement[0].plac=ring: placement[0].plac: unknown key (did you mean 'place'?)"));
  EXPECT_THAT(message, Not(HasSubstr("r.yaml")));
  auto bad_value = Document::from_string("placement:\n  - {match: a, place: ps}\n", "r.yaml");
  bad_value.apply_override("placement[0].place=rnig");
  EXPECT_THAT(error_of([&] { read<Rules>(bad_value.root()); }),
              HasSubstr("--set placement[0].place=rnig: placement[0].place: expected one of: ps, ring"));
}

// A later --set of a whole section replaces what earlier ones wrote inside it: they are no longer
// named for its keys.
TEST(Config, ALaterSetOfASectionReplacesEarlierSetsInsideIt) {
  auto doc = Document::from_string("steps: 5\n", "job.yaml");
  doc.apply_override("schedule.warmup_steps=3");
  doc.apply_override("schedule={type: step, warmup_steps: -1}");
  const std::string message = error_of([&] { read<OptimOptions>(doc.root()); });
  EXPECT_THAT(message, HasSubstr("--set schedule={type: step, warmup_steps: -1}: schedule.warmup_steps: expected a "
                                 "value >= 0"));
  EXPECT_THAT(message, Not(HasSubstr("warmup_steps=3")));
}

// What a --set of a key writes: the key itself and everything inside it, by whole steps of the
// path (the check the trainer's --emit and aiacc-bench train refuse their own keys by).
TEST(Config, AKeyOrASectionHoldingItIsTold) {
  EXPECT_TRUE(is_key_or_section_holding("cluster.ring.interface", "cluster.ring.interface"));
  EXPECT_TRUE(is_key_or_section_holding("cluster.ring", "cluster.ring.interface"));
  EXPECT_TRUE(is_key_or_section_holding("cluster", "cluster.ring.interface"));
  EXPECT_TRUE(is_key_or_section_holding("placement", "placement[0].tables"));
  EXPECT_TRUE(is_key_or_section_holding("placement[0]", "placement[0].tables"));
  // A longer key, a sibling whose name starts alike, or a key inside the path is not.
  EXPECT_FALSE(is_key_or_section_holding("cluster.ring.interface.x", "cluster.ring.interface"));
  EXPECT_FALSE(is_key_or_section_holding("cluster.ring", "cluster.ring_size"));
  EXPECT_FALSE(is_key_or_section_holding("cluster.rin", "cluster.ring.interface"));
  EXPECT_FALSE(is_key_or_section_holding("placement[1]", "placement[10].tables"));
  EXPECT_FALSE(is_key_or_section_holding("job", "cluster.ring.interface"));
}

TEST(Config, AFolderIsNotAConfigFile) {
  EXPECT_THAT(error_of([] { Document::from_file(::testing::TempDir()); }), HasSubstr("is a folder, not a config file"));
}

TEST(Config, WriterRoundTripsResolvedValues) {
  auto o = parse("lr: 0.25\nmilestones: []\nclip: 1.0\nschedule: {type: step}\n");
  std::string text = write(o, Writer::Mode::resolved);
  auto again = read<OptimOptions>(Document::from_string(text, "dump").root());
  EXPECT_EQ(write(again, Writer::Mode::resolved), text);
  EXPECT_DOUBLE_EQ(again.lr, 0.25);
  EXPECT_TRUE(again.milestones.empty());
}

TEST(Config, ReferenceHasEveryKeyAndDoc) {
  std::string text = write(OptimOptions{}, Writer::Mode::reference);
  EXPECT_THAT(text, HasSubstr("lr: 0.1"));
  EXPECT_THAT(text, HasSubstr("# base learning rate"));
  EXPECT_THAT(text, HasSubstr("warmup_steps: 0"));
  EXPECT_THAT(text, HasSubstr("clip: null"));
  auto defaults = read<OptimOptions>(Document::from_string(text, "reference").root());
  EXPECT_EQ(write(defaults, Writer::Mode::reference), text);
}

TEST(Config, StringsThatLookLikeOtherTypesAreQuoted) {
  EXPECT_EQ(scalar_text(std::string("true")), "\"true\"");
  EXPECT_EQ(scalar_text(std::string("12")), "\"12\"");
  EXPECT_EQ(scalar_text(std::string("")), "\"\"");
  EXPECT_EQ(scalar_text(std::string("runs/a")), "runs/a");
  EXPECT_EQ(scalar_text(3.0), "3.0");
  EXPECT_EQ(scalar_text(1e-5), "1e-05");
}

// ---- polymorphic blocks through a Registry ----

struct Widget {
  virtual ~Widget() = default;
  virtual int size() const = 0;
};
struct Small : Widget {
  struct Options {
    int size = 3;
    template <class V> void visit(V& v) { v.field("size", size, "widget size", at_least(1)); }
  };
  explicit Small(const Options& o, int bonus) : total(o.size + bonus) {}
  int size() const override { return total; }
  int total;
};
struct Large : Widget {
  struct Options {
    int width = 100;
    template <class V> void visit(V& v) { v.field("width", width, "widget width"); }
  };
  explicit Large(const Options& o, int) : width(o.width) {}
  int size() const override { return width; }
  int width;
};

Registry<Widget, int>& widgets() {
  static Registry<Widget, int> registry("widget type");
  return registry;
}
AIACC_REGISTER(widgets(), "small", Small);
AIACC_REGISTER(widgets(), "large", Large);

struct Holder {
  std::string type = "small";
  TypedBlocks options;
  template <class V>
  void visit(V& v) {
    v.field("type", type, "widget to build", widgets().name_check());
    v.blocks(widgets(), type, options, "options of each widget type");
  }
};

TEST(Registry, CreatesFromBlocksAndRejectsUnknown) {
  auto h = read<Holder>(Document::from_string("type: small\nsmall: {size: 5}\n", "w.yaml").root());
  EXPECT_EQ(widgets().create(h.type, h.options.block(h.type), 10)->size(), 15);
  EXPECT_EQ(widgets().create("large", Node(), 0)->size(), 100);

  EXPECT_THAT(error_of([] { read<Holder>(Document::from_string("type: smal\n", "w.yaml").root()); }),
              HasSubstr("did you mean 'small'"));
  EXPECT_THAT(error_of([] { read<Holder>(Document::from_string("small: {sise: 1}\n", "w.yaml").root()); }),
              HasSubstr("w.yaml:1:9: small.sise: unknown key (did you mean 'size'?)"));
  EXPECT_THAT(error_of([] { widgets().create("tiny", Node(), 0); }),
              HasSubstr("unknown widget type 'tiny'; known: large, small"));
  EXPECT_THROW(widgets().add_class<Small>("small"), Error);
}

// An implementation's block with nothing under it used to take all defaults without a word.
TEST(Registry, ABlockWithNoValueIsRefused) {
  EXPECT_THAT(error_of([] { read<Holder>(Document::from_string("type: small\nsmall:\n", "w.yaml").root()); }),
              HasSubstr("w.yaml:2:1: small: no value"));
  EXPECT_THAT(error_of([] { read<Holder>(Document::from_string("small: {size: ~}\n", "w.yaml").root()); }),
              HasSubstr("w.yaml:1:9: small.size: no value"));
  EXPECT_EQ(read<Holder>(Document::from_string("type: small\nsmall: {}\n", "w.yaml").root()).type, "small");
}

// The blocks of types not selected change nothing: listed with their full keys and where they
// are written, so the trainer can say so (a block without keys is named itself).
TEST(Registry, UnusedBlocksAreTheOtherTypesWithTheirKeys) {
  auto h = read<Holder>(Document::from_string("type: small\nsmall: {size: 5}\nlarge: {width: 7}\n", "w.yaml").root());
  auto unused = h.options.unused(h.type);
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_THAT(unused[0].where, HasSubstr("w.yaml:3:"));
  EXPECT_EQ(unused[0].keys, std::vector<std::string>{"large.width"});
  unused = h.options.unused("large");
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_EQ(unused[0].keys, std::vector<std::string>{"small.size"});
  h = read<Holder>(Document::from_string("type: small\nlarge: {}\n", "w.yaml").root());
  unused = h.options.unused(h.type);
  ASSERT_EQ(unused.size(), 1u);
  EXPECT_EQ(unused[0].keys, std::vector<std::string>{"large"});
  EXPECT_TRUE(read<Holder>(Document::from_string("type: small\nsmall: {size: 5}\n", "w.yaml").root()).options.unused("small").empty());
}

TEST(Registry, ReferenceListsEveryBlockResolvedOnlyTheChosen) {
  std::string reference = write(Holder{}, Writer::Mode::reference);
  EXPECT_THAT(reference, HasSubstr("large:"));
  EXPECT_THAT(reference, HasSubstr("width: 100"));
  EXPECT_THAT(reference, HasSubstr("size: 3"));
  auto h = read<Holder>(Document::from_string("type: large\nlarge: {width: 7}\n", "w.yaml").root());
  std::string resolved = write(h, Writer::Mode::resolved);
  EXPECT_EQ(resolved, "type: large\nlarge:\n  width: 7\n");
}

TEST(Suggest, EditDistance) {
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
  EXPECT_EQ(edit_distance("warmup", "wramup"), 1u);
  EXPECT_EQ(closest_name("depht", {"depth", "width"}), "depth");
  EXPECT_EQ(closest_name("zzzzzz", {"depth", "width"}), "");
}

TEST(Suggest, JoinNamesShowsAtMostTheFirstNamesAndCountsTheRest) {
  EXPECT_EQ(join_names({"a", "b", "c"}), "a, b, c");
  EXPECT_EQ(join_names({"a", "b", "c"}, 3), "a, b, c");
  EXPECT_EQ(join_names({"a", "b", "c", "d", "e"}, 2), "a, b and 3 more");
  EXPECT_EQ(join_names({}, 2), "");
  EXPECT_EQ(join_names({"a", "b"}, 0), "2 names");
}

}  // namespace
}  // namespace aiacc::config
