#include "core/config/spec.hpp"

#include "core/config/privacy_options.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "core/config/fields.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft {

namespace {

void parse_dataset(Fields f, DatasetSpec& d, bool is_eval = false, bool named = false,
                   bool is_train = false) {
  f.get("path", d.path);
  f.get_choice("format", d.format,
               {"auto", "csv", "tsv", "jsonl", "text", "e2e", "dart", "dart-train", "dart-test"});
  f.get("text_column", d.text_column);
  f.get("prompt_column", d.prompt_column);
  f.get("prompt", d.prompt);
  if (!d.prompt.empty() && !d.prompt_column.empty())
    throw ConfigError(fmt::format("{}: give prompt_column or a fixed prompt, not both", f.path()));
  f.get("messages_column", d.messages_column);
  if (!d.messages_column.empty() && (!d.prompt.empty() || !d.prompt_column.empty()))
    throw ConfigError(fmt::format(
        "{}: messages_column makes each row a whole chat; leave prompt_column and prompt unset",
        f.path()));
  f.get("label_column", d.label_column);
  if (is_train) {
    f.get("user_column", d.user_column);
    f.get("name", d.name);  // the dataset's name in reports (default: the file's folder)
  }
  f.get("text_pair_column", d.text_pair_column);
  f.get("num_samples", d.num_samples, Range::at_least(0));
  if (f.get("rows", d.rows, Range::at_least(0)) && (d.rows.size() != 2 || d.rows[0] >= d.rows[1]))
    throw ConfigError(fmt::format(
        "{}.rows: give [begin, end] with begin < end (0-based data rows, end excluded), e.g. "
        "[0, 2000]",
        f.path()));
  if (f.get("hash_split", d.hash_split, Range::closed(0, 1)) &&
      (d.hash_split.size() != 2 || d.hash_split[0] >= d.hash_split[1]))
    throw ConfigError(fmt::format(
        "{}.hash_split: give [lo, hi] with 0 <= lo < hi <= 1 (the part of [0, 1) whose rows are "
        "kept), e.g. [0, 0.9] for a private part and [0.9, 1] for the public rest",
        f.path()));
  if (f.has("label_map")) {
    const YAML::Node m = f.raw("label_map");
    if (!m.IsMap() || m.size() == 0)
      throw ConfigError(fmt::format(
          "{}.label_map: give a map from the file's labels to the task's, e.g. {{negative: '0', "
          "positive: '1'}}",
          f.path()));
    for (const auto& kv : m) {
      if (!kv.second.IsScalar() || kv.second.Scalar().empty())
        throw ConfigError(fmt::format("{}.label_map.{}: give the task's label it stands for",
                                      f.path(), kv.first.as<std::string>()));
      d.label_map[kv.first.as<std::string>()] = kv.second.Scalar();
    }
  }
  if (is_eval) f.get("exclude_train", d.exclude_train);
  if (named) {
    f.get("name", d.name);
    if (d.name.empty())
      throw ConfigError(fmt::format("{}.name: every evaluation set needs a name", f.path()));
  }
  f.finish();
}

YAML::Node dataset_yaml(const DatasetSpec& d) {
  YAML::Node n;
  n["path"] = d.path;
  n["format"] = d.format;
  n["text_column"] = d.text_column;
  n["prompt_column"] = d.prompt_column;
  if (!d.messages_column.empty()) n["messages_column"] = d.messages_column;
  n["prompt"] = d.prompt;
  n["label_column"] = d.label_column;
  if (!d.text_pair_column.empty()) n["text_pair_column"] = d.text_pair_column;
  if (!d.user_column.empty()) n["user_column"] = d.user_column;
  n["num_samples"] = d.num_samples;
  if (!d.rows.empty()) n["rows"] = d.rows;
  if (!d.hash_split.empty()) n["hash_split"] = d.hash_split;
  for (const auto& [from, to] : d.label_map) n["label_map"][from] = to;
  if (d.exclude_train) n["exclude_train"] = true;
  if (!d.name.empty()) n["name"] = d.name;
  return n;
}

std::string join_path(const std::vector<std::string>& parts, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += (i ? "." : "") + parts[i];
  return out;
}

YAML::Node num(double v) {
  return YAML::Node(format_double(v));
}
YAML::Node opt(const std::optional<double>& v) {
  return v ? num(*v) : YAML::Node(YAML::NodeType::Null);
}

}  // namespace

namespace {

constexpr int kMaxSpecDepth = 32;  // a spec is 3-4 levels deep; method blocks add a few
// A spec holds hundreds of values. YAML aliases can make a 1 KB file stand for billions (each
// level of `b: &b [*a, *a, ...]` multiplies by the list's length): every walk of such a tree,
// this one first, would take hours, so the walk stops counting at this many.
constexpr int64_t kMaxSpecNodes = 100000;

std::string where(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.is_null() ? std::string() : fmt::format(" (line {})", m.line + 1);
}

// Keys are plain names, each at most once per mapping, and nesting is shallow: yaml-cpp accepts
// duplicate keys (the first wins on lookup, so `epsilon: 1` then `epsilon: 8` reads 1 while a
// reader of the file may see 8), complex keys and very deep nesting, none of which a spec needs.
void check_structure(const YAML::Node& n, const std::string& path, int depth, int64_t* nodes) {
  if (++*nodes > kMaxSpecNodes)
    throw ConfigError(
        fmt::format("{}: the spec expands to more than {} values{} (YAML aliases "
                    "repeating aliases?); a spec is a few hundred settings",
                    path.empty() ? "spec" : path, kMaxSpecNodes, where(n)));
  if (depth > kMaxSpecDepth)
    throw ConfigError(fmt::format("{}: nested more than {} levels deep{}; a spec is a few levels "
                                  "of mappings",
                                  path.empty() ? "spec" : path, kMaxSpecDepth, where(n)));
  if (n.IsMap()) {
    std::map<std::string, YAML::Node> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!it->first.IsScalar())
        throw ConfigError(fmt::format("{}: a key must be a plain name, not a list or mapping{}",
                                      path.empty() ? "spec" : path, where(it->first)));
      const std::string k = it->first.Scalar();
      const std::string kp = path.empty() ? k : path + "." + k;
      auto [prev, fresh] = seen.emplace(k, it->first);
      if (!fresh)
        throw ConfigError(fmt::format(
            "{}: the key appears twice{} and{}; keep one (YAML readers disagree on which wins)",
            kp, where(prev->second), where(it->first)));
      check_structure(it->second, kp, depth + 1, nodes);
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      check_structure(n[i], fmt::format("{}[{}]", path, i), depth + 1, nodes);
  }
}

}  // namespace

void check_spec_structure(const YAML::Node& root) {
  int64_t nodes = 0;
  check_structure(root, "", 0, &nodes);
}

YAML::Node load_spec_yaml(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    throw InputError(
        fmt::format("spec file '{}' not found (check the path; specs live in experiments/)", path));
  if (std::filesystem::is_directory(path, ec))
    throw InputError(fmt::format(
        "spec '{}' is a directory; give a spec file (YAML), or --resume DIR to continue a run",
        path));
  if (!std::filesystem::is_regular_file(path, ec))
    throw InputError(fmt::format("spec '{}' is not a regular file; give a spec file (YAML)", path));
  constexpr uintmax_t kMaxSpecBytes = 16u << 20;  // a spec is kilobytes; its data live elsewhere
  if (std::filesystem::file_size(path, ec) > kMaxSpecBytes)
    throw InputError(
        fmt::format("spec file '{}' is over 16 MiB; a spec holds settings, not data", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("spec file '{}' cannot be read (check its permissions)", path));
  std::ostringstream text;
  text << in.rdbuf();
  YAML::Node n;
  try {
    n = YAML::Load(text.str());
  } catch (const YAML::ParserException& e) {
    throw ConfigError(
        fmt::format("{}:{}:{}: invalid YAML: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  } catch (const YAML::Exception& e) {
    // yaml-cpp's recursion guard reports very deep nesting as a "bad file" error.
    throw ConfigError(fmt::format("{}: the YAML cannot be parsed (nested too deeply?): {}", path,
                                  e.what()));
  }
  if (n.IsNull())  // an empty file (or only comments) is a mistake, not "all defaults"
    throw ConfigError(fmt::format("{}: the spec is empty; write at least the method and the data "
                                  "(experiments/quickstart.yaml is a complete example)",
                                  path));
  if (!n.IsMap())
    throw ConfigError(fmt::format("{}: a spec is a mapping of keys (name:, model:, data:, ...), "
                                  "got {}",
                                  path, n.IsSequence() ? "a list" : "a single value"));
  try {
    check_spec_structure(n);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", path, e.what()));
  }
  return n;
}

void apply_override(YAML::Node& root, const std::string& assignment) {
  auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw ConfigError(fmt::format(
        "--set '{}': expected key.path=value, e.g. --set privacy.epsilon=2", assignment));
  std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  if (value.find_first_not_of(" \t") == std::string::npos)
    throw ConfigError(fmt::format(
        "--set '{}': empty value (an unset shell variable?); give a value, or `{}=null` to unset "
        "an optional key",
        assignment, key));
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  for (const auto& p : parts)
    if (p.empty())
      throw ConfigError(
          fmt::format("--set '{}': empty component in key path '{}'", assignment, key));
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("--set '{}': value is not valid YAML: {}", assignment, e.msg));
  }
  if (!root || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // Walk with explicit copies: yaml-cpp nodes are handles, so writes go to the tree.
  std::vector<YAML::Node> chain = {root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    YAML::Node next = cur[parts[i]];
    if (next && !next.IsNull() && !next.IsMap())
      throw ConfigError(fmt::format("--set '{}': '{}' is a value, not a block", assignment,
                                    join_path(parts, i + 1)));
    if (!next || next.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[parts[i]];
    }
    chain.push_back(next);
  }
  YAML::Node last = chain.back();
  last[parts.back()] = parsed;
}

namespace {

// privacy.clip_groups: a list of {params: NAME_PART, share: > 0}, given exactly when
// privacy.clipping_style is groups.
void parse_clip_groups(Fields& p, PrivacySpec& pr) {
  const YAML::Node list = p.raw("clip_groups");
  const bool given = list && !list.IsNull();
  const bool groups = pr.clipping_style == privacy::ClippingStyle::kGroups;
  DPFT_CHECK_AS(ConfigError, given == groups,
                "{}: privacy.clip_groups {} privacy.clipping_style: groups (this spec's style is "
                "{}); {}",
                p.key_path("clip_groups"), given ? "belongs to" : "is needed by",
                privacy::name_of(pr.clipping_style),
                given ? "set clipping_style: groups, or remove clip_groups"
                      : "give clip_groups: [{params: lora_A, share: 1}, {params: lora_B, share: "
                        "1}], or clipping_style: per_layer");
  if (!given) return;
  DPFT_CHECK_AS(ConfigError, list.IsSequence() && list.size() > 0,
                "{}: expected a non-empty list of {{params: NAME_PART, share: NUMBER}}",
                p.key_path("clip_groups"));
  for (size_t i = 0; i < list.size(); ++i) {
    Fields g(list[i], fmt::format("{}[{}]", p.key_path("clip_groups"), i), p.registry());
    ClipGroupSpec c;
    g.get("params", c.params);
    g.get("share", c.share, Range::open(0, std::numeric_limits<double>::infinity()));
    g.finish();
    DPFT_CHECK_AS(ConfigError, !c.params.empty(),
                  "{}[{}].params: give the part of the parameter names this group holds, e.g. "
                  "lora_A",
                  p.key_path("clip_groups"), i);
    pr.clip_groups.push_back(c);
  }
}

// privacy.adaptive_clip_*: the quantile turns adaptive clipping on; the rate and the count's
// noise belong to it; flat clipping only.
void parse_adaptive_clip(Fields& p, PrivacySpec& pr) {
  p.get("adaptive_clip_quantile", pr.adaptive_clip_quantile, Range::open(0, 1));
  const bool lr = p.get("adaptive_clip_lr", pr.adaptive_clip_lr,
                        Range::open(0, std::numeric_limits<double>::infinity()));
  p.get("adaptive_clip_count_std", pr.adaptive_clip_count_std,
        Range::open(0, std::numeric_limits<double>::infinity()));
  if (pr.adaptive_clip_quantile) {
    DPFT_CHECK_AS(ConfigError, pr.clipping_style == privacy::ClippingStyle::kFlat,
                  "privacy.adaptive_clip_quantile adapts one threshold; clipping_style {} has "
                  "several: use clipping_style: flat, or remove adaptive_clip_quantile",
                  privacy::name_of(pr.clipping_style));
    return;
  }
  DPFT_CHECK_AS(ConfigError, !lr && !pr.adaptive_clip_count_std,
                "privacy.adaptive_clip_lr and adaptive_clip_count_std belong to adaptive clipping: "
                "set privacy.adaptive_clip_quantile (e.g. 0.5), or remove them");
}

// privacy.unit user needs every private training file to name its users, and a user column
// means unit user.
void check_user_columns(const DataSpec& da, privacy::PrivacyUnit unit) {
  std::vector<std::pair<std::string, const DatasetSpec*>> files = {{"data.train", &da.train}};
  for (size_t i = 0; i < da.train_extra.size(); ++i)
    files.push_back({fmt::format("data.train_extra[{}]", i), &da.train_extra[i]});
  for (const auto& [key, d] : files) {
    DPFT_CHECK_AS(ConfigError, unit != privacy::PrivacyUnit::kUser || !d->user_column.empty(),
                  "privacy.unit: user needs {}.user_column, the column naming each row's user",
                  key);
    DPFT_CHECK_AS(ConfigError, unit == privacy::PrivacyUnit::kUser || d->user_column.empty(),
                  "{}.user_column names users, but privacy.unit is {}: set privacy.unit: user "
                  "(or drop the column)",
                  key, privacy::name_of(unit));
  }
}

// data.task seq2seq: each example's source (the encoder's input) comes from data.denoising (its
// own target, infilled), from the method (`method` makes them: MethodBlock::makes_sources), or
// from the data (prompt_column or prompt), exactly one of them.
void check_seq2seq_sources(const DataSpec& da, const std::string& method, bool makes_sources) {
  auto need = [&](bool ok, const std::string& what) {
    if (!ok) throw ConfigError(fmt::format("data.task: seq2seq {}", what));
  };
  if (da.denoising.enabled) {
    need(!makes_sources, fmt::format("with data.denoising is BART's denoising pretraining; method "
                                     "{} makes its own sources: drop data.denoising",
                                     method));
    for (const DatasetSpec* ds : {&da.train, &da.eval})
      need(ds->prompt_column.empty() && ds->prompt.empty(),
           "with data.denoising makes each source from its own target (text infilling); "
           "leave data.train / data.eval prompt_column and prompt unset");
  } else if (makes_sources) {
    need(da.train.prompt_column.empty() && da.train.prompt.empty(),
         fmt::format("with method {} takes the documents alone (text_column): the method makes "
                     "each source; leave data.train.prompt_column and prompt unset",
                     method));
    need(da.eval.prompt_column.empty() && da.eval.prompt.empty(),
         fmt::format("with method {} takes the eval documents alone (text_column): the method "
                     "gives each its source; leave data.eval.prompt_column and prompt unset",
                     method));
  } else {
    need(!da.train.prompt_column.empty() || !da.train.prompt.empty(),
         "needs sources: data.train.prompt_column (or prompt) names the encoder's input, "
         "text_column the target");
  }
}

}  // namespace

Spec parse_spec(const YAML::Node& root, const MethodParser& parse_method) {
  DPFT_CHECK(static_cast<bool>(parse_method), "parse_spec: no method parser given");
  bool makes_sources = false;  // the method block's: it makes seq2seq sources itself
  check_spec_structure(root);
  auto keys = std::make_shared<KeyRegistry>();
  Fields top(root, "", keys);
  Spec s;

  top.get("name", s.name);
  static const std::regex name_re("[A-Za-z0-9_.-]+");
  if (!std::regex_match(s.name, name_re) || s.name == "." || s.name == "..")
    throw ConfigError(
        fmt::format("name: '{}' must be non-empty and use only letters, digits, '-', '_', '.' "
                    "(it becomes a directory name)",
                    s.name));
  top.get("label", s.label);
  top.get("seed", s.seed, Range::at_least(0));
  top.get("device", s.device);
  static const std::regex dev_re("cpu|cuda(:[0-9]+)?");
  if (!std::regex_match(s.device, dev_re))
    throw ConfigError(
        fmt::format("device: '{}' is not a device; use cpu, cuda or cuda:N", s.device));

  {
    Fields m = top.child("model");
    m.get("path", s.model.path);
    m.get("tokenizer", s.model.tokenizer);
    m.get_enum("dtype", s.model.dtype, kFloatTypeNames);
    Fields p = m.child("peft");
    p.get_enum("kind", s.model.peft.kind, model::kPeftKindNames);
    p.get("reduction_factor", s.model.peft.reduction_factor, Range::at_least(1));
    if (s.model.peft.kind != model::PeftKind::kAdapter && p.has("reduction_factor"))
      throw ConfigError(
          fmt::format("model.peft.reduction_factor belongs to kind adapter; this spec's kind is {}",
                      model::name_of(s.model.peft.kind)));
    p.get("r", s.model.peft.r, Range::at_least(1));
    p.get("alpha", s.model.peft.alpha, Range::above(0));
    p.get("dropout", s.model.peft.dropout, Range{0, 1, false, true});
    p.get("targets", s.model.peft.targets);
    if (std::vector<std::string> mts; p.get("modules_to_save", mts))
      s.model.peft.modules_to_save = mts;
    if (s.model.peft.kind == model::PeftKind::kLora && s.model.peft.targets.empty())
      throw ConfigError(
          "model.peft.targets: empty: LoRA needs the names of the modules it wraps, e.g. "
          "[c_attn, c_fc] (GPT-2) or [q_proj, v_proj] (Llama, Qwen2)");
    p.finish();
    m.finish();
  }
  {
    Fields d = top.child("data");
    DataSpec& da = s.data;
    d.get_enum("task", da.task, kTaskNames);
    d.get("mlm_probability", da.mlm_probability, Range{0, 1, true, false});
    if (d.has("denoising")) {
      Fields dn = d.child("denoising");
      da.denoising.enabled = true;
      dn.get("mask_ratio", da.denoising.mask_ratio, Range{0, 1, true, true});
      dn.get("poisson_lambda", da.denoising.poisson_lambda, Range{0, 50, true, false});
      dn.finish();
    }
    d.get("labels", da.labels);
    parse_dataset(d.child("train"), da.train, false, false, true);
    YAML::Node extra = d.raw("train_extra");
    if (extra && !extra.IsNull()) {
      if (!extra.IsSequence())
        throw ConfigError(
            fmt::format("{}: expected a list of dataset blocks (each with path, format, "
                        "text_column, ...), got a {}",
                        d.key_path("train_extra"), extra.IsMap() ? "mapping" : "value"));
      for (size_t i = 0; i < extra.size(); ++i) {
        da.train_extra.emplace_back();
        parse_dataset(
            Fields(extra[i], fmt::format("{}[{}]", d.key_path("train_extra"), i), d.registry()),
            da.train_extra.back(), false, false, true);
      }
    }
    parse_dataset(d.child("eval"), da.eval, true);
    parse_dataset(d.child("public"), da.public_data);
    YAML::Node sets = d.raw("eval_sets");
    if (sets && !sets.IsNull()) {
      if (!sets.IsSequence())
        throw ConfigError(fmt::format(
            "{}: expected a list of named dataset blocks (name, path, text_column, ...)",
            d.key_path("eval_sets")));
      std::set<std::string> names;
      for (size_t i = 0; i < sets.size(); ++i) {
        da.eval_sets.emplace_back();
        DatasetSpec& e = da.eval_sets.back();
        parse_dataset(
            Fields(sets[i], fmt::format("{}[{}]", d.key_path("eval_sets"), i), d.registry()), e,
            true, true);
        if (e.path.empty())
          throw ConfigError(fmt::format("{}[{}].path: no file given", d.key_path("eval_sets"), i));
        if (!names.insert(e.name).second)
          throw ConfigError(fmt::format("{}[{}].name: '{}' names two evaluation sets",
                                        d.key_path("eval_sets"), i, e.name));
      }
      if (da.eval.path.empty())
        throw ConfigError(
            "data.eval_sets: give data.eval first (the main evaluation set that eval.every, "
            "lr selection and the summary use); eval_sets adds more");
    }
    d.get("max_length", da.max_length, Range::at_least(2));
    d.get("packing", da.packing);
    d.get("add_eos", da.add_eos);
    d.get_enum("loss_on", da.loss_on, kLossOnNames);
    d.get_enum("chat_format", da.chat_format, kChatFormatChoiceNames);
    if (da.loss_on != LossOn::kAll) {
      std::vector<std::string> missing;
      const bool chats = da.loss_on == LossOn::kAssistant;
      auto unpaired = [&](const DatasetSpec& x) {
        return x.prompt_column.empty() && x.prompt.empty() && (!chats || x.messages_column.empty());
      };
      if (unpaired(da.train)) missing.push_back("data.train");
      for (size_t i = 0; i < da.train_extra.size(); ++i)
        if (unpaired(da.train_extra[i])) missing.push_back(fmt::format("data.train_extra[{}]", i));
      if (!da.eval.path.empty() && unpaired(da.eval)) missing.push_back("data.eval");
      for (size_t i = 0; i < da.eval_sets.size(); ++i)
        if (unpaired(da.eval_sets[i])) missing.push_back(fmt::format("data.eval_sets[{}]", i));
      if (!missing.empty())
        throw ConfigError(fmt::format(
            "data.loss_on: '{}' scores only the {} of {}, but {} has no {}; set {}.{} or use "
            "loss_on: all",
            name_of(da.loss_on), chats ? "assistant turns" : "response",
            chats ? "chats (or prompt/response pairs)" : "prompt/response pairs",
            join(missing, ", "), chats ? "messages_column or prompt_column" : "prompt_column",
            missing[0], chats ? "messages_column" : "prompt_column"));
    }
    {
      std::vector<const DatasetSpec*> all = {&da.train, &da.eval};
      for (const DatasetSpec& x : da.train_extra) all.push_back(&x);
      for (const DatasetSpec& x : da.eval_sets) all.push_back(&x);
      for (const DatasetSpec* x : all)
        if (!x->messages_column.empty() && da.chat_format == ChatFormatChoice::kNone)
          throw ConfigError(fmt::format(
              "data.chat_format: none, but {} reads chats from its messages_column; set "
              "data.chat_format to auto (the tokenizer's) or a format name",
              x->path.empty() ? "a data set" : x->path));
    }
    if (da.task == Task::kClassification) {
      auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw ConfigError(fmt::format("data.task: classification {}", what));
      };
      need(!da.train.label_column.empty(), "needs data.train.label_column (the class of each row)");
      need(da.eval.path.empty() || !da.eval.label_column.empty(),
           "needs data.eval.label_column when data.eval is given");
      for (const DatasetSpec& e : da.eval_sets)
        need(!e.label_column.empty(),
             fmt::format("needs label_column on every data.eval_sets entry ('{}' has none)",
                         e.name));
      need(da.train_extra.empty(), "takes no data.train_extra (one labelled training file)");
      need(da.public_data.path.empty() || !da.public_data.label_column.empty(),
           "needs data.public.label_column when data.public is given");
      need(!da.packing, "does not pack examples; set data.packing: false");
      need(da.loss_on == LossOn::kAll && da.chat_format == ChatFormatChoice::kNone,
           "has no prompt/response turns; leave data.loss_on and data.chat_format unset");
      need(da.train.prompt_column.empty() && da.train.prompt.empty(),
           "takes text (and text_pair_column), not prompts");
    } else {
      if (!da.labels.empty() || !da.train.text_pair_column.empty() ||
          !da.eval.text_pair_column.empty() ||
          std::any_of(da.eval_sets.begin(), da.eval_sets.end(),
                      [](const DatasetSpec& e) { return !e.text_pair_column.empty(); }))
        throw ConfigError(
            fmt::format("data.labels and text_pair_column belong to data.task: classification "
                        "(an encoder checkpoint); this spec's task is {}",
                        name_of(da.task)));
    }
    if (da.task == Task::kMlm) {
      auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw ConfigError(fmt::format("data.task: mlm {}", what));
      };
      need(da.loss_on == LossOn::kAll && da.chat_format == ChatFormatChoice::kNone,
           "masks plain text; leave data.loss_on and data.chat_format unset");
      need(da.train.prompt_column.empty() && da.train.prompt.empty(),
           "takes plain text, not prompts");
    }
    if (da.task == Task::kSeq2seq) {
      auto need = [&](bool ok, const std::string& what) {
        if (!ok) throw ConfigError(fmt::format("data.task: seq2seq {}", what));
      };
      // Where the sources come from is checked with the method block (check_seq2seq_sources).
      need(!da.packing && da.chat_format == ChatFormatChoice::kNone && da.loss_on == LossOn::kAll,
           "scores every target token of each (source, target) pair; leave data.packing, "
           "data.chat_format and data.loss_on unset");
    }
    if (da.task != Task::kSeq2seq && da.denoising.enabled)
      throw ConfigError(
          fmt::format("data.denoising belongs to data.task: seq2seq (BART); this spec's task is {}",
                      name_of(da.task)));
    if (da.task != Task::kMlm && d.has("mlm_probability"))
      throw ConfigError(
          fmt::format("data.mlm_probability belongs to data.task: mlm; this spec's task is {}",
                      name_of(da.task)));
    d.finish();
  }
  {
    Fields p = top.child("privacy");
    PrivacySpec& pr = s.privacy;
    bool eps_given = p.has("epsilon");
    p.get("epsilon", pr.epsilon, Range{0, std::numeric_limits<double>::infinity(), true, false});
    pr.delta_set = p.has("delta");
    if (p.has("delta") && p.raw("delta").IsScalar() && p.raw("delta").Scalar() == "auto")
      pr.delta_auto = true;
    else
      try {
        p.get("delta", pr.delta, Range::open(0, 1));
      } catch (const ConfigError& e) {
        throw ConfigError(std::string(e.what()) + " (or auto: 1 / (N ln N) for N examples)");
      }
    // (epsilon, delta)-DP with a large delta permits publishing some examples in the clear
    // (with probability delta each); the guarantee is meaningful only for delta well below 1/N.
    if (pr.delta > 0.01)
      throw ConfigError(fmt::format(
          "privacy.delta: {} is too large for a privacy guarantee (a mechanism may then release "
          "examples in the clear with that probability); use delta well below 1/N, e.g. 1e-5 or "
          "1/(N ln N)",
          pr.delta));
    p.get_enum("accountant", pr.accountant, privacy::kAccountantNames);
    p.get("eps_error", pr.eps_error, Range::open(0, 1));
    p.get("noise_multiplier", pr.noise_multiplier, Range::at_least(0));
    p.get("sampling_rate", pr.sampling_rate, Range{0, 1, true, false});
    p.get("clip_norm", pr.clip_norm,
          Range{0, std::numeric_limits<double>::infinity(), true, false});  // inf: no clipping
    p.get_enum("clipping", pr.clipping, privacy::kClippingNames);
    p.get_enum("clipping_style", pr.clipping_style, privacy::kClippingStyleNames);
    parse_clip_groups(p, pr);
    parse_adaptive_clip(p, pr);
    p.get_enum("noise_divisor", pr.noise_divisor, privacy::kNoiseDivisorNames);
    p.get("secure_noise", pr.secure_noise);
    p.get("noise_seed", pr.noise_seed, Range::at_least(0));
    p.get_enum("noise_draw", pr.noise_draw, privacy::kNoiseDrawNames);
    p.get_enum("unit", pr.unit, privacy::kPrivacyUnitNames);
    if (p.get("max_examples_per_user", pr.max_examples_per_user, Range::at_least(1)) &&
        pr.unit != privacy::PrivacyUnit::kUser)
      throw ConfigError(fmt::format(
          "privacy.max_examples_per_user belongs to privacy.unit: user; this spec's unit is {}",
          privacy::name_of(pr.unit)));
    check_user_columns(s.data, pr.unit);
    if (pr.unit == privacy::PrivacyUnit::kUser && s.data.packing)
      throw ConfigError(
          "data.packing: a packed block can hold rows of several users, so it cannot be kept "
          "within one user; with privacy.unit: user set data.packing: false");
    if (pr.secure_noise && pr.noise_seed)
      throw ConfigError(
          "privacy: noise_seed makes the noise reproducible (and replayable by anyone who knows "
          "it), secure_noise draws every bit from the OS CSPRNG: set one of them, not both");
    if (pr.secure_noise && pr.noise_draw == privacy::NoiseDraw::kDevice)
      throw ConfigError(
          "privacy.noise_draw: device draws seeded noise with the GPU's generator, but "
          "privacy.secure_noise: true draws it from the host's CSPRNG; use noise_draw: auto "
          "(the host, for secure noise) or host");
    if (!pr.secure_noise && !pr.noise_seed && pr.noise_draw == privacy::NoiseDraw::kDevice)
      throw ConfigError(
          "privacy.noise_draw: device draws noise with the GPU's generator, which is no "
          "CSPRNG, but this run's noise is keyed by its secret key (the default) and drawn on "
          "the host; use noise_draw: auto or host, or set privacy.noise_seed for reproducible "
          "(not shareable) device draws");
    if (pr.noise_multiplier) {
      if (eps_given)
        throw ConfigError(
            "privacy: set either epsilon (sigma is calibrated to it) or noise_multiplier "
            "(epsilon is computed from it), not both");
      pr.epsilon.reset();
    }
    p.finish();
  }
  {
    Fields t = top.child("train");
    TrainSpec& tr = s.train;
    const bool steps_given = t.get("steps", tr.steps, Range::closed(1, 1e8));  // kMaxSteps
    t.get("epochs", tr.epochs, Range::above(0));
    DPFT_CHECK_AS(ConfigError, !(steps_given && tr.epochs),
                  "train.steps and train.epochs are both given; give one (epochs are converted "
                  "to steps = ceil(epochs / q) once the private set is counted)");
    t.get("batch_size", tr.batch_size, Range::at_least(1));
    t.get("micro_batch_size", tr.micro_batch_size, Range::at_least(1));
    t.get_enum("optimizer", tr.optimizer, kOptimizerNames);
    t.get("lr", tr.lr, Range::at_least(0));
    t.get("weight_decay", tr.weight_decay, Range::at_least(0));
    t.get("momentum", tr.momentum, Range{0, 1, false, true});
    t.get("warmup_ratio", tr.warmup_ratio, Range::closed(0, 1));
    t.get_enum("schedule", tr.schedule, kScheduleNames);
    t.finish();
  }
  {
    Fields e = top.child("eval");
    e.get("every", s.eval.every, Range::at_least(0));
    e.get("max_samples", s.eval.max_samples, Range::at_least(0));
    e.get("per_sample", s.eval.per_sample);
    e.get("reference_accuracy", s.eval.reference_accuracy, Range::closed(0, 1));
    {
      Fields g = e.child("nlg");
      NlgEvalSpec& n = s.eval.nlg;
      g.get("at_steps", n.at_steps, Range::at_least(1));
      g.get("num_beams", n.num_beams, Range::at_least(1));
      g.get("length_penalty", n.length_penalty, Range::closed(-10, 10));
      g.get("no_repeat_ngram_size", n.no_repeat_ngram_size, Range::at_least(0));
      g.get("max_new_tokens", n.max_new_tokens, Range::at_least(1));
      g.get("max_sources", n.max_sources, Range::at_least(0));
      g.get("batch", n.batch, Range::at_least(1));
      g.finish();
      std::sort(n.at_steps.begin(), n.at_steps.end());
      n.at_steps.erase(std::unique(n.at_steps.begin(), n.at_steps.end()), n.at_steps.end());
      if (!n.at_steps.empty() && n.at_steps.back() > s.train.steps)
        throw ConfigError(
            fmt::format("eval.nlg.at_steps: step {} is after the last step "
                        "(train.steps {})",
                        n.at_steps.back(), s.train.steps));
      if (!n.at_steps.empty() && s.data.eval.path.empty())
        throw ConfigError("eval.nlg needs data.eval: the sources to decode and their references");
      if (!n.at_steps.empty() && s.data.eval.prompt_column.empty())
        throw ConfigError(
            "eval.nlg needs data.eval.prompt_column: the column of sources "
            "(format e2e / dart: prompt)");
      if (!n.at_steps.empty() &&
          (s.data.task != Task::kLm || s.data.chat_format != ChatFormatChoice::kNone))
        throw ConfigError(
            "eval.nlg decodes a language model's prompt + response pairs: it needs "
            "data.task lm and data.chat_format none");
    }
    e.finish();
  }
  {
    Fields o = top.child("output");
    o.get("dir", s.output.dir);
    if (s.output.dir.empty()) throw ConfigError("output.dir: must not be empty (default: runs)");
    o.get("checkpoint_every", s.output.checkpoint_every, Range::at_least(0));
    o.get("save_model", s.output.save_model);
    o.get_enum("save_dtype", s.output.save_dtype, kFloatTypeNames);
    o.get("non_private_stats", s.output.non_private_stats);
    o.finish();
  }
  {
    Fields m = top.child("method");
    m.get("name", s.method.name);
    MethodBlock b = parse_method(s.method.name, m);  // the method reads its keys from the block
    m.finish();
    s.method.options = b.options;
    s.method.label = b.label;
    s.method.configured = b.configured;
    makes_sources = b.makes_sources;
  }
  if (s.data.task == Task::kSeq2seq) check_seq2seq_sources(s.data, s.method.name, makes_sources);
  if (!s.output.non_private_stats && s.method.options.IsMap() &&
      s.method.options["diagnostics"] && s.method.options["diagnostics"].as<std::string>() == "true")
    throw ConfigError(
        "method.diagnostics: true measures the true private gradients (non-private statistics), "
        "but output.non_private_stats is false; drop one of them");
  top.finish();
  keys->throw_if_unknown();
  check_privacy_options(s);  // core/config/privacy_options.hpp
  return s;
}

Spec load_spec(const std::string& path, const std::vector<std::string>& overrides,
               const MethodParser& parse_method) {
  YAML::Node root = path.empty() ? YAML::Node(YAML::NodeType::Map) : load_spec_yaml(path);
  for (const auto& o : overrides) apply_override(root, o);
  return parse_spec(root, parse_method);
}

YAML::Node spec_to_yaml(const Spec& s) {
  YAML::Node n;
  n["name"] = s.name;
  n["label"] = s.label;
  n["seed"] = s.seed;
  n["device"] = s.device;
  YAML::Node m;
  m["path"] = s.model.path;
  if (!s.model.tokenizer.empty()) m["tokenizer"] = s.model.tokenizer;  // absent: hashes keep
  m["dtype"] = name_of(s.model.dtype);
  m["peft"]["kind"] = model::name_of(s.model.peft.kind);
  m["peft"]["r"] = s.model.peft.r;
  m["peft"]["alpha"] = num(s.model.peft.alpha);
  m["peft"]["dropout"] = num(s.model.peft.dropout);
  if (s.model.peft.targets == std::vector<std::string>{model::kAutoTargets})
    m["peft"]["targets"] = model::kAutoTargets;  // not yet resolved (the model unread)
  else
    m["peft"]["targets"] = s.model.peft.targets;
  if (s.model.peft.modules_to_save) m["peft"]["modules_to_save"] = *s.model.peft.modules_to_save;
  if (s.model.peft.kind == model::PeftKind::kAdapter)
    m["peft"]["reduction_factor"] = s.model.peft.reduction_factor;
  n["model"] = m;
  if (s.data.task != Task::kLm)
    n["data"]["task"] = name_of(s.data.task);  // lm specs keep their hash
  if (s.data.task == Task::kMlm) n["data"]["mlm_probability"] = num(s.data.mlm_probability);
  if (s.data.denoising.enabled) {  // absent otherwise: earlier specs keep their hash
    n["data"]["denoising"]["mask_ratio"] = num(s.data.denoising.mask_ratio);
    n["data"]["denoising"]["poisson_lambda"] = num(s.data.denoising.poisson_lambda);
  }
  if (!s.data.labels.empty()) n["data"]["labels"] = s.data.labels;
  n["data"]["train"] = dataset_yaml(s.data.train);
  YAML::Node extra(YAML::NodeType::Sequence);
  for (const DatasetSpec& e : s.data.train_extra) extra.push_back(dataset_yaml(e));
  n["data"]["train_extra"] = extra;
  n["data"]["eval"] = dataset_yaml(s.data.eval);
  if (!s.data.eval_sets.empty()) {  // absent otherwise: earlier specs keep their hash
    YAML::Node sets(YAML::NodeType::Sequence);
    for (const DatasetSpec& e : s.data.eval_sets) sets.push_back(dataset_yaml(e));
    n["data"]["eval_sets"] = sets;
  }
  if (!s.data.public_data.path.empty())  // absent otherwise: earlier specs keep their hash
    n["data"]["public"] = dataset_yaml(s.data.public_data);
  n["data"]["max_length"] = s.data.max_length;
  n["data"]["packing"] = s.data.packing;
  n["data"]["add_eos"] = s.data.add_eos;
  n["data"]["loss_on"] = name_of(s.data.loss_on);
  n["data"]["chat_format"] = name_of(s.data.chat_format);
  YAML::Node p;
  p["epsilon"] = opt(s.privacy.epsilon);
  p["delta"] = s.privacy.delta_auto ? YAML::Node("auto") : num(s.privacy.delta);
  p["accountant"] = privacy::name_of(s.privacy.accountant);
  p["eps_error"] = num(s.privacy.eps_error);
  p["noise_multiplier"] = opt(s.privacy.noise_multiplier);
  p["sampling_rate"] = opt(s.privacy.sampling_rate);
  p["clip_norm"] = num(s.privacy.clip_norm);
  p["clipping"] = privacy::name_of(s.privacy.clipping);
  p["noise_divisor"] = privacy::name_of(s.privacy.noise_divisor);
  // Written only when not the default, so that the configs (and config hashes) of the runs
  // from before the key existed stay what they were.
  if (s.privacy.noise_draw != privacy::NoiseDraw::kAuto)
    p["noise_draw"] = privacy::name_of(s.privacy.noise_draw);
  p["secure_noise"] = s.privacy.secure_noise;
  if (s.privacy.noise_seed) p["noise_seed"] = *s.privacy.noise_seed;  // absent: keyed noise
  if (s.privacy.unit != privacy::PrivacyUnit::kExample)  // absent: earlier specs keep their hash
    p["unit"] = privacy::name_of(s.privacy.unit);
  if (s.privacy.unit == privacy::PrivacyUnit::kUser)
    p["max_examples_per_user"] = s.privacy.max_examples_per_user;
  if (s.privacy.clipping_style != privacy::ClippingStyle::kFlat)  // absent: flat, earlier hashes
    p["clipping_style"] = privacy::name_of(s.privacy.clipping_style);
  if (s.privacy.adaptive_clip_quantile) {  // absent: fixed C, earlier hashes
    p["adaptive_clip_quantile"] = num(*s.privacy.adaptive_clip_quantile);
    p["adaptive_clip_lr"] = num(s.privacy.adaptive_clip_lr);
    if (s.privacy.adaptive_clip_count_std)
      p["adaptive_clip_count_std"] = num(*s.privacy.adaptive_clip_count_std);
  }
  for (const ClipGroupSpec& g : s.privacy.clip_groups) {
    YAML::Node e;
    e["params"] = g.params;
    e["share"] = num(g.share);
    p["clip_groups"].push_back(e);
  }
  n["privacy"] = p;
  YAML::Node t;
  if (s.train.epochs)  // not yet converted (a spec checked without its data)
    t["epochs"] = num(*s.train.epochs);
  else
    t["steps"] = s.train.steps;
  t["batch_size"] = s.train.batch_size;
  t["micro_batch_size"] = s.train.micro_batch_size;
  t["optimizer"] = name_of(s.train.optimizer);
  t["lr"] = num(s.train.lr);
  t["weight_decay"] = num(s.train.weight_decay);
  t["momentum"] = num(s.train.momentum);
  t["warmup_ratio"] = num(s.train.warmup_ratio);
  t["schedule"] = name_of(s.train.schedule);
  n["train"] = t;
  YAML::Node me;
  me["name"] = s.method.name;
  {
    YAML::Node opts = YAML::Clone(s.method.options);
    if (opts.IsMap())
      for (auto it = opts.begin(); it != opts.end(); ++it)
        me[it->first.as<std::string>()] = it->second;
  }
  n["method"] = me;
  n["eval"]["every"] = s.eval.every;
  n["eval"]["max_samples"] = s.eval.max_samples;
  n["eval"]["per_sample"] = s.eval.per_sample;
  if (s.eval.reference_accuracy > 0)  // absent otherwise: earlier specs keep their hash
    n["eval"]["reference_accuracy"] = num(s.eval.reference_accuracy);
  if (!s.eval.nlg.at_steps.empty()) {  // likewise
    const NlgEvalSpec& g = s.eval.nlg;
    YAML::Node y;
    for (int64_t at : g.at_steps) y["at_steps"].push_back(at);
    y["num_beams"] = g.num_beams;
    y["length_penalty"] = num(g.length_penalty);
    y["no_repeat_ngram_size"] = g.no_repeat_ngram_size;
    y["max_new_tokens"] = g.max_new_tokens;
    y["max_sources"] = g.max_sources;
    y["batch"] = g.batch;
    n["eval"]["nlg"] = y;
  }
  n["output"]["dir"] = s.output.dir;
  n["output"]["checkpoint_every"] = s.output.checkpoint_every;
  n["output"]["save_model"] = s.output.save_model;
  n["output"]["save_dtype"] = name_of(s.output.save_dtype);
  n["output"]["non_private_stats"] = s.output.non_private_stats;
  return n;
}

std::string spec_to_yaml_string(const Spec& s) {
  YAML::Emitter e;
  e << spec_to_yaml(s);
  return std::string(e.c_str()) + "\n";
}

std::string config_hash(const Spec& s) {
  YAML::Node n = spec_to_yaml(s);
  n.remove("name");
  n.remove("label");
  n.remove("seed");
  n.remove("output");
  if (n["privacy"]) n["privacy"].remove("noise_seed");  // a seed, like `seed`
  YAML::Emitter e;
  e << n;
  uint64_t h = 1469598103934665603ull;
  for (const char* c = e.c_str(); *c; ++c) {
    h ^= static_cast<unsigned char>(*c);
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

void resolve_auto_delta(Spec& spec, int64_t n) {
  if (!spec.privacy.delta_auto) return;
  DPFT_CHECK_AS(ConfigError, n >= 2,
                "privacy.delta: auto is 1 / (N ln N) for the N private training examples; this "
                "run has {}: set privacy.delta to a number",
                n);
  const double nd = static_cast<double>(n), delta = 1.0 / (nd * std::log(nd));
  DPFT_CHECK_AS(ConfigError, delta <= 0.01,
                "privacy.delta: auto gives 1 / (N ln N) = {:.4g} for N = {}, too large for a "
                "privacy guarantee; set privacy.delta (e.g. 1e-5)",
                delta, n);
  spec.privacy.delta = delta;
  spec.privacy.delta_auto = false;
}

}  // namespace dpft
