// Spec parsing: every error class with its message, override precedence, round trip.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "core/config/fields.hpp"
#include "core/config/privacy_options.hpp"
#include "core/config/spec.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "methods/method.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"
#include "test_util.hpp"

using namespace dpft;
using Catch::Matchers::Contains;

namespace {
Spec parse(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  YAML::Node n = YAML::Load(yaml);
  if (n.IsNull()) n = YAML::Node(YAML::NodeType::Map);
  for (const auto& s : sets) apply_override(n, s);
  return parse_spec(n);
}

std::string config_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse(yaml, sets);
  } catch (const ConfigError& e) {
    CHECK(e.exit_code() == 2);
    return e.what();
  }
  FAIL("expected a ConfigError for:\n" << yaml);
  return "";
}
}  // namespace

TEST_CASE("defaults parse and are what the struct says", "[config]") {
  Spec s = parse("");
  CHECK(s.name == "experiment");
  CHECK(!s.privacy.epsilon.has_value());  // no default: a DP method must be given one
  CHECK(!s.privacy.noise_multiplier.has_value());
  CHECK(s.privacy.delta == 1e-5);
  CHECK(s.privacy.accountant == privacy::AccountantKind::kPrv);
  CHECK(s.method.name == "noop");
  CHECK(s.method.options.IsMap());
  CHECK(s.model.peft.targets == std::vector<std::string>{"auto"});  // resolved per model
}

TEST_CASE("unknown key names the path and suggests the closest key", "[config]") {
  std::string msg = config_error("privacy:\n  epsilom: 2\n");
  CHECK_THAT(msg, Contains("unknown key `privacy.epsilom`"));
  CHECK_THAT(msg, Contains("did you mean `privacy.epsilon`?"));
}

TEST_CASE("a key in the wrong block suggests its real home", "[config]") {
  std::string msg = config_error("train:\n  clip_norm: 1.0\n");
  CHECK_THAT(msg, Contains("unknown key `train.clip_norm`"));
  CHECK_THAT(msg, Contains("did you mean `privacy.clip_norm`?"));
}

TEST_CASE("unknown top-level key and several unknown keys are all reported", "[config]") {
  std::string msg = config_error("seeed: 3\nmodel:\n  pth: x\n");
  CHECK_THAT(msg, Contains("`seeed` (did you mean `seed`?)"));
  CHECK_THAT(msg, Contains("`model.pth` (did you mean `model.path`?)"));
}

TEST_CASE("wrong types name the key and the value", "[config]") {
  CHECK_THAT(config_error("privacy:\n  delta: abc\n"),
             Contains("privacy.delta: expected a number, got 'abc'"));
  CHECK_THAT(config_error("train:\n  steps: 2.5\n"),
             Contains("train.steps: expected an integer, got '2.5'"));
  CHECK_THAT(config_error("eval:\n  per_sample: maybe\n"),
             Contains("eval.per_sample: expected true or false, got 'maybe'"));
  CHECK_THAT(config_error("privacy: 3\n"), Contains("privacy: expected a mapping of keys"));
  CHECK_THAT(config_error("model:\n  peft:\n    targets: {a: 1}\n"),
             Contains("model.peft.targets: expected a list of strings"));
}

TEST_CASE("out-of-range values name the allowed range", "[config]") {
  CHECK_THAT(config_error("privacy:\n  delta: 1.5\n"),
             Contains("privacy.delta: 1.5 is out of range; allowed (0, 1)"));
  CHECK_THAT(config_error("privacy:\n  epsilon: 0\n"),
             Contains("privacy.epsilon: 0 is out of range; allowed (0, .inf]"));
  CHECK_THAT(config_error("privacy:\n  epsilon: -1\n"),
             Contains("privacy.epsilon: -1 is out of range"));
  CHECK_THAT(config_error("train:\n  steps: 0\n"),
             Contains("train.steps: 0 is out of range; allowed [1, 100000000]"));
  CHECK_THAT(config_error("privacy:\n  sampling_rate: 0\n"), Contains("allowed (0, 1]"));
}

TEST_CASE("choices list the allowed values", "[config]") {
  std::string msg = config_error("privacy:\n  accountant: prb\n");
  CHECK_THAT(msg,
             Contains("privacy.accountant: 'prb' is not allowed; use one of: prv, rdp, gaussian"));
  CHECK_THAT(msg, Contains("did you mean 'prv'?"));
}

TEST_CASE("unknown method lists the known ones", "[config]") {
  std::string msg = config_error("method:\n  name: noopp\n");
  CHECK_THAT(msg, Contains("unknown method 'noopp'"));
  CHECK_THAT(msg, Contains("known methods: noop"));
}

TEST_CASE("method-owned keys are validated by the method", "[config]") {
  Spec s = parse("method:\n  name: noop\n  steps: 3\n");
  CHECK(s.method.options["steps"].as<int>() == 3);
  CHECK(configured_method(s.method)->options_yaml()["steps"].as<int>() == 3);
  CHECK_THAT(config_error("method:\n  name: noop\n  stepz: 3\n"),
             Contains("unknown key `method.stepz` (did you mean `method.steps`?)"));
  CHECK_THAT(config_error("method:\n  steps: -1\n"), Contains("method.steps: -1 is out of range"));
}

TEST_CASE("a method is configured once per parse; each run works on a copy", "[config]") {
  Spec s = parse("method:\n  name: noop\n  steps: 3\n");
  s.method.options["steps"] = "not a number";  // the block is never read again after the parse
  CHECK(configured_method(s.method)->options_yaml()["steps"].as<int>() == 3);
  CHECK_FALSE(method_trains(s));
  CHECK(planned_releases(s).empty());

  Spec d = parse("privacy: {epsilon: 1}\nmethod: {name: dp-sgd}\n");
  std::unique_ptr<Method> a = configured_method(d.method), b = configured_method(d.method);
  CHECK(a.get() != b.get());
  CHECK(a->plan(d, 100, {}).size() == 1);
  CHECK(a->plan_settings().is_object());  // a's plan is a's: b and the parsed method have none
  CHECK_THROWS_WITH(b->plan_settings(), Contains("before plan() resolved them"));
  CHECK_THROWS_WITH(parsed_method(d.method).plan_settings(),
                    Contains("before plan() resolved them"));
  CHECK_THROWS_WITH(configured_method(Spec{}.method), Contains("was not parsed"));
}

TEST_CASE("epsilon inf means non-private", "[config]") {
  for (const char* v : {"inf", ".inf", "Infinity", "+inf"}) {
    Spec s = parse(std::string("privacy:\n  epsilon: ") + v + "\n");
    CHECK(std::isinf(*s.privacy.epsilon));
    CHECK_FALSE(s.privacy.is_private());
  }
  CHECK(parse("privacy:\n  epsilon: 2\n").privacy.is_private());
}

TEST_CASE("epsilon and noise_multiplier conflict", "[config]") {
  CHECK_THAT(config_error("privacy:\n  epsilon: 2\n  noise_multiplier: 1.1\n"),
             Contains("set either epsilon"));
  Spec s = parse("privacy:\n  noise_multiplier: 1.1\n");
  CHECK_FALSE(s.privacy.epsilon.has_value());
  CHECK(*s.privacy.noise_multiplier == 1.1);
}

TEST_CASE("precedence: defaults < file < --set, with YAML typing", "[config]") {
  std::string yaml = "seed: 5\nprivacy:\n  epsilon: 4\n  delta: 1e-6\n";
  Spec f = parse(yaml);
  CHECK(f.seed == 5);
  CHECK(*f.privacy.epsilon == 4);
  CHECK(f.privacy.delta == 1e-6);
  CHECK(f.train.steps == 100);  // default untouched
  Spec o = parse(yaml, {"privacy.epsilon=2", "train.steps=7", "model.peft.targets=[c_attn, c_proj]",
                        "privacy.delta=1e-5"});
  CHECK(o.seed == 5);
  CHECK(*o.privacy.epsilon == 2);
  CHECK(o.train.steps == 7);
  CHECK(o.privacy.delta == 1e-5);
  CHECK(o.model.peft.targets == std::vector<std::string>{"c_attn", "c_proj"});
  // later --set wins over earlier --set
  CHECK(parse("", {"seed=1", "seed=2"}).seed == 2);
}

TEST_CASE("set overrides: malformed assignments are errors", "[config]") {
  YAML::Node n(YAML::NodeType::Map);
  CHECK_THROWS_WITH(apply_override(n, "privacy.epsilon"), Contains("expected key.path=value"));
  CHECK_THROWS_WITH(apply_override(n, "privacy..epsilon=1"), Contains("empty component"));
  YAML::Node m = YAML::Load("seed: 3");
  CHECK_THROWS_WITH(apply_override(m, "seed.x=1"), Contains("'seed' is a value, not a block"));
  // an override of an unknown key is caught by validation with a suggestion
  CHECK_THAT(config_error("", {"privacy.epsilonn=2"}), Contains("did you mean `privacy.epsilon`?"));
}

TEST_CASE("resolved spec round-trips through YAML", "[config]") {
  Spec s = parse(
      "name: rt\nseed: 9\nprivacy:\n  epsilon: 1.5\n  delta: 3.3e-7\nmethod:\n  steps: 4\n"
      "train:\n  lr: 0.0003\n");
  std::string once = spec_to_yaml_string(s);
  Spec again = parse_spec(YAML::Load(once));
  CHECK(spec_to_yaml_string(again) == once);
  CHECK(again.privacy.delta == 3.3e-7);
  CHECK(again.train.lr == 0.0003);
  CHECK(config_hash(again) == config_hash(s));
  // inf survives the round trip
  Spec inf = parse("privacy:\n  epsilon: inf\n");
  CHECK(std::isinf(*parse_spec(YAML::Load(spec_to_yaml_string(inf))).privacy.epsilon));
}

TEST_CASE("privacy.noise_draw: auto by default, host or device; device refused unless seeded",
          "[config]") {
  CHECK(parse("").privacy.noise_draw == privacy::NoiseDraw::kAuto);
  for (auto [text, want] : {std::pair{"host", privacy::NoiseDraw::kHost},
                            std::pair{"device", privacy::NoiseDraw::kDevice}}) {
    Spec s = parse(std::string("privacy:\n  noise_seed: 1\n  noise_draw: ") + text + "\n");
    CHECK(s.privacy.noise_draw == want);
    Spec again = parse_spec(YAML::Load(spec_to_yaml_string(s)));  // round trip
    CHECK(again.privacy.noise_draw == want);
    CHECK(config_hash(again) != config_hash(parse("")));
  }
  // The default is left out of the resolved YAML: older runs' configs and hashes are unchanged.
  CHECK(spec_to_yaml_string(parse("")).find("noise_draw") == std::string::npos);
  CHECK_THAT(config_error("privacy:\n  noise_draw: gpu\n"),
             Contains("use one of: auto, host, device"));
  CHECK_THAT(config_error("privacy:\n  secure_noise: true\n  noise_draw: device\n"),
             Contains("host's CSPRNG"));
  CHECK(parse("privacy:\n  secure_noise: true\n  noise_draw: host\n").privacy.secure_noise);
  // Keyed noise (no noise_seed) is drawn on the host too; noise_seed and secure_noise conflict.
  CHECK_THAT(config_error("privacy:\n  noise_draw: device\n"), Contains("privacy.noise_seed"));
  CHECK_THAT(config_error("privacy:\n  noise_seed: 3\n  secure_noise: true\n"),
             Contains("not both"));
  CHECK_THAT(config_error("privacy:\n  noise_seed: -1\n"), Contains("noise_seed"));
}

TEST_CASE("privacy.noise_seed: absent by default, dumped when set, outside the config hash",
          "[config]") {
  CHECK_FALSE(parse("").privacy.noise_seed);
  CHECK(spec_to_yaml_string(parse("")).find("noise_seed") == std::string::npos);
  Spec s = parse("privacy:\n  noise_seed: 12\n");
  REQUIRE(s.privacy.noise_seed);
  CHECK(*s.privacy.noise_seed == 12);
  CHECK(*parse_spec(YAML::Load(spec_to_yaml_string(s))).privacy.noise_seed == 12);
  CHECK(config_hash(s) == config_hash(parse("privacy:\n  noise_seed: 13\n")));
  CHECK(config_hash(s) == config_hash(parse("")));
}

TEST_CASE("config hash ignores seed/name/output but not the configuration", "[config]") {
  CHECK(config_hash(parse("seed: 1\nname: a")) ==
        config_hash(parse("seed: 2\nname: b\noutput:\n  dir: x")));
  CHECK(config_hash(parse("privacy:\n  epsilon: 1")) !=
        config_hash(parse("privacy:\n  epsilon: 2")));
}

TEST_CASE("spec files: missing file is an input error, bad YAML a config error with position",
          "[config]") {
  test::TempDir d;
  try {
    load_spec((d.path / "nope.yaml").string(), {});
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.exit_code() == 3);
    CHECK_THAT(std::string(e.what()), Contains("nope.yaml"));
  }
  auto bad = d.write("bad.yaml", "privacy:\n  epsilon: [1,\n");
  try {
    load_spec(bad.string(), {});
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Contains("bad.yaml:"));
    CHECK_THAT(std::string(e.what()), Contains("invalid YAML"));
  }
  auto ok = d.write("ok.yaml", "name: file-spec\n");
  CHECK(load_spec(ok.string(), {"seed=4"}).seed == 4);
  CHECK(load_spec(ok.string(), {}).name == "file-spec");
}

TEST_CASE("nothing silently swaps a privacy value: empty, null, overflowing, duplicate keys",
          "[config]") {
  // An empty or null key is unset for the optional values (epsilon, noise_multiplier,
  // sampling_rate) and an error for the rest; it never falls back to a default epsilon.
  CHECK(!parse("privacy:\n  epsilon:\n").privacy.epsilon.has_value());
  CHECK(!parse("privacy:\n  epsilon: ~\n").privacy.epsilon.has_value());
  CHECK(!parse("privacy: {epsilon: 1}\n", {"privacy.epsilon=null"}).privacy.epsilon.has_value());
  CHECK_THAT(config_error("privacy:\n  delta:\n"), Contains("privacy.delta: no value given"));
  CHECK_THAT(config_error("privacy:\n  clip_norm: ~\n"),
             Contains("privacy.clip_norm: no value given"));
  CHECK_THAT(config_error("train:\n  steps:\n"), Contains("train.steps: no value given"));
  CHECK_THAT(config_error("model:\n  path:\n"), Contains("model.path: no value given"));
  // --set with an empty value (an unset shell variable) is refused, whatever the key.
  CHECK_THAT(config_error("privacy: {epsilon: 1}\n", {"privacy.epsilon="}),
             Contains("empty value"));
  CHECK_THAT(config_error("", {"privacy.delta=  "}), Contains("empty value"));
  // A number a double cannot hold is not infinity (only .inf / inf are).
  CHECK_THAT(config_error("privacy: {epsilon: 1e999}\n"),
             Contains("privacy.epsilon: 1e999 is outside the range of a double"));
  CHECK_THAT(config_error("privacy: {delta: 1e-999}\n"),
             Contains("privacy.delta: 1e-999 is outside the range of a double"));
  CHECK_THAT(config_error("train: {steps: 1e999}\n"), Contains("outside the range of a double"));
  // A subnormal double (strtod's ERANGE too) is named as such, not as out of range.
  CHECK_THAT(config_error("privacy:\n  delta: 1e-320\n"),
             Contains("privacy.delta: 1e-320 is below the smallest normal double"));
  CHECK(std::isinf(*parse("privacy: {epsilon: .inf}\n").privacy.epsilon));
  CHECK(!parse_double("1e309").has_value());
  CHECK(parse_double("1e308").value() == 1e308);
  // Duplicate keys (yaml-cpp would read the first), complex keys and deep nesting.
  CHECK_THAT(config_error("privacy:\n  epsilon: 1\n  delta: 1e-5\n  epsilon: 8\n"),
             Contains("privacy.epsilon: the key appears twice"));
  CHECK_THAT(config_error("seed: 1\nseed: 2\n"), Contains("seed: the key appears twice"));
  CHECK_THAT(config_error("privacy:\n  ? [a, b]\n  : 1\n"),
             Contains("a key must be a plain name"));
  std::string deep = "a: ";
  for (int i = 0; i < 40; ++i) deep += "{b: ";
  deep += "1" + std::string(40, '}') + "\n";
  CHECK_THAT(config_error(deep), Contains("nested more than"));
  // From a file, the lines of both occurrences are named.
  test::TempDir d;
  auto dup = d.write("dup.yaml", "privacy:\n  epsilon: 1\n  epsilon: 8\n");
  try {
    load_spec(dup.string(), {});
    FAIL("a duplicate key was accepted");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Contains("(line 2) and (line 3)"));
  }
  try {
    load_spec(d.path.string(), {});
    FAIL("a directory was accepted as a spec");
  } catch (const InputError& e) {
    CHECK_THAT(std::string(e.what()), Contains("is a directory"));
  }
  auto list = d.write("list.yaml", "- a\n- b\n");
  CHECK_THROWS_WITH(load_spec(list.string(), {}), Contains("a spec is a mapping"));
}

TEST_CASE("a DP method needs epsilon or noise_multiplier given: no default budget", "[config]") {
  for (const char* m : {"dp-sgd", "pe-sgd", "pdp-sgd", "gep", "inpro", "sft+dp-sgd"}) {
    INFO(m);
    const std::string prompts = std::string(m) != "dp-sgd"
                                    ? ", prompts: " + (fs::path(DPFT_SOURCE_DIR) / "experiments/prompts/pubmed.yaml").string()
                                    : "";
    Spec s = parse(fmt::format("method: {{name: {}{}}}\n", m, prompts));
    std::unique_ptr<Method> method = configured_method(s.method);
    CHECK_THROWS_WITH(method->plan(s, 100, {}),
                      Contains("neither privacy.epsilon") && Contains("noise_multiplier"));
    s.privacy.epsilon = 1.0;
    CHECK(method->plan(s, 100, {}).size() == 1);
  }
  Spec s = parse("method: {name: sgd}\n");  // non-private methods need neither
  auto plan = configured_method(s.method)->plan(s, 100, {});
  REQUIRE(plan.size() == 1);  // T non-private releases: the run reports epsilon inf
  CHECK(plan[0].noise_multiplier == 0);
  CHECK(plan[0].count == s.train.steps);
}

TEST_CASE("name and device are validated", "[config]") {
  CHECK_THAT(config_error("name: a/b\n"), Contains("name: 'a/b' must"));
  CHECK_THAT(config_error("device: gpu\n"), Contains("device: 'gpu' is not a device"));
  CHECK(parse("device: cuda:1\n").device == "cuda:1");
}

TEST_CASE("data keys: text format, pairs, train_extra, packing, loss_on, chat_format", "[config]") {
  Spec s = parse(
      "data:\n  train: {path: a.csv, prompt_column: q}\n  train_extra:\n    - {path: w.txt, "
      "format: text}\n"
      "    - {path: b.jsonl, text_column: body, num_samples: 5}\n  packing: true\n  add_eos: "
      "false\n"
      "  loss_on: all\n  chat_format: qwen2.5\n");
  CHECK(s.data.train.prompt_column == "q");
  REQUIRE(s.data.train_extra.size() == 2);
  CHECK(s.data.train_extra[0].format == "text");
  CHECK(s.data.train_extra[1].text_column == "body");
  CHECK(s.data.train_extra[1].num_samples == 5);
  CHECK(s.data.packing);
  CHECK_FALSE(s.data.add_eos);
  CHECK(s.data.chat_format == ChatFormatChoice::kQwen25);
  Spec def = parse("");
  CHECK(def.data.train_extra.empty());
  CHECK_FALSE(def.data.packing);
  CHECK(def.data.add_eos);
  CHECK(def.data.loss_on == LossOn::kAll);
  CHECK(def.data.chat_format == ChatFormatChoice::kNone);
  CHECK(def.data.train.prompt_column.empty());
  // round trip keeps every new key, the list included
  std::string once = spec_to_yaml_string(s);
  CHECK(spec_to_yaml_string(parse_spec(YAML::Load(once))) == once);
  CHECK(spec_to_yaml_string(parse_spec(YAML::Load(spec_to_yaml_string(def)))) ==
        spec_to_yaml_string(def));
  CHECK(config_hash(s) != config_hash(def));
}

TEST_CASE("data keys: errors name the key and what is allowed", "[config]") {
  CHECK_THAT(config_error("data:\n  loss_on: prompt\n"),
             Contains("data.loss_on: 'prompt' is not allowed; use one of: all, response"));
  CHECK_THAT(config_error("data:\n  chat_format: vicuna\n"),
             Contains("data.chat_format: 'vicuna' is not allowed; use one of: none, auto, plain, "
                      "chatml, qwen2.5, "
                      "llama3"));
  CHECK_THAT(config_error("data:\n  train: {format: txt}\n"),
             Contains("data.train.format: 'txt' is not allowed"));
  std::string msg = config_error("data:\n  loss_on: response\n");
  CHECK_THAT(msg, Contains("data.loss_on: 'response'"));
  CHECK_THAT(msg, Contains("data.train has no prompt_column"));
  CHECK_THAT(config_error("data:\n  loss_on: response\n  train: {prompt_column: q}\n  train_extra: "
                          "[{path: x.txt}]\n"),
             Contains("data.train_extra[0] has no prompt_column"));
  CHECK(parse("data:\n  loss_on: response\n  train: {prompt_column: q}\n").data.loss_on ==
        LossOn::kResponse);
  CHECK_THAT(config_error("train:\n  optimizer: adam\n"),
             Contains("train.optimizer: 'adam' is not allowed; use one of: sgd, adamw"));
  CHECK_THAT(
      config_error("train:\n  schedule: step\n"),
      Contains("train.schedule: 'step' is not allowed; use one of: constant, linear, cosine"));
  CHECK(parse("train:\n  schedule: cosine\n  optimizer: sgd\n").train.schedule ==
        Schedule::kCosine);
  std::string unk = config_error("data:\n  train_extra:\n    - {path: a.txt, text_colum: t}\n");
  CHECK_THAT(unk, Contains("unknown key `data.train_extra[0].text_colum` (did you mean "
                           "`data.train_extra[0].text_column`?)"));
  CHECK_THAT(config_error("data:\n  train_extra: {path: a.txt}\n"),
             Contains("data.train_extra: expected a list of dataset blocks"));
  CHECK_THAT(config_error("data:\n  train_extra: [3]\n"),
             Contains("data.train_extra[0]: expected a mapping"));
  CHECK_THAT(config_error("data:\n  packing: sometimes\n"),
             Contains("data.packing: expected true or false"));
}

TEST_CASE("privacy.delta: auto is 1 / (N ln N), resolved once N is known", "[config]") {
  Spec s = parse("privacy:\n  delta: auto\n");
  CHECK(s.privacy.delta_auto);
  CHECK(s.privacy.delta_set);
  CHECK(spec_to_yaml(s)["privacy"]["delta"].as<std::string>() == "auto");
  CHECK_FALSE(parse("").privacy.delta_set);
  CHECK(parse("", {"privacy.delta=auto"}).privacy.delta_auto);
  resolve_auto_delta(s, 75316);  // CTCL's PubMed: 1 / (75316 x 11.22945) = 1.18237e-6
  CHECK_FALSE(s.privacy.delta_auto);
  CHECK(s.privacy.delta == Approx(1.0 / (75316 * std::log(75316.0))).epsilon(1e-14));
  CHECK(s.privacy.delta == Approx(1.18237e-6).epsilon(1e-5));
  // The resolved spec holds the number: a resume re-reads it, never auto again.
  const Spec again = parse(YAML::Dump(spec_to_yaml(s)));
  CHECK_FALSE(again.privacy.delta_auto);
  CHECK(again.privacy.delta == s.privacy.delta);
  Spec tiny = parse("privacy:\n  delta: auto\n");
  CHECK_THROWS_AS(resolve_auto_delta(tiny, 20), ConfigError);  // 1 / (20 ln 20) = 0.017
  Spec fixed = parse("privacy:\n  delta: 1.0e-6\n");
  resolve_auto_delta(fixed, 75316);
  CHECK(fixed.privacy.delta == 1e-6);
  CHECK_THAT(config_error("privacy:\n  delta: often\n"), Contains("or auto"));
}

TEST_CASE(
    "privacy options: a DP run with packing or a realised divisor is refused; non-private "
    "runs keep them; docs/privacy.md's table is the code's",
    "[config]") {
  CHECK_THAT(config_error("privacy:\n  epsilon: 1\ndata:\n  packing: true\n"),
             Contains("data.packing: true (changes-unit)") && Contains("data.packing: false"));
  CHECK_THAT(config_error("privacy:\n  noise_multiplier: 1.0\n  noise_divisor: realized\n"),
             Contains("privacy.noise_divisor: realized (releases)") &&
                 Contains("noise_divisor: expected"));
  // Both at once: both named.
  CHECK_THAT(config_error("privacy:\n  epsilon: 2\n  noise_divisor: realized\ndata:\n  "
                          "packing: true\n"),
             Contains("data.packing") && Contains("privacy.noise_divisor"));
  // Non-private runs (epsilon inf, sigma 0, no privacy block) keep them.
  CHECK(parse("privacy:\n  epsilon: .inf\ndata:\n  packing: true\n").data.packing);
  CHECK(
      parse("privacy:\n  noise_multiplier: 0\n  noise_divisor: realized\n").privacy.noise_divisor ==
      privacy::NoiseDivisor::kRealized);
  CHECK(parse("data:\n  packing: true\n").data.packing);
  // The verdict `dpft config validate` prints.
  auto v = privacy_verdict(parse("privacy:\n  epsilon: 1\n  noise_seed: 2\n"));
  REQUIRE(v.size() >= 2);
  CHECK_THAT(v[0], Contains("DP spec") && Contains("labelled non-private"));
  bool seed_line = false;
  for (const auto& l : v)
    seed_line |= l.find("privacy.noise_seed: set -> non-private") != std::string::npos;
  CHECK(seed_line);
  CHECK_THAT(privacy_verdict(parse("privacy:\n  epsilon: 1\noutput:\n  non_private_stats: "
                                   "false\n"))[0],
             Contains("no option weakens"));
  CHECK_THAT(privacy_verdict(parse("privacy:\n  epsilon: .inf\n"))[0],
             Contains("non-private spec"));
  // docs/privacy.md holds the table as the code prints it.
  const std::string doc = read_file(fs::path(DPFT_SOURCE_DIR) / "docs" / "privacy.md");
  const std::string open = "<!-- privacy-options: dpft config privacy-options --markdown -->\n",
                    close = "<!-- /privacy-options -->";
  const size_t a = doc.find(open), b = doc.find(close);
  REQUIRE(a != std::string::npos);
  REQUIRE(b != std::string::npos);
  CHECK(doc.substr(a + open.size(), b - a - open.size()) == privacy_options_markdown());
}

TEST_CASE("seq2seq sources: from denoising, from the method or from the data, one of them",
          "[config]") {
  const std::string base = "data: {task: seq2seq, train: {path: t.csv";
  // A method that makes its sources (ctcl, from topics) takes the documents alone.
  CHECK_THAT(config_error(base + ", prompt_column: src}}\nmethod: {name: ctcl, topic_model: tm}\n"
                                 "privacy: {epsilon: 1}\n"),
             Contains("method ctcl takes the documents alone"));
  CHECK_THAT(config_error(base + "}, denoising: {}}\n"
                                 "method: {name: ctcl, topic_model: tm}\nprivacy: {epsilon: 1}\n"),
             Contains("method ctcl makes its own sources"));
  CHECK(parse(base + "}}\nmethod: {name: ctcl, topic_model: tm}\nprivacy: {epsilon: 1}\n")
            .method.name == "ctcl");
  // Any other method needs sources from the data.
  CHECK_THAT(config_error(base + "}}\nmethod: {name: dp-sgd}\nprivacy: {epsilon: 1}\n"),
             Contains("needs sources"));
  CHECK(parse(base + ", prompt_column: src}}\nmethod: {name: dp-sgd}\nprivacy: {epsilon: 1}\n")
            .data.train.prompt_column == "src");
}

TEST_CASE("a Fields writer writes what the getters are given and changes nothing", "[config]") {
  std::string s = "x";
  bool b = true;
  int64_t i = 7;
  double d = std::numeric_limits<double>::infinity();
  std::optional<double> unset, set = 0.25;
  std::vector<std::string> list = {"a", "b"};
  std::vector<std::vector<std::string>> lists = {{"1", "2"}, {"c"}};
  Fields w = Fields::writer("method");
  CHECK(w.writing());
  CHECK_FALSE(w.get("s", s));
  w.get("b", b);
  w.get("i", i, Range::at_least(100));  // a writer validates nothing: it only writes
  w.get("d", d);
  w.get("unset", unset);
  w.get("set", set);
  w.get("list", list);
  w.get("lists", lists);
  Fields c = w.child("block");
  c.get("inner", i);
  c.finish();
  w.finish();
  const YAML::Node& n = w.written();
  CHECK(n["s"].as<std::string>() == "x");
  CHECK(n["b"].as<bool>());
  CHECK(n["i"].as<int64_t>() == 7);
  CHECK(n["d"].as<std::string>() == ".inf");
  CHECK_FALSE(n["unset"]);  // an unset optional is left out
  CHECK(n["set"].as<double>() == 0.25);
  CHECK(n["list"].as<std::vector<std::string>>() == list);
  CHECK(n["lists"].as<std::vector<std::vector<std::string>>>() == lists);
  CHECK(n["block"]["inner"].as<int64_t>() == 7);
  CHECK(s == "x");
  CHECK(i == 7);
  CHECK_THROWS(w.raw("s"));
}

TEST_CASE("label_values: a list of non-empty lists, each error naming the entry", "[config]") {
  auto read = [](const std::string& yaml) {
    auto keys = std::make_shared<KeyRegistry>();
    Fields f(YAML::Load(yaml), "method", keys);
    std::vector<std::vector<std::string>> v;
    f.get("label_values", v);
    return v;
  };
  CHECK(read("label_values: [[a, b], [c]]") ==
        std::vector<std::vector<std::string>>{{"a", "b"}, {"c"}});
  CHECK_THROWS_WITH(read("label_values: a"), Contains("method.label_values: expected a list"));
  CHECK_THROWS_WITH(read("label_values: [[a], []]"),
                    Contains("method.label_values[1]: expected a non-empty list"));
  CHECK_THROWS_WITH(read("label_values: [[a, [b]]]"),
                    Contains("method.label_values[0][1]: expected a value"));
}

// Each method's options are one field list (configure): read, then written by a Fields writer,
// then read back, they write the same text, with non-default values kept.
TEST_CASE("every method's options round-trip through its one field list", "[config]") {
  const std::map<std::string, std::string> needed = {
      {"pe-sgd", "prompts: p.yaml, variation_fold: .inf, evolve: false"},
      {"gep", "prompts: p.yaml, k: 3"},
      {"pdp-sgd", "prompts: p.yaml, k: 5"},
      {"inpro", "prompts: p.yaml, generation: {top_k: 9}"},
      {"sft+dp-sgd", "prompts: p.yaml"},
      {"pe", "embedder: e, prompts: p.yaml, label_columns: [s], label_values: [[a, b]]"},
      {"aug-pe", "embedder: e, prompts: p.yaml"},
      {"ctcl",
       "topic_model: t, generation: {subsets: [20, 10]}, label_columns: [s], "
       "label_values: [[a]]"},
      {"dp-sft", "storage: bfloat16, stage1: {lr: 0.5}, budget: split"},
      {"denoise", "svd: randomized, apply_to: [q_proj]"},
      {"dp-sgd", "grad_mode: ghost"},
      {"sgd", "sampling: poisson"},
      {"noop", "steps: 4"}};
  for (const std::string& name : method_names()) {
    INFO(name);
    const auto it = needed.find(name);
    REQUIRE(it != needed.end());  // a new method gets its line here
    auto read = [&](const YAML::Node& node) {
      auto keys = std::make_shared<KeyRegistry>();
      Fields f(node, "method", keys);
      std::unique_ptr<Method> m = make_method(name);
      m->configure(f);
      f.finish();
      keys->throw_if_unknown();  // every written key is one the list reads
      return YAML::Dump(m->options_yaml());
    };
    const std::string first = read(YAML::Load("{" + it->second + "}"));
    const std::string again = read(YAML::Load(first));
    CHECK(first == again);
    for (const auto& kv : YAML::Load("{" + it->second + "}")) {  // given values are kept
      if (!kv.second.IsScalar()) continue;
      CHECK(YAML::Dump(YAML::Load(first)[kv.first.as<std::string>()]) ==
            YAML::Dump(YAML::Load(YAML::Dump(kv.second))));
    }
  }
}

TEST_CASE("privacy.unit and its keys: user needs a user column, and only it takes one",
          "[config]") {
  Spec s = parse(
      "privacy: {unit: user, max_examples_per_user: 4}\n"
      "data: {train: {path: a.csv, user_column: who}}\n");
  CHECK(s.privacy.unit == privacy::PrivacyUnit::kUser);
  CHECK(s.privacy.max_examples_per_user == 4);
  CHECK(s.data.train.user_column == "who");
  const YAML::Node y = spec_to_yaml(s);
  CHECK(y["privacy"]["unit"].as<std::string>() == "user");
  CHECK(y["privacy"]["max_examples_per_user"].as<int>() == 4);
  CHECK(y["data"]["train"]["user_column"].as<std::string>() == "who");
  // The default writes none of them, so the config hashes of earlier specs stay.
  const YAML::Node plain = spec_to_yaml(parse("data: {train: {path: a.csv}}\n"));
  CHECK_FALSE(plain["privacy"]["unit"]);
  CHECK_FALSE(plain["privacy"]["max_examples_per_user"]);
  CHECK_FALSE(plain["data"]["train"]["user_column"]);
  CHECK(config_hash(parse("data: {train: {path: a.csv}}\n")) != config_hash(s));

  CHECK_THAT(
      config_error("privacy: {unit: person}\n"),
      Contains("privacy.unit: 'person' is not allowed; use one of: example, document, user"));
  CHECK_THAT(config_error("privacy: {unit: user}\ndata: {train: {path: a.csv}}\n"),
             Contains("privacy.unit: user needs data.train.user_column"));
  CHECK_THAT(config_error("privacy: {unit: user}\ndata: {train: {path: a.csv, user_column: w}, "
                          "train_extra: [{path: b.csv}]}\n"),
             Contains("needs data.train_extra[0].user_column"));
  CHECK_THAT(config_error("data: {train: {path: a.csv, user_column: who}}\n"),
             Contains("data.train.user_column names users, but privacy.unit is example"));
  CHECK_THAT(config_error("privacy: {max_examples_per_user: 3}\n"),
             Contains("belongs to privacy.unit: user"));
  CHECK_THAT(config_error("privacy: {unit: user, max_examples_per_user: 0}\n"
                          "data: {train: {path: a.csv, user_column: who}}\n"),
             Contains("privacy.max_examples_per_user: 0 is out of range"));
  CHECK_THAT(config_error("privacy: {unit: user}\ndata: {train: {path: a.csv, user_column: who}, "
                          "packing: true}\n"),
             Contains("with privacy.unit: user set data.packing: false"));
  CHECK_THAT(config_error("data: {eval: {path: a.csv, user_column: who}}\n"),
             Contains("unknown key `data.eval.user_column`"));
}

TEST_CASE("privacy.clipping_style and clip_groups: parsed, dumped when not flat, checked",
          "[config]") {
  Spec s = parse(
      "privacy: {clipping_style: groups, clip_groups: [{params: lora_A, share: 3}, "
      "{params: lora_B}]}\n");
  CHECK(s.privacy.clipping_style == privacy::ClippingStyle::kGroups);
  REQUIRE(s.privacy.clip_groups.size() == 2);
  CHECK(s.privacy.clip_groups[0].params == "lora_A");
  CHECK(s.privacy.clip_groups[0].share == 3.0);
  CHECK(s.privacy.clip_groups[1].share == 1.0);  // the default share
  const YAML::Node y = spec_to_yaml(s);
  CHECK(y["privacy"]["clipping_style"].as<std::string>() == "groups");
  CHECK(y["privacy"]["clip_groups"][1]["params"].as<std::string>() == "lora_B");
  CHECK(parse(YAML::Dump(y)).privacy.clip_groups[0].share == 3.0);  // round trip
  const YAML::Node plain = spec_to_yaml(parse("privacy: {clipping_style: flat}\n"));
  CHECK_FALSE(plain["privacy"]["clipping_style"]);  // flat: earlier config hashes stay
  CHECK_FALSE(plain["privacy"]["clip_groups"]);
  CHECK(parse("privacy: {clipping_style: per_layer}\n").privacy.clipping_style ==
        privacy::ClippingStyle::kPerLayer);
  CHECK_THAT(config_error("privacy: {clipping_style: groups}\n"),
             Contains("privacy.clip_groups is needed by privacy.clipping_style: groups"));
  CHECK_THAT(config_error("privacy: {clip_groups: [{params: a}]}\n"),
             Contains("belongs to privacy.clipping_style: groups"));
  CHECK_THAT(config_error("privacy: {clipping_style: groups, clip_groups: []}\n"),
             Contains("expected a non-empty list"));
  CHECK_THAT(config_error("privacy: {clipping_style: groups, clip_groups: [{params: a, share: "
                          "0}]}\n"),
             Contains("privacy.clip_groups[0].share"));
  CHECK_THAT(config_error("privacy: {clipping_style: groups, clip_groups: [{share: 1}]}\n"),
             Contains("clip_groups[0].params: give the part of the parameter names"));
  CHECK_THAT(config_error("privacy: {clipping_style: groups, clip_groups: [{params: a, sh: 1}]}\n"),
             Contains("unknown key `privacy.clip_groups[0].sh`"));
  CHECK_THAT(config_error("privacy: {clipping_style: layer}\n"),
             Contains("use one of: flat, per_layer, groups"));
}

TEST_CASE("privacy.adaptive_clip_*: the quantile turns it on, the others belong to it",
          "[config]") {
  Spec s = parse("privacy: {adaptive_clip_quantile: 0.7, adaptive_clip_count_std: 4}\n");
  CHECK(*s.privacy.adaptive_clip_quantile == 0.7);
  CHECK(s.privacy.adaptive_clip_lr == 0.2);
  const YAML::Node y = spec_to_yaml(s);
  CHECK(y["privacy"]["adaptive_clip_quantile"].as<double>() == 0.7);
  CHECK(y["privacy"]["adaptive_clip_count_std"].as<double>() == 4);
  CHECK(*parse(YAML::Dump(y)).privacy.adaptive_clip_count_std == 4);
  CHECK_FALSE(spec_to_yaml(parse("privacy: {clip_norm: 1}\n"))["privacy"]["adaptive_clip_lr"]);
  CHECK_THAT(config_error("privacy: {adaptive_clip_quantile: 1.5}\n"),
             Contains("privacy.adaptive_clip_quantile"));
  CHECK_THAT(config_error("privacy: {adaptive_clip_lr: 0.1}\n"),
             Contains("belong to adaptive clipping: set privacy.adaptive_clip_quantile"));
  CHECK_THAT(config_error("privacy: {adaptive_clip_quantile: 0.5, clipping_style: per_layer}\n"),
             Contains("adapts one threshold; clipping_style per_layer has several"));
  CHECK_THAT(config_error("privacy: {adaptive_clip_quantile: 0.5, adaptive_clip_count_std: 0}\n"),
             Contains("privacy.adaptive_clip_count_std"));
}
