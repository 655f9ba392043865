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

}  // namespace
}  // namespace aiacc::config
