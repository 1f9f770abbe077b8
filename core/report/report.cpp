// `dpft report`: loading, grouping, aggregation and rendering (core/report/report.hpp).
#include "core/report/report.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/run/run_dir.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::report {

using json = nlohmann::json;

namespace {

constexpr const char* kBaseLabel = "Base Model";

// Index in `order` (case-insensitive), or order.size() for another label.
size_t label_rank(const std::string& label, const std::vector<std::string>& order) {
  for (size_t i = 0; i < order.size(); ++i)
    if (to_lower(order[i]) == to_lower(label)) return i;
  return order.size();
}

}  // namespace

// j[k0][k1]..., or nullptr where a key is missing or a level is not an object.
const json* find(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (const char* k : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(k);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::optional<std::string> string_at(const json& j, std::initializer_list<const char*> path) {
  const json* v = find(j, path);
  if (v && v->is_string()) return v->get<std::string>();
  return std::nullopt;
}

std::optional<double> number_at(const json& j, std::initializer_list<const char*> path) {
  const json* v = find(j, path);
  if (v && v->is_number()) return v->get<double>();
  return std::nullopt;
}

namespace {

bool is_inf_string(const json* v) {
  return v && v->is_string() && v->get<std::string>() == "inf";
}

// The epsilon column of a run (see RunRecord::eps).
double run_eps(const json& m) {
  const json* spent = find(m, {"privacy", "epsilon"});
  if (is_inf_string(spent)) return kInf;  // released without noise (sgd, eps inf)
  const json* target = find(m, {"privacy", "target_epsilon"});
  if (target && target->is_number()) return target->get<double>();
  if (is_inf_string(target)) return kInf;
  // No target (sigma given instead): the epsilon it spent, if any.
  if (spent && spent->is_number()) return spent->get<double>();
  return kInf;
}

std::string dataset_name(const json& m) {
  if (auto n = string_at(m, {"run", "dataset_name"}); n && !n->empty()) return *n;
  fs::path p = string_at(m, {"run", "dataset"}).value_or("");
  if (p.empty()) return "-";
  std::string dir = p.parent_path().filename().string();
  return dir.empty() ? p.stem().string() : dir;
}

bool has_suffix(const fs::path& p, const std::string& suffix) {
  const std::string name = p.filename().string();
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_run_file(const fs::path& p) {
  return has_suffix(p, kRunFileSuffix);
}

// A run as found: a run directory, a run file, or a run file's object read from a pack
// (`where` then names it as PACK/PATH).
struct FoundRun {
  fs::path where;
  std::optional<json> packed;  // set for a pack's run
};

// `run`: a run directory (metrics.json, per_sample.jsonl), a run file (kRunFileSuffix) or a
// pack's run (kRunPackSuffix).
std::optional<RunRecord> read_run(const FoundRun& run, std::string* skip_reason) {
  const fs::path& where = run.where;
  const bool run_file = run.packed || is_run_file(where);
  json m, per_sample;
  if (run.packed) {
    m = *run.packed;
  } else {
    fs::path file = run_file ? where : where / "metrics.json";
    try {
      m = json::parse(read_file(file));
    } catch (const json::parse_error& e) {
      *skip_reason = fmt::format("{} is not valid JSON ({})", file.filename().string(), e.what());
      return std::nullopt;
    }
  }
  if (run_file) {
    if (!m.is_object() || !m.contains("metrics")) {
      *skip_reason = "a run file holds {\"metrics\": {...}, \"per_sample\": [...]}";
      return std::nullopt;
    }
    per_sample = m.value("per_sample", json());
    m = json(m["metrics"]);
  }
  auto schema = string_at(m, {"schema"});
  if (schema != std::string(kMetricsSchema) && schema != std::string(kMetricsSchemaV1)) {
    *skip_reason = fmt::format("not a dpft metrics.json (schema '{}', want '{}')",
                               schema.value_or(""), kMetricsSchema);
    return std::nullopt;
  }
  auto status = string_at(m, {"status"}).value_or("");
  if (status != "ok") {
    *skip_reason = fmt::format("status '{}'", status);
    return std::nullopt;
  }
  RunRecord r;
  r.dir = where;
  auto label = string_at(m, {"run", "label"});
  if (!label || label->empty()) label = string_at(m, {"run", "method"});
  r.label = label.value_or("?");
  r.dataset = dataset_name(m);
  r.eps = run_eps(m);
  if (const json* s = find(m, {"run", "seed"}); s && s->is_number_integer())
    r.seed = s->get<int64_t>();
  r.config_hash = string_at(m, {"run", "config_hash"}).value_or("");
  r.metrics = std::move(m);
  r.per_sample = std::move(per_sample);
  return r;
}

}  // namespace

// Warn about groups that pool different configurations or repeat a seed: their std would
// not be a spread over seeds of one configuration.
void check_groups(const std::vector<RunRecord>& runs) {
  std::map<std::tuple<std::string, std::string, double>, std::vector<const RunRecord*>> groups;
  for (const auto& r : runs) groups[{r.label, r.dataset, r.eps}].push_back(&r);
  for (const auto& [key, members] : groups) {
    std::set<std::string> hashes;
    std::set<int64_t> seeds;
    for (const RunRecord* r : members) {
      hashes.insert(r->config_hash);
      if (!seeds.insert(r->seed).second)
        spdlog::warn("{} / {} / eps {}: seed {} appears more than once (e.g. {})", std::get<0>(key),
                     std::get<1>(key), format_eps(std::get<2>(key), "csv"), r->seed,
                     r->dir.string());
    }
    if (hashes.size() > 1)
      spdlog::warn("{} / {} / eps {}: runs of {} configurations (config_hash) are pooled",
                   std::get<0>(key), std::get<1>(key), format_eps(std::get<2>(key), "csv"),
                   hashes.size());
  }
}

Table assemble(const std::string& caption, const std::vector<Collected>& blocks,
               const std::vector<std::string>& row_order) {
  std::set<ColKey> keys;  // datasets alphabetically, then eps ascending (inf is largest)
  for (const auto& b : blocks)
    for (const auto& [label, cols] : b.by_label)
      for (const auto& [k, v] : cols) keys.insert(k);
  Table t;
  t.caption = caption;
  for (const auto& [ds, eps] : keys) t.columns.push_back({ds, eps});
  for (const auto& b : blocks) {
    Block out;
    out.key = b.key;
    out.title = b.title;
    out.digits = b.digits;
    if (!b.base_by_dataset.empty()) {
      Row base{kBaseLabel, {}, true};
      for (const auto& c : t.columns) {
        auto it = b.base_by_dataset.find(c.dataset);
        base.cells.push_back(it == b.base_by_dataset.end() ? std::nullopt
                                                           : std::optional(summarize(it->second)));
      }
      out.rows.push_back(base);
    }
    std::vector<std::string> labels;
    for (const auto& [label, cols] : b.by_label) labels.push_back(label);
    std::sort(labels.begin(), labels.end(), [&](const std::string& a, const std::string& b) {
      return std::make_tuple(label_rank(a, row_order), a) <
             std::make_tuple(label_rank(b, row_order), b);
    });
    for (const auto& label : labels) {
      Row row{label, {}, false};
      const auto& cols = b.by_label.at(label);
      for (const auto& c : t.columns) {
        auto it = cols.find({c.dataset, c.eps});
        row.cells.push_back(it == cols.end() ? std::nullopt : std::optional(summarize(it->second)));
      }
      out.rows.push_back(row);
    }
    t.blocks.push_back(out);
  }
  return t;
}

std::string no_runs_error(const std::string& table, const std::string& what) {
  return fmt::format("report {}: no run has {}", table, what);
}

// Learning-rate selection: final eval loss (and, for classification runs, accuracy) per label
// and (dataset, lr, eps), the lr folded into the column's dataset name ("pubmed lr=0.001"); the
// caption names the best lr for each (label, dataset, eps): the highest mean accuracy when
// every run of the group is a classification run (eval.final.classification; what the GLUE
// tables report), else the lowest mean loss. Meant for runs evaluated on a held-out validation
// set (data.eval.exclude_train), never on the test set.
Table lr_select(std::vector<RunRecord> runs, const TableDef& def) {
  struct Obs {
    double loss;
    std::optional<double> accuracy;  // classification runs only
  };
  std::map<std::tuple<std::string, std::string, double>, std::map<double, std::vector<Obs>>>
      by_lr;  // (label, dataset, eps) -> lr -> observations
  Collected acc{"accuracy", "Validation Accuracy (↑)", {}, {}};
  Collected loss{"loss", "", {}, {}};
  std::vector<RunRecord> tagged;
  bool any_lm = false;
  for (auto& r : runs) {
    auto lr = number_at(r.metrics, {"train", "lr"});
    auto fl = number_at(r.metrics, {"eval", "final", "loss"});
    if (!lr || !fl) {
      spdlog::warn("skipped {}: train.lr or eval.final.loss is missing", r.dir.string());
      continue;
    }
    const auto a = number_at(r.metrics, {"eval", "final", "classification", "accuracy"});
    any_lm = any_lm || !a;
    by_lr[{r.label, r.dataset, r.eps}][*lr].push_back({*fl, a});
    r.dataset = fmt::format("{} lr={:g}", r.dataset, *lr);
    loss.by_label[r.label][{r.dataset, r.eps}].push_back(*fl);
    if (a) acc.by_label[r.label][{r.dataset, r.eps}].push_back(*a);
    tagged.push_back(r);
  }
  if (tagged.empty()) throw InputError(no_runs_error("lr-select", "train.lr and eval results"));
  check_groups(tagged);
  loss.title = any_lm ? "Validation Next Token Prediction Loss (↓)" : "Validation Loss (↓)";
  std::string by_loss, by_acc;  // " label / dataset / eps E: lr X;" items
  for (const auto& [key, lrs] : by_lr) {
    bool by_accuracy = true;
    for (const auto& [lr, xs] : lrs)
      for (const auto& x : xs) by_accuracy = by_accuracy && x.accuracy.has_value();
    // Minimised lexicographically: (minus mean accuracy, mean loss) or (mean loss); equal
    // accuracies (e.g. every lr stuck at the majority class) fall to the loss.
    double best_lr = 0;
    std::pair<double, double> best{kInf, kInf};
    for (const auto& [lr, xs] : lrs) {
      std::vector<double> a, l;
      for (const auto& x : xs) {
        if (by_accuracy) a.push_back(-*x.accuracy);
        l.push_back(x.loss);
      }
      const std::pair<double, double> m{by_accuracy ? summarize(a).mean : 0.0, summarize(l).mean};
      if (m < best) best_lr = lr, best = m;
    }
    (by_accuracy ? by_acc : by_loss) +=
        fmt::format(" {} / {} / eps {}: lr {:g};", std::get<0>(key), std::get<1>(key),
                    format_eps(std::get<2>(key), "csv"), best_lr);
  }
  std::string caption = "Learning-rate selection (mean ± std over seeds).";
  if (!by_loss.empty()) caption += " Lowest mean loss:" + by_loss;
  if (!by_acc.empty()) caption += " Highest mean accuracy (ties: lower loss):" + by_acc;
  caption.pop_back();
  std::vector<Collected> blocks;
  if (!acc.by_label.empty()) blocks.push_back(acc);
  blocks.push_back(loss);
  return assemble(caption, blocks, def.row_order);
}

namespace {

// The runs of a pack (kRunPackSuffix), by their path inside it; read once per pack.
using RunPack = std::map<std::string, json>;

RunPack read_pack(const fs::path& file) {
  RunPack pack;
  std::istringstream in(read_file(file));
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto bad = [&](const std::string& what) {
      return InputError(fmt::format(
          "{}:{}: {}; a run pack holds one run per line, {{\"path\": \"<relative path>.run.json\", "
          "\"metrics\": {{...}}, ...}} (experiments/run_files.py --pack writes it)",
          file.string(), n, what));
    };
    json j;
    try {
      j = json::parse(line);
    } catch (const json::parse_error& e) {
      throw bad(fmt::format("not valid JSON ({})", e.what()));
    }
    if (!j.is_object() || !j.contains("path") || !j["path"].is_string()) throw bad("no \"path\"");
    std::string path = j["path"].get<std::string>();
    const fs::path rel(path);
    if (path.empty() || rel.is_absolute() || rel.lexically_normal().string() != path ||
        path.rfind("..", 0) == 0)
      throw bad(fmt::format("path '{}' is not a normal relative path", path));
    j.erase("path");
    if (!pack.emplace(path, std::move(j)).second)
      throw bad(fmt::format("path '{}' appears twice", path));
  }
  return pack;
}

// Whether the first components of `path` match the patterns of `sub` (fnmatch each); a run
// file's name also matches without its suffix (`.../s0` selects `.../s0.run.json`, as it names
// the run directory s0 in a sweep's OUT).
bool pack_path_selected(const fs::path& path, const fs::path& sub) {
  auto p = path.begin();
  for (const auto& pattern : sub) {
    if (pattern.empty() || pattern == ".") continue;  // a trailing '/'
    if (p == path.end()) return false;
    const std::string name = p->string();
    bool hit = fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
    if (!hit && std::next(p) == path.end() && is_run_file(name)) {
      const std::string stem = name.substr(0, name.size() - kRunFileSuffix.size());
      hit = fnmatch(pattern.c_str(), stem.c_str(), 0) == 0;
    }
    if (!hit) return false;
    ++p;
  }
  return true;
}

// `arg` = PACK or PACK/SUB where PACK is an existing *.jsonl file: (PACK, SUB); else nullopt.
std::optional<std::pair<fs::path, fs::path>> split_pack_arg(const fs::path& arg) {
  for (fs::path p = arg; !p.empty(); p = p.parent_path()) {
    if (fs::is_regular_file(p)) {
      if (!has_suffix(p, kRunPackSuffix)) return std::nullopt;
      return std::make_pair(p, arg.lexically_relative(p));
    }
    if (fs::exists(p) || p == p.parent_path()) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace

LoadedRuns load_runs(const std::vector<fs::path>& dirs) {
  std::vector<std::string> names;
  for (const auto& d : dirs) names.push_back(d.string());
  // canonical name -> the run as found (relative DIRs stay relative in messages)
  std::map<fs::path, FoundRun> found;
  std::map<fs::path, RunPack> packs;  // by canonical path
  for (const auto& d : dirs) {
    if (fs::is_regular_file(d) && is_run_file(d)) {
      found.emplace(fs::canonical(d), FoundRun{d, std::nullopt});
      continue;
    }
    if (auto pack_arg = split_pack_arg(d)) {
      const auto& [file, sub] = *pack_arg;
      const fs::path canon = fs::canonical(file);
      auto it = packs.find(canon);
      if (it == packs.end()) it = packs.emplace(canon, read_pack(file)).first;
      size_t hits = 0;
      for (const auto& [path, run] : it->second)
        if (pack_path_selected(path, sub)) {
          found.emplace(canon / path, FoundRun{file / path, run});
          ++hits;
        }
      if (hits == 0)
        throw InputError(fmt::format(
            "dpft report: no run in {} under '{}' ({} runs, paths like '{}'); SUB selects "
            "runs by the first components of their path, globs allowed",
            file.string(), sub.string(), it->second.size(),
            it->second.empty() ? std::string() : it->second.begin()->first));
      continue;
    }
    if (!fs::is_directory(d))
      throw InputError(fmt::format(
          "dpft report: {} is neither a directory, a run file (*{}) nor a run pack (*{}, or "
          "PACK{}/SUB)",
          d.string(), kRunFileSuffix, kRunPackSuffix, kRunPackSuffix));
    for (const auto& e :
         fs::recursive_directory_iterator(d, fs::directory_options::skip_permission_denied)) {
      if (!e.is_regular_file()) continue;
      if (e.path().filename() == "metrics.json")
        found.emplace(fs::canonical(e.path().parent_path()),
                      FoundRun{e.path().parent_path(), std::nullopt});
      else if (is_run_file(e.path()))
        found.emplace(fs::canonical(e.path()), FoundRun{e.path(), std::nullopt});
    }
  }
  std::vector<FoundRun> run_dirs;
  for (auto& [canon, run] : found) run_dirs.push_back(std::move(run));
  std::sort(run_dirs.begin(), run_dirs.end(),
            [](const FoundRun& a, const FoundRun& b) { return a.where < b.where; });

  LoadedRuns out;
  for (const auto& run : run_dirs) {
    std::string reason;
    if (auto r = read_run(run, &reason)) {
      out.runs.push_back(std::move(*r));
    } else {
      spdlog::warn("skipped {}: {}", run.where.string(), reason);
      out.skipped.push_back({run.where, reason});
    }
  }
  if (out.runs.empty())
    throw InputError(
        fmt::format("dpft report: no finished run (metrics.json with status ok) "
                    "under {}{}",
                    join(names, ", "),
                    out.skipped.empty() ? "" : fmt::format(" ({} skipped)", out.skipped.size())));
  return out;
}

Stat summarize(const std::vector<double>& xs) {
  Stat s;
  s.n = static_cast<int>(xs.size());
  if (xs.empty()) return s;
  double sum = 0;
  for (double x : xs) sum += x;
  s.mean = sum / s.n;
  if (s.n < 2) {
    s.std = std::nan("");
    return s;
  }
  double ss = 0;
  for (double x : xs) ss += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(ss / (s.n - 1));
  return s;
}

const std::vector<std::string>& format_names() {
  static const std::vector<std::string> names = {"md", "csv", "latex"};
  return names;
}

namespace {
void check_member(const char* flag, const std::string& value,
                  const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), value) == names.end())
    throw ConfigError(
        fmt::format("{}: unknown value '{}'; valid: {}", flag, value, join(names, ", ")));
}
}  // namespace

void check_format(const std::string& format) {
  check_member("--format", format, format_names());
}

const TableDef& find_table(const std::vector<TableDef>& tables, const std::string& name) {
  std::vector<std::string> names;
  for (const TableDef& t : tables) {
    if (t.name == name) return t;
    names.push_back(t.name);
  }
  check_member("--table", name, names);  // throws
  throw ConfigError("--table: no tables are registered");
}

std::string canonical_label(const std::string& label, const std::vector<std::string>& order) {
  size_t r = label_rank(label, order);
  return r < order.size() ? order[r] : label;
}

Table build_table(const TableDef& def, std::vector<RunRecord> runs) {
  DPFT_CHECK(static_cast<bool>(def.build), "report table {} has no builder", def.name);
  for (RunRecord& r : runs) r.label = canonical_label(r.label, def.row_order);
  return def.build(runs, def);
}

std::vector<json> per_sample_lines(const json& per_sample, const std::string& source) {
  if (per_sample.is_array()) return per_sample.get<std::vector<json>>();
  auto bad = [&](const std::string& what) {
    return InputError(fmt::format(
        "{}: per_sample {}; a run file holds per_sample.jsonl's lines (an array) or "
        "experiments/run_files.py's columns {{\"layout\": \"columns/1\", \"float32\": [...], "
        "\"models\": {{TAG: {{FIELD: [...]}}}}}}",
        source, what));
  };
  if (!per_sample.is_object() || per_sample.value("layout", json()) != "columns/1")
    throw bad("is neither an array nor layout \"columns/1\"");
  const json& narrow = per_sample.value("float32", json::array());
  const json& models = per_sample.value("models", json());
  if (!narrow.is_array() || !models.is_object()) throw bad("lacks its float32 list or models");
  std::set<std::string> f32;
  for (const json& f : narrow) {
    if (!f.is_string()) throw bad("names a float32 field that is not a string");
    f32.insert(f.get<std::string>());
  }
  std::vector<json> lines;
  for (const auto& [tag, fields] : models.items()) {
    if (!fields.is_object()) throw bad(fmt::format("model {} is not an object of fields", tag));
    std::optional<size_t> n;
    for (const auto& [name, column] : fields.items()) {
      if (!column.is_array()) throw bad(fmt::format("model {} field {} is not a list", tag, name));
      if (n && *n != column.size())
        throw bad(fmt::format("model {} has fields of different lengths", tag));
      n = column.size();
    }
    for (size_t i = 0; i < n.value_or(0); ++i) {
      json line = {{"model", tag}};
      for (const auto& [name, column] : fields.items()) {
        const json& v = column[i];
        if (!v.is_number())
          throw bad(fmt::format("model {} field {} holds {}", tag, name, v.dump()));
        line[name] =
            f32.count(name) ? json(static_cast<double>(static_cast<float>(v.get<double>()))) : v;
      }
      lines.push_back(std::move(line));
    }
  }
  return lines;
}

double longtail_delta(const RunRecord& run) {
  if (!run.per_sample.is_null())
    return longtail_delta(per_sample_lines(run.per_sample, run.dir.string()), run.dir.string());
  return longtail_delta(run.dir);
}

double longtail_delta(const fs::path& run_dir) {
  fs::path file = run_dir / "per_sample.jsonl";
  if (!fs::exists(file)) throw InputError(fmt::format("{} does not exist", file.string()));
  return longtail_delta(read_jsonl(file), file.string());
}

double longtail_delta(const std::vector<json>& lines, const std::string& source) {
  const std::string file = source;
  std::map<int64_t, double> base, fin;  // index -> loss; the last line wins
  for (const auto& line : lines) {
    auto model = string_at(line, {"model"});
    auto loss = number_at(line, {"loss"});
    const json* index = find(line, {"index"});
    if (!model || !loss || !index || !index->is_number_integer())
      throw InputError(
          fmt::format("{}: a line lacks model, index or loss: {}", file, line.dump()));
    if (*model == "base") base[index->get<int64_t>()] = *loss;
    if (*model == "final") fin[index->get<int64_t>()] = *loss;
  }
  if (base.empty()) throw InputError(fmt::format("{} has no base-model losses", file));
  // Highest base loss first; stable_sort keeps ascending index among ties.
  std::vector<std::pair<int64_t, double>> order(base.begin(), base.end());
  std::stable_sort(order.begin(), order.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  size_t k = (order.size() + 9) / 10;  // ceil(10% of the samples)
  double sum = 0;
  for (size_t i = 0; i < k; ++i) {
    auto it = fin.find(order[i].first);
    if (it == fin.end())
      throw InputError(
          fmt::format("{}: no final-model loss for index {}", file, order[i].first));
    sum += it->second - order[i].second;
  }
  return sum / static_cast<double>(k);
}

// ---------------------------------------------------------------------------------------------
// Rendering

std::string format_eps(double eps, const std::string& format) {
  if (std::isinf(eps)) return format == "md" ? "∞" : format == "latex" ? "$\\infty$" : "inf";
  return fmt::format("{}", eps);
}

namespace {

// "2.1197 ± 0.0004" (with_n: "2.1197 ± 0.0004 (n=3)"); one run: "2.1197 (n=1)"; the base
// row: the mean alone.
std::string cell_text(const std::optional<Stat>& s, bool mean_only, const std::string& pm,
                      int digits, bool with_n) {
  if (!s) return "-";
  if (mean_only) return fmt::format("{:.{}f}", s->mean, digits);
  if (s->n == 1) return fmt::format("{:.{}f} (n=1)", s->mean, digits);
  return fmt::format("{:.{}f}{}{:.{}f}{}", s->mean, digits, pm, s->std, digits,
                     with_n ? fmt::format(" (n={})", s->n) : std::string());
}

// True when the data cells (not the base row) do not all have the same number of runs.
bool counts_differ(const Table& t) {
  std::set<int> counts;
  for (const auto& b : t.blocks)
    for (const auto& r : b.rows)
      if (!r.mean_only)
        for (const auto& c : r.cells)
          if (c) counts.insert(c->n);
  return counts.size() > 1;
}

std::string md_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

std::string latex_escape(std::string s) {
  std::string out;
  for (char c : s) {
    if (std::string("&%$#_{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  // The direction arrows and ± of the titles.
  for (auto [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"↓", "$\\downarrow$"}, {"↑", "$\\uparrow$"}, {"±", "$\\pm$"}}) {
    for (size_t p; (p = out.find(from)) != std::string::npos;) out.replace(p, from.size(), to);
  }
  return out;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

using CellFn = std::string (*)(const std::optional<Stat>&, bool, int, bool);

std::string md_cell(const std::optional<Stat>& s, bool mean_only, int digits, bool with_n) {
  return cell_text(s, mean_only, " ± ", digits, with_n);
}
std::string latex_cell(const std::optional<Stat>& s, bool mean_only, int digits, bool with_n) {
  return cell_text(s, mean_only, " $\\pm$ ", digits, with_n);
}
std::string count_cell(const std::optional<Stat>& s, bool, int, bool) {
  return s ? std::to_string(s->n) : "-";
}

void render_md_body(std::ostringstream& o, const Table& t, CellFn cell, bool skip_base) {
  o << "| Method |";
  for (const auto& c : t.columns)
    o << " " << md_escape(c.dataset) << " ε=" << format_eps(c.eps, "md") << " |";
  o << "\n|---|";
  for (size_t i = 0; i < t.columns.size(); ++i) o << "---|";
  o << "\n";
  for (const auto& b : t.blocks) {
    o << "| **" << md_escape(b.title) << "** |";
    for (size_t i = 0; i < t.columns.size(); ++i) o << " |";
    o << "\n";
    for (const auto& r : b.rows) {
      if (skip_base && r.mean_only) continue;
      o << "| " << md_escape(r.label) << " |";
      for (const auto& c : r.cells)
        o << " " << cell(c, r.mean_only, b.digits, t.n_in_cells) << " |";
      o << "\n";
    }
  }
}

std::string render_md(const Table& t) {
  std::ostringstream o;
  o << "**" << t.caption << "**\n\n";
  render_md_body(o, t, md_cell, false);
  if (counts_differ(t) && !t.n_in_cells) {
    o << "\nRuns per cell:\n\n";
    render_md_body(o, t, count_cell, true);
  }
  return o.str();
}

std::string render_csv(const Table& t) {
  std::ostringstream o;
  o << "metric,method";
  for (const auto& c : t.columns) {
    std::string col = c.dataset + " eps=" + format_eps(c.eps, "csv");
    for (const char* what : {" mean", " std", " n"}) o << "," << csv_field(col + what);
  }
  o << "\n";
  for (const auto& b : t.blocks)
    for (const auto& r : b.rows) {
      o << csv_field(b.key) << "," << csv_field(r.label);
      for (const auto& c : r.cells) {
        if (!c) {
          o << ",,,";
          continue;
        }
        o << "," << fmt::format("{}", c->mean) << ",";
        if (c->n > 1 && !r.mean_only) o << fmt::format("{}", c->std);
        o << "," << c->n;
      }
      o << "\n";
    }
  return o.str();
}

void render_latex_body(std::ostringstream& o, const Table& t, CellFn cell, bool skip_base) {
  const size_t ncols = t.columns.size() + 1;
  o << "\\begin{tabular}{l" << std::string(t.columns.size(), 'c') << "}\n\\toprule\n";
  // Header: datasets spanning their eps columns, then the eps values.
  o << "Method";
  for (size_t i = 0; i < t.columns.size();) {
    size_t j = i;
    while (j < t.columns.size() && t.columns[j].dataset == t.columns[i].dataset) ++j;
    o << " & \\multicolumn{" << (j - i) << "}{c}{" << latex_escape(t.columns[i].dataset) << "}";
    i = j;
  }
  o << " \\\\\n";
  for (const auto& c : t.columns)
    o << " & $\\epsilon = " << (std::isinf(c.eps) ? "\\infty" : format_eps(c.eps, "latex")) << "$";
  o << " \\\\\n";
  for (const auto& b : t.blocks) {
    o << "\\midrule\n\\multicolumn{" << ncols << "}{c}{" << latex_escape(b.title)
      << "} \\\\\n\\midrule\n";
    for (const auto& r : b.rows) {
      if (skip_base && r.mean_only) continue;
      o << latex_escape(r.label);
      for (size_t i = 0; i < r.cells.size();) {
        size_t j = i + 1;
        if (r.mean_only)  // one value per dataset: span its eps columns, as the paper does
          while (j < r.cells.size() && t.columns[j].dataset == t.columns[i].dataset) ++j;
        std::string text = cell(r.cells[i], r.mean_only, b.digits, t.n_in_cells);
        if (j - i > 1)
          o << " & \\multicolumn{" << (j - i) << "}{c}{" << text << "}";
        else
          o << " & " << text;
        i = j;
      }
      o << " \\\\\n";
    }
  }
  o << "\\bottomrule\n\\end{tabular}\n";
}

std::string render_latex(const Table& t) {
  std::ostringstream o;
  o << "% " << t.caption << " (dpft report; needs \\usepackage{booktabs})\n";
  render_latex_body(o, t, latex_cell, false);
  if (counts_differ(t) && !t.n_in_cells) {
    o << "% Runs per cell:\n";
    render_latex_body(o, t, count_cell, true);
  }
  return o.str();
}

}  // namespace

std::string render(const Table& table, const std::string& format) {
  check_format(format);
  if (format == "csv") return render_csv(table);
  if (format == "latex") return render_latex(table);
  return render_md(table);
}

}  // namespace dpft::report
