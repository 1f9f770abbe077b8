#include "methods/select/select.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "core/config/spec.hpp"
#include "core/privacy/selection.hpp"
#include "core/run/runner.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"
#include "core/util/system.hpp"
#include "data/table.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft::select {

namespace fs = std::filesystem;

namespace {

// The keys a grid may not vary: what is private, how it is held out and scored, where it goes.
bool grid_key_refused(const std::string& key) {
  for (const char* p : {"privacy.", "data.", "eval.", "output."})
    if (key.rfind(p, 0) == 0) return true;
  return false;
}

// Every combination of the grid's values, as --set lists (the first key varies slowest).
std::vector<std::vector<std::string>> candidate_sets(const SelectOptions& o) {
  std::vector<std::vector<std::string>> out{{}};
  for (const auto& [key, values] : o.grid) {
    std::vector<std::vector<std::string>> next;
    for (const auto& prefix : out)
      for (const std::string& v : values) {
        next.push_back(prefix);
        next.back().push_back(key + "=" + v);
      }
    out = std::move(next);
  }
  return out;
}

// The trial of one candidate: trains on the first (1 - holdout) of the training file's hash
// range and evaluates every row of the rest, per row (per_sample.jsonl), at the end only.
Spec trial_spec(const Spec& spec, double holdout) {
  Spec t = spec;
  const std::vector<double>& hs = spec.data.train.hash_split;
  const double lo = hs.empty() ? 0.0 : hs[0], hi = hs.empty() ? 1.0 : hs[1];
  const double cut = lo + (hi - lo) * (1 - holdout);
  t.data.train.hash_split = {lo, cut};
  t.data.eval = spec.data.train;
  t.data.eval.hash_split = {cut, hi};
  t.data.eval.num_samples = 0;
  t.data.eval.user_column.clear();
  t.data.eval.exclude_train = false;
  t.data.eval_sets.clear();
  t.eval = EvalSpec{};
  t.eval.per_sample = true;
  t.output.save_model = true;
  t.name = spec.name + "-trial";
  return t;
}

void check_selectable(const Spec& s, const SelectOptions& o) {
  DPFT_CHECK_AS(ConfigError, method_trains(s),
                "dpft select: method {} trains nothing on the private data; there is nothing to "
                "select",
                s.method.name);
  DPFT_CHECK_AS(ConfigError, s.privacy.is_private(),
                "dpft select: the spec is not DP (privacy.epsilon {}); every trial must be: give "
                "a finite privacy.epsilon or privacy.noise_multiplier > 0",
                s.privacy.epsilon ? fmt::format("{}", *s.privacy.epsilon) : "unset");
  DPFT_CHECK_AS(ConfigError, !s.privacy.delta_auto,
                "dpft select: privacy.delta: auto depends on the training part's size; give "
                "privacy.delta a number");
  DPFT_CHECK_AS(ConfigError, s.privacy.unit != privacy::PrivacyUnit::kDocument || !s.data.packing,
                "dpft select: privacy.unit document with data.packing scores blocks, not "
                "documents; select without packing (a document is then one row)");
  DPFT_CHECK_AS(ConfigError, o.holdout > 0 && o.holdout <= 0.5,
                "dpft select: --holdout {} is outside (0, 0.5]", o.holdout);
  DPFT_CHECK_AS(ConfigError, std::isfinite(o.loss_bound) && o.loss_bound > 0,
                "dpft select: --loss-bound {} must be finite and > 0", o.loss_bound);
}

// The held-out units' scores in [0, 1] (higher is better) from a trial's per_sample.jsonl:
// each row's, or at unit user (`user_of`: the training file's user of each row, by index) the
// mean of each user's rows, so that one unit moves the sum by at most 1.
std::vector<double> unit_scores(const fs::path& run_dir, const SelectOptions& o,
                                const std::vector<std::string>& user_of) {
  std::vector<double> rows;
  std::map<std::string, std::pair<double, int64_t>> users;  // user -> (sum, rows)
  for (const nlohmann::json& e : read_jsonl(run_dir / "per_sample.jsonl")) {
    if (e.value("model", "") != "final") continue;
    const bool acc = o.metric == SelectMetric::kAccuracy;
    const double v = acc ? e.value("accuracy", 0.0) : e.value("loss", o.loss_bound);
    const double c = std::isfinite(v) ? std::clamp(v, 0.0, acc ? 1.0 : o.loss_bound)
                                      : (acc ? 0.0 : o.loss_bound);
    const double score = acc ? c : 1 - c / o.loss_bound;
    if (user_of.empty()) {
      rows.push_back(score);
      continue;
    }
    const int64_t i = e.at("index").get<int64_t>();
    DPFT_CHECK(i >= 0 && i < static_cast<int64_t>(user_of.size()),
               "dpft select: per_sample.jsonl index {} outside the training file's {} rows", i,
               user_of.size());
    auto& u = users[user_of[static_cast<size_t>(i)]];
    u.first += score;
    ++u.second;
  }
  for (const auto& [user, u] : users) rows.push_back(u.first / static_cast<double>(u.second));
  DPFT_CHECK_AS(RuntimeError, !rows.empty(),
                "dpft select: {}/per_sample.jsonl scores no held-out row; raise --holdout",
                run_dir.string());
  return rows;
}

// A noisy score sum over n units as the metric's unit (mean accuracy, or mean clipped loss).
double as_metric(double noisy_sum, size_t n, const SelectOptions& o) {
  const double mean = noisy_sum / static_cast<double>(n);
  return o.metric == SelectMetric::kAccuracy ? mean : o.loss_bound * (1 - mean);
}

// `bytes` random bytes from the OS as hex: a trial's run name.
std::string random_hex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) out += fmt::format("{:02x}", rd() & 0xff);
  return out;
}

// The run directory of trial t started before (its selection_trial.json names it), or "".
// InputError when it ran another candidate than c (the key's draw) or when two runs claim it.
fs::path started_trial(const fs::path& dir, int64_t t, int64_t c) {
  fs::path found;
  if (!fs::exists(dir / "trials")) return found;
  for (const auto& e : fs::recursive_directory_iterator(dir / "trials")) {
    if (e.path().filename() != kSelectionTrialFile) continue;
    const nlohmann::json j = read_json(e.path());
    if (j.value("trial", int64_t{-1}) != t) continue;
    const fs::path run = e.path().parent_path();
    DPFT_CHECK_AS(InputError, found.empty(),
                  "dpft select --resume: {} and {} both hold trial {}; the selection was altered",
                  found.string(), run.string(), t);
    DPFT_CHECK_AS(InputError, j.value("candidate", int64_t{-1}) == c,
                  "dpft select --resume: {} ran another candidate for trial {} than its key "
                  "draws; the selection was altered",
                  run.string(), t);
    found = run;
  }
  return found;
}

// Trial t (candidate c) from scratch, or (--resume) the run an interruption left unfinished,
// continued from its checkpoint: a trial restarted beside its unfinished run would leave two
// runs of one trial on disk, while the budget counts one. Returns its run directory.
std::string run_trial(const Spec& trial, const fs::path& dir, int64_t t, int64_t c,
                      const SelectOptions& o) {
  RunOptions ro;
  ro.out_dir = (dir / "trials").string();
  ro.command_line = o.command_line;
  ro.selection_trial = {{"selection", fs::absolute(dir).string()}, {"trial", t}, {"candidate", c}};
  ro.run_name = "trial-" + random_hex(8);  // neither time nor trial number (runner.hpp)
  Spec spec = trial;
  const fs::path before = o.resume ? started_trial(dir, t, c) : fs::path();
  if (!before.empty() && !fs::exists(before / "manifest.json")) {
    // Stopped before its manifest, so before training began: nothing in it derives from the
    // private data. Removed, and the trial starts afresh.
    spdlog::info("select: trial {} stopped before it began ({}); starting it again", t + 1,
                 before.string());
    fs::remove_all(before);
  } else if (!before.empty()) {
    const nlohmann::json m = read_json(before / "manifest.json");
    if (m.value("status", "") == "ok") return before.string();  // finished, not yet scored
    spdlog::info("select: trial {} continues {}", t + 1, before.string());
    spec = resumable_here(load_spec((before / "config.resolved.yaml").string(), {}));
    ro.resume_dir = before.string();
  }
  const RunResult r = run_method(spec, ro);
  DPFT_CHECK_AS(RuntimeError, r.status == "ok",
                "dpft select: a trial ended '{}' ({}); continue with --resume", r.status,
                r.run_dir);
  return r.run_dir;
}

// The plan that fixes the budget and that a --resume must find unchanged.
nlohmann::json plan_json(const std::vector<Spec>& trials,
                         const std::vector<std::vector<std::string>>& sets,
                         const privacy::SelectionPlan& plan, const privacy::SelectionBudget& b,
                         const SelectOptions& o) {
  nlohmann::json cands = nlohmann::json::array();
  for (size_t c = 0; c < trials.size(); ++c)
    cands.push_back({{"sets", sets[c]}, {"config_hash", config_hash(trials[c])}});
  return {{"candidates", cands},
          {"metric", enum_name(o.metric, kSelectMetricNames)},
          {"holdout", o.holdout},
          {"loss_bound", o.loss_bound},
          {"score_noise", plan.score_sigma},
          {"trials",
           {{"distribution", "truncated negative binomial"},
            {"eta", plan.trials.eta},
            {"gamma", plan.trials.gamma},
            {"mean", plan.trials.mean()}}},
          {"delta", plan.delta},
          {"budget", b.to_json()}};
}

fs::path selection_dir(const Spec& spec, const SelectOptions& o) {
  const fs::path dir = !o.out_dir.empty() ? fs::path(o.out_dir)
                                          : fs::path(spec.output.dir) / "select" /
                                                fmt::format("{}-{}", spec.name, local_stamp_now());
  if (o.resume) {
    DPFT_CHECK_AS(InputError, fs::exists(dir / "selection_plan.json"),
                  "dpft select --resume: {} holds no selection (selection_plan.json); give the "
                  "--out of the selection to continue",
                  dir.string());
  } else if (!o.dry_run) {
    DPFT_CHECK_AS(ConfigError, !fs::exists(dir) || (fs::is_directory(dir) && fs::is_empty(dir)),
                  "dpft select: {} exists and is not empty; give a new --out (or --resume)",
                  dir.string());
  }
  return dir;
}

// Each candidate's trial spec (into *trials) and the plan of the whole selection.
privacy::SelectionPlan make_plan(const std::string& spec_path,
                                 const std::vector<std::vector<std::string>>& sets,
                                 const SelectOptions& o, std::vector<Spec>* trials) {
  privacy::SelectionPlan plan;
  for (const auto& cs : sets) {
    std::vector<std::string> all = o.sets;
    all.insert(all.end(), cs.begin(), cs.end());
    const Spec s = load_spec(spec_path, all);
    check_selectable(s, o);
    trials->push_back(trial_spec(s, o.holdout));
    std::vector<privacy::GaussianBlock> blocks;
    for (const privacy::Release& r : planned_releases(trials->back()))
      blocks.push_back({r.noise_multiplier, r.sampling_rate, r.count});
    plan.candidates.push_back(blocks);
  }
  plan.delta = trials->front().privacy.delta;
  plan.score_sigma = o.score_noise;
  plan.trials = privacy::TruncatedNegativeBinomial::with_mean(
      o.eta, o.mean_trials > 0 ? o.mean_trials : 2.0 * static_cast<double>(sets.size()));
  return plan;
}

// selection.json: the selection's output, the winner only (no trial number, no K).
nlohmann::json selection_json(const Spec& base, const std::vector<std::vector<std::string>>& sets,
                              const nlohmann::json& winner, const fs::path& dir,
                              const privacy::SelectionPlan& plan,
                              const privacy::SelectionBudget& budget, const nlohmann::json& pj,
                              const privacy::PrivateSelection& sel, const SelectOptions& o) {
  const int64_t wc = winner.at("candidate").get<int64_t>();
  nlohmann::json grid = nlohmann::json::object();
  for (const auto& [key, values] : o.grid) grid[key] = values;
  return {{"schema", "dpft.select/1"},
          {"spec", base.name},
          {"method", base.method.name},
          {"metric", enum_name(o.metric, kSelectMetricNames)},
          {"grid", grid},
          {"holdout", o.holdout},
          {"winner",
           {{"sets", sets[wc]},
            {"noisy_score", winner.at("noisy_score")},
            {"held_out_units", winner.at("units")},
            {"run_dir", fs::relative(winner.at("run_dir").get<std::string>(), dir).string()}}},
          {"privacy",
           {{"epsilon", budget.epsilon},
            {"delta", plan.delta},
            {"order", budget.order},
            {"trial_epsilon_rdp", budget.trial_epsilon},
            {"unit", privacy::name_of(base.privacy.unit)},
            {"accountant", "rdp; Papernot & Steinke 2022, Theorem 2"},
            {"trials", pj.at("trials")},
            {"score_noise", plan.score_sigma},
            {"noise", sel.noise_json()}}},
          {"note",
           "the selection's output is the winner only: its candidate, noisy score and model carry "
           "the total epsilon; the number of trials and the other trials are not covered"}};
}

}  // namespace

std::pair<std::string, std::vector<std::string>> parse_grid(const std::string& arg) {
  const size_t eq = arg.find('=');
  DPFT_CHECK_AS(ConfigError, eq != std::string::npos && eq > 0 && eq + 1 < arg.size(),
                "dpft select: --grid '{}' is not key=v1,v2,... (e.g. --grid train.lr=1e-4,1e-3)",
                arg);
  const std::string key = arg.substr(0, eq);
  DPFT_CHECK_AS(ConfigError, !grid_key_refused(key),
                "dpft select: --grid {} would change what is private, held out or scored; vary "
                "training or method settings (train.*, method.*, model.*, seed) and keep the "
                "rest in the spec",
                key);
  std::vector<std::string> values;
  std::string rest = arg.substr(eq + 1);
  for (size_t start = 0;;) {
    const size_t comma = rest.find(',', start);
    const std::string v = rest.substr(start, comma == std::string::npos ? comma : comma - start);
    DPFT_CHECK_AS(ConfigError, !v.empty() && v.find_first_of(" \t") == std::string::npos,
                  "dpft select: --grid '{}' has an empty value or one with spaces", arg);
    values.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return {key, values};
}

SelectResult run_select(const std::string& spec_path, const SelectOptions& opts) {
  const SelectOptions& o = opts;
  DPFT_CHECK_AS(ConfigError, !o.grid.empty(), "dpft select: give at least one --grid key=a,b,...");
  const std::vector<std::vector<std::string>> sets = candidate_sets(o);
  std::vector<Spec> trials;
  const privacy::SelectionPlan plan = make_plan(spec_path, sets, o, &trials);
  const Spec& base = trials.front();
  const privacy::SelectionBudget budget = privacy::selection_budget(plan);
  spdlog::info(
      "select: {} candidates, E[trials] {:.3g} (eta {}); total epsilon {:.4g} at delta "
      "{:g} (one trial: {:.4g})",
      trials.size(), plan.trials.mean(), plan.trials.eta, budget.epsilon, plan.delta,
      budget.trial_epsilon);
  DPFT_CHECK_AS(ConfigError, !o.max_epsilon || budget.epsilon <= *o.max_epsilon,
                "dpft select: the selection's total epsilon {:.4g} exceeds --max-epsilon {:g}; "
                "lower the trials' privacy.epsilon, --mean-trials or raise --score-noise",
                budget.epsilon, *o.max_epsilon);
  const fs::path dir = selection_dir(base, o);
  const nlohmann::json pj = plan_json(trials, sets, plan, budget, o);
  if (o.dry_run) return {{{"schema", "dpft.select/1"}, {"plan", pj}}, dir.string()};
  if (o.resume) {
    DPFT_CHECK_AS(ConfigError, read_json(dir / "selection_plan.json") == pj,
                  "dpft select --resume: the spec, grid or options differ from the ones {} "
                  "started with (selection_plan.json); its budget cannot change",
                  dir.string());
  } else {
    fs::create_directories(dir);
    write_json_atomic(dir / "selection_plan.json", pj);
  }
  privacy::PrivateSelection sel(plan, dir, base.privacy.secure_noise, base.privacy.noise_seed,
                                o.resume);

  // Trials done before a --resume, by trial number (their draws repeat: keyed noise).
  std::map<int64_t, nlohmann::json> done;
  if (fs::exists(dir / "selection_trials.jsonl"))
    for (const nlohmann::json& e : read_jsonl(dir / "selection_trials.jsonl"))
      done[e.at("trial").get<int64_t>()] = e;
  // At unit user, each training-file row's user (per_sample.jsonl's index is the file row).
  std::vector<std::string> user_of;
  if (base.privacy.unit == privacy::PrivacyUnit::kUser)
    user_of = data::column_texts(base.data.train.path, base.data.train.user_column,
                                 base.data.train.format);
  const int64_t k = sel.trials();
  double best = -privacy::kInf;
  nlohmann::json winner;
  for (int64_t t = 0; t < k; ++t) {
    const int64_t c = sel.candidate(t);
    std::string run_dir;
    if (done.count(t)) {
      DPFT_CHECK_AS(InputError, done[t].at("candidate").get<int64_t>() == c,
                    "dpft select --resume: trial {} of {} ran another candidate than its key "
                    "draws; the selection was altered",
                    t, dir.string());
      run_dir = done[t].at("run_dir").get<std::string>();
    } else {
      spdlog::info("select: trial {} of {}: {}", t + 1, k, join(sets[c], " "));
      run_dir = run_trial(trials[c], dir, t, c, o);
    }
    const std::vector<double> rows = unit_scores(run_dir, o, user_of);
    double sum = 0;
    for (double v : rows) sum += v;
    const double noisy = sel.release_score(sum);
    const nlohmann::json line = {{"trial", t},
                                 {"candidate", c},
                                 {"run_dir", run_dir},
                                 {"noisy_score", as_metric(noisy, rows.size(), o)}};
    if (!done.count(t)) JsonlWriter(dir / "selection_trials.jsonl").write(line);
    if (noisy > best) {
      best = noisy;
      winner = line;
      winner["units"] = rows.size();
    }
  }
  const nlohmann::json out = selection_json(base, sets, winner, dir, plan, budget, pj, sel, o);
  write_json_atomic(fs::path(winner.at("run_dir").get<std::string>()) / "selection.json", out);
  write_json_atomic(dir / "selection.json", out);
  return {out, dir.string()};
}

}  // namespace dpft::select
