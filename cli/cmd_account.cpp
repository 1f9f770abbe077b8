// `dpft account`: privacy accounting without a run, or of a run (`dpft account RUN_DIR`).
//   --eps E  --delta D (--q Q | --dataset-size N --batch-size B) (--steps T | --epochs K) -> sigma
//   --sigma S --delta D (...)                                                            -> epsilon
//   --eps E --sigma S --delta D with one of q / steps missing                            -> that
//   one
//   --with-gaussian S (repeatable): compose one more Gaussian release of sensitivity 1 on the
//   whole data (CTCL's topic histogram, sigma 10) with the steps, in both directions
//   --spec SPEC.yaml [--set ...] [--dataset-size N] [--eps E]                             -> a
//   run's plan and its epsilon (N counted from the spec's data as the run does; exit 2 over E or
//   the spec's privacy.epsilon)
//   --spec A.yaml B.yaml ... (or --spec repeated)                           -> each spec's plan in
//   turn (with --json one compact object per line, with "spec"; a spec that fails is reported
//   and the others still run; exit status the largest of theirs); N is counted once per
//   distinct training data, tokenizer and seed
//   --queries FILE (- = stdin)                                              -> one answer per
//   line of FILE, each line the flags of one call above without --spec (with --json one compact
//   object per line, with "query"; a failed line is reported and the others still run; exit
//   status the largest): a sweep of releases in one process, not one LibTorch start per point
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>

#include "cli/app.hpp"
#include "core/config/ledger_options.hpp"
#include "core/config/spec.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/privacy/ledger.hpp"
#include "core/run/runner.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/train_inputs.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft {

namespace {

struct AccountOpts {
  std::optional<double> eps, sigma, delta, q, epochs, delta_error;
  std::optional<int64_t> steps, dataset_size, batch_size;
  std::string accountant = "prv";
  double eps_error = 0.01, sigma_tol = 1e-3;
  bool json = false;
  std::string queries;
  std::vector<std::string> specs;
  std::vector<std::string> sets;
  std::vector<double> with_gaussian;
  std::string run_dir;
};

void require_range(const char* flag, const std::optional<double>& v, bool ok, const char* range) {
  if (v && !ok) throw ConfigError(fmt::format("{} {}: out of range; allowed {}", flag, *v, range));
}

void print(const nlohmann::json& j, bool as_json) {
  if (as_json) {
    std::cout << j.dump(2) << "\n";
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "warnings" || it.key() == "releases") continue;
    std::string v = it->is_string() ? it->get<std::string>() : it->dump();
    std::cout << fmt::format("{:<18} {}\n", it.key(), v);
  }
  if (j.contains("releases"))
    for (const auto& r : j["releases"])
      std::cout << fmt::format("  release {:<10} {:<20} sigma {:<10} q {:<10} x {}\n",
                               r["label"].get<std::string>(), r["mechanism"].get<std::string>(),
                               r["noise_multiplier"].get<double>(),
                               r["sampling_rate"].get<double>(), r["count"].get<int64_t>());
}

void add_result(nlohmann::json& j, const privacy::EpsilonResult& e) {
  j["epsilon"] = privacy::eps_json(e.epsilon);
  j["accountant_used"] = e.accountant;
  if (e.eps_lower) j["eps_lower"] = *e.eps_lower;
  if (e.eps_estimate) j["eps_estimate"] = *e.eps_estimate;
  if (e.eps_upper) j["eps_upper"] = *e.eps_upper;
  if (e.best_order) j["rdp_order"] = *e.best_order;
  if (!e.warnings.empty()) j["warnings"] = e.warnings;
  for (const auto& w : e.warnings) spdlog::warn("{}", w);
}

// N of a spec's private training set, counted as a run would (data::count_train_examples),
// memoised for the process: it depends on the data block, the seed (subsampling) and the
// model's tokenizer only, and a sweep's specs share a handful of data sets.
int64_t counted_train_examples(const Spec& spec) {
  static std::map<std::string, int64_t> memo;
  const YAML::Node y = spec_to_yaml(spec);
  YAML::Emitter key;
  key << YAML::BeginMap << YAML::Key << "data" << YAML::Value << y["data"] << YAML::Key << "seed"
      << YAML::Value << spec.seed << YAML::Key << "model" << YAML::Value << spec.model.path
      << YAML::EndMap;
  auto it = memo.find(key.c_str());
  if (it != memo.end()) return it->second;
  const int64_t n = data::count_train_examples(spec);
  memo.emplace(key.c_str(), n);
  return n;
}

// One spec's plan: prints it (as_lines: one compact JSON line with "spec") and returns 0, or
// throws as a run would refuse it (exit 2 over the budget).
int account_spec(const AccountOpts& o, const std::string& spec_path, bool as_lines) {
  for (const auto& [flag, given] :
       {std::pair{"--sigma", o.sigma.has_value()}, {"--delta", o.delta.has_value()},
        {"--q", o.q.has_value()}, {"--steps", o.steps.has_value()},
        {"--epochs", o.epochs.has_value()}, {"--batch-size", o.batch_size.has_value()}})
    if (given)
      throw ConfigError(fmt::format(
          "{} conflicts with --spec: the spec's own settings are used (change them with --set, "
          "e.g. --set privacy.delta=1e-6)",
          flag));
  require_range("--eps", o.eps, o.eps && *o.eps > 0, "(0, inf]");
  Spec spec = load_spec(spec_path, o.sets);
  int64_t n = 0;
  std::string n_source = "--dataset-size";
  if (o.dataset_size) {
    if (*o.dataset_size < 1)
      throw ConfigError(fmt::format("--dataset-size {}: must be >= 1", *o.dataset_size));
    n = *o.dataset_size;
  } else if (method_trains(spec)) {
    try {
      n = counted_train_examples(spec);
    } catch (const InputError& e) {
      throw InputError(fmt::format(
          "{}\n`dpft account --spec` counts the tokenised private examples N as a run would, "
          "reading the data and the model's tokenizer: fix what the error names (the run "
          "would fail on it too), or give --dataset-size N to account without reading them",
          e.what()));
    }
    n_source = "tokenised data";
  }
  const double delta_before = spec.privacy.delta;
  spec = resolved_for(spec, n);
  const bool delta_auto = spec.privacy.delta != delta_before;
  privacy::LedgerOptions lo = privacy::ledger_options(spec.privacy);
  if (o.eps) lo.target_epsilon = *o.eps;  // the budget to check the spec's spend against
  auto plan = planned_releases(spec, n);
  const privacy::PrivacyLedger ledger = privacy::PrivacyLedger::of_plan(lo, plan);
  nlohmann::json j = ledger.to_json();
  j["method"] = spec.method.name;
  if (method_trains(spec)) {
    j["dataset_size"] = n;  // in units of privacy.unit
    j["dataset_size_source"] = n_source;
    j["unit"] = privacy::name_of(spec.privacy.unit);
  }
  if (delta_auto) j["delta_source"] = "auto: 1 / (N ln N)";
  bool any_private = false;
  for (const auto& r : plan) any_private |= r.noise_multiplier > 0;
  if (plan.empty())
    j["note"] = "this method makes no DP release";
  else if (!any_private)
    j["note"] = "non-private: the run releases a model trained without noise (epsilon inf)";
  if (as_lines) {
    j["spec"] = spec_path;
    if (o.json) std::cout << j.dump() << "\n";
  }
  if (!as_lines || !o.json) print(j, o.json);
  std::cout.flush();  // whole lines before any warning on stderr
  for (const auto& w : ledger.spent().warnings) spdlog::warn("{}", w);
  ledger.check_plan({});  // exit 2 if the spend exceeds the target (privacy.epsilon or --eps)
  return 0;
}

// Several specs (a sweep's, checked before it starts): each in turn, a failure reported with
// its spec and the rest still accounted; the exit status is the largest.
int account_specs(const AccountOpts& o) {
  if (o.specs.size() == 1) return account_spec(o, o.specs[0], false);
  int worst = 0, failed = 0;
  for (const std::string& f : o.specs) {
    if (!o.json) std::cout << fmt::format("== {}\n", f);
    try {
      account_spec(o, f, true);
    } catch (const Error& e) {
      worst = std::max(worst, e.exit_code());
      ++failed;
      if (o.json)
        std::cout
            << nlohmann::json{{"spec", f}, {"error", e.what()}, {"exit_code", e.exit_code()}}.dump()
            << "\n";
      else
        spdlog::error("{}: {}", f, e.what());
    }
    std::cout.flush();
  }
  if (failed > 0)
    spdlog::warn("account: {} of {} specs failed (exit {}); see their errors above", failed,
                 o.specs.size(), worst);
  return worst;
}

// One flag-set call (no --spec): the answer as JSON, or throws ConfigError for bad flags.
nlohmann::json account_flags_json(AccountOpts o) {
  if (!o.delta) throw ConfigError("--delta is required (e.g. --delta 1e-5)");
  require_range("--eps", o.eps, o.eps && *o.eps > 0, "(0, inf]");
  if (o.eps && std::isinf(*o.eps) && o.sigma)
    throw ConfigError("--eps inf with --sigma: there is no budget to solve against");
  require_range("--delta", o.delta, *o.delta > 0 && *o.delta < 1, "(0, 1)");
  require_range("--sigma", o.sigma, o.sigma && *o.sigma > 0 && std::isfinite(*o.sigma), "(0, inf)");
  require_range("--q", o.q, o.q && *o.q > 0 && *o.q <= 1, "(0, 1]");
  require_range("--epochs", o.epochs, o.epochs && *o.epochs > 0, "(0, inf)");
  if (o.steps && *o.steps < 1) throw ConfigError(fmt::format("--steps {}: must be >= 1", *o.steps));
  if (o.q && (o.dataset_size || o.batch_size))
    throw ConfigError(
        "--q conflicts with --dataset-size/--batch-size: give the rate or the sizes, not both");
  if (o.dataset_size || o.batch_size) {
    if (!o.dataset_size || !o.batch_size)
      throw ConfigError("--dataset-size and --batch-size go together");
    if (*o.dataset_size < 1 || *o.batch_size < 1 || *o.batch_size > *o.dataset_size)
      throw ConfigError(fmt::format("--batch-size {} must be in [1, --dataset-size {}]",
                                    *o.batch_size, *o.dataset_size));
    o.q = static_cast<double>(*o.batch_size) / static_cast<double>(*o.dataset_size);
  }
  if (o.steps && o.epochs) throw ConfigError("--steps conflicts with --epochs: give one");
  if (o.epochs) {
    if (!o.q)
      throw ConfigError("--epochs needs the sampling rate (--q or --dataset-size/--batch-size)");
    o.steps = static_cast<int64_t>(std::ceil(*o.epochs / *o.q - 1e-9));
  }
  if (!o.eps && !o.sigma)
    throw ConfigError("give --eps (to get sigma) or --sigma (to get epsilon)");
  std::vector<privacy::GaussianBlock> fixed;
  for (double s : o.with_gaussian) {
    if (!(s > 0 && std::isfinite(s)))
      throw ConfigError(
          fmt::format("--with-gaussian {}: must be a noise multiplier in (0, inf)", s));
    fixed.push_back({s, 1.0, 1});
  }
  auto blocks = [&](double sigma, double q, int64_t steps) {
    std::vector<privacy::GaussianBlock> b = fixed;
    b.push_back({sigma, q, steps});
    return b;
  };

  privacy::AccountantOptions ao;
  ao.eps_error = o.eps_error;
  if (o.delta_error) {
    if (!(*o.delta_error > 0 && *o.delta_error < *o.delta))
      throw ConfigError(fmt::format("--delta-error {}: must be in (0, delta)", *o.delta_error));
    ao.delta_error = o.delta_error;
  }
  auto acc = privacy::make_accountant(o.accountant, ao);
  nlohmann::json j = {{"accountant", o.accountant}, {"delta", *o.delta}};

  if (o.eps && o.sigma) {  // solve for the missing one of q / steps
    if (o.q && o.steps)
      throw ConfigError(
          "--eps, --sigma, --q and --steps all given: leave out the one to solve for");
    if (!o.q && !o.steps)
      throw ConfigError(
          "with --eps and --sigma, give one of --q or --steps and dpft solves for the other");
    if (!fixed.empty())
      throw ConfigError("--with-gaussian works when solving for sigma or epsilon, not q or steps");
    j["target_epsilon"] = *o.eps;
    j["noise_multiplier"] = *o.sigma;
    if (o.q) {
      int64_t T = privacy::max_steps(*acc, *o.sigma, *o.q, *o.eps, *o.delta);
      j["q"] = *o.q;
      j["max_steps"] = T;
      if (T > 0) add_result(j, acc->epsilon({{*o.sigma, *o.q, T}}, *o.delta));
    } else {
      double q = privacy::max_sampling_rate(*acc, *o.sigma, *o.steps, *o.eps, *o.delta);
      j["steps"] = *o.steps;
      j["max_q"] = q;
      if (q > 0) add_result(j, acc->epsilon({{*o.sigma, q, *o.steps}}, *o.delta));
    }
    return j;
  }
  if (!o.q) throw ConfigError("give the sampling rate: --q Q, or --dataset-size N --batch-size B");
  if (!o.steps) throw ConfigError("give the number of steps: --steps T or --epochs K");
  j["q"] = *o.q;
  j["steps"] = *o.steps;
  if (!fixed.empty()) j["with_gaussian"] = o.with_gaussian;
  if (o.sigma) {
    j["noise_multiplier"] = *o.sigma;
    add_result(j, acc->epsilon(blocks(*o.sigma, *o.q, *o.steps), *o.delta));
  } else if (std::isinf(*o.eps)) {  // no budget: no noise (a calibration would bottom out)
    j["target_epsilon"] = "inf";
    j["noise_multiplier"] = 0.0;
    j["note"] = "epsilon inf: non-private, no noise";
  } else {
    privacy::SigmaCalibration c =
        privacy::calibrate_sigma(*acc, *o.q, *o.steps, *o.eps, *o.delta, o.sigma_tol, fixed);
    j["target_epsilon"] = *o.eps;
    j["noise_multiplier"] = c.sigma;
    j["sigma_rel_tol"] = c.rel_tol;
    add_result(j, c.detail);
  }
  return j;
}

// The flags of a call without --spec (the command line's, and each line of --queries).
void add_flag_options(CLI::App* sub, AccountOpts& o) {
  sub->add_option("--eps", o.eps, "target epsilon (-> noise multiplier)");
  sub->add_option("--sigma", o.sigma, "noise multiplier (-> epsilon)");
  sub->add_option("--delta", o.delta, "delta, in (0, 1)");
  sub->add_option("--q", o.q, "Poisson sampling rate, in (0, 1]");
  sub->add_option("--dataset-size", o.dataset_size,
                  "N, the number of privacy units: examples, or users at privacy.unit user (with "
                  "--batch-size: q = B / N, B in units)");
  sub->add_option("--batch-size", o.batch_size, "expected batch size B");
  sub->add_option("--steps", o.steps, "number of steps T");
  sub->add_option("--epochs", o.epochs, "epochs K (T = ceil(K / q))");
  sub->add_option("--accountant", o.accountant, "prv | rdp | gaussian")->capture_default_str();
  sub->add_option("--eps-error", o.eps_error, "PRV epsilon error")->capture_default_str();
  sub->add_option("--delta-error", o.delta_error, "PRV delta error (default delta/1000)");
  sub->add_option("--sigma-tol", o.sigma_tol, "relative tolerance of the calibrated sigma")
      ->capture_default_str();
  sub->add_option("--with-gaussian", o.with_gaussian,
                  "noise multiplier of one more Gaussian release of sensitivity 1 on the whole "
                  "data, composed with the steps (CTCL's topic histogram: 10); repeatable");
}

// --queries: each line of the file answered in turn, as its own `dpft account LINE` would; a
// failed line is reported with its line number and the rest still answered; the exit status is
// the largest.
int account_queries(const std::string& path, bool as_json) {
  std::ifstream file;
  if (path != "-") {
    file.open(path);
    if (!file) throw InputError("--queries " + path + ": cannot open the file");
  }
  std::istream& in = path == "-" ? std::cin : file;
  int worst = 0, failed = 0, answered = 0, line_no = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++line_no;
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    line = line.substr(first, line.find_last_not_of(" \t\r") + 1 - first);
    ++answered;
    const std::string where = fmt::format("{}:{}", path == "-" ? "stdin" : path, line_no);
    try {
      AccountOpts q;
      CLI::App parser("one query");
      add_flag_options(&parser, q);
      try {
        parser.parse(line, false);
      } catch (const CLI::ParseError& e) {
        throw ConfigError(
            fmt::format("'{}': {} (a line holds the flags of one `dpft account` "
                        "call without --spec, e.g. --sigma 1 --q 0.01 --steps "
                        "1000 --delta 1e-5)",
                        line, e.what()));
      }
      nlohmann::json j = account_flags_json(q);
      if (as_json) {
        j["query"] = line;
        std::cout << j.dump() << "\n";
      } else {
        std::cout << "== " << line << "\n";
        print(j, false);
      }
    } catch (const Error& e) {
      worst = std::max(worst, e.exit_code());
      ++failed;
      if (as_json)
        std::cout << nlohmann::json{{"query", line},
                                    {"line", line_no},
                                    {"error", e.what()},
                                    {"exit_code", e.exit_code()}}
                         .dump()
                  << "\n";
      else
        spdlog::error("{}: {}", where, e.what());
    }
    std::cout.flush();
  }
  if (answered == 0)
    throw InputError(fmt::format(
        "--queries {}: no queries in it (one line per call: the flags of `dpft account` without "
        "--spec, e.g. --sigma 1 --q 0.01 --steps 1000 --delta 1e-5)",
        path));
  if (failed > 0)
    spdlog::warn("account: {} of {} queries failed (exit {}); see their errors above", failed,
                 answered, worst);
  return worst;
}

// `dpft account RUN_DIR`: what a finished or partial run spent, re-accounted from the releases
// its metrics.json ledger records (the accountant and delta it ran with).
int account_run(const std::string& run_dir, bool as_json) {
  const std::filesystem::path metrics = std::filesystem::path(run_dir) / "metrics.json";
  DPFT_CHECK_AS(InputError, std::filesystem::is_regular_file(metrics),
                "dpft account {}: not a dpft run directory (no metrics.json); give a run "
                "directory, or --spec SPEC for what a run would spend",
                run_dir);
  const nlohmann::json m = nlohmann::json::parse(read_file(metrics), nullptr, false);
  DPFT_CHECK_AS(InputError, m.is_object() && m.contains("privacy") && m["privacy"].is_object(),
                "dpft account {}: metrics.json has no privacy ledger", run_dir);
  const privacy::PrivacyLedger ledger = privacy::PrivacyLedger::from_json(m["privacy"]);
  nlohmann::json j = ledger.to_json();
  j["run"] = run_dir;
  j["status"] = m.value("status", "");
  if (m.contains("run") && m["run"].is_object()) j["method"] = m["run"].value("method", "");
  print(j, as_json);
  return 0;
}

// A mode that takes one option (and --json) alone: any other option given is a ConfigError,
// "<option> <why>".
void only_with(const CLI::App& sub, const std::string& mode, const char* why) {
  for (const CLI::Option* opt : sub.get_options())
    if (opt->count() > 0 && opt->get_name() != mode && opt->get_name() != "--json")
      throw ConfigError(fmt::format("{} {}", opt->get_name(), why));
}

}  // namespace

void register_account(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<AccountOpts>();
  CLI::App* sub = app.add_subcommand(
      "account", "privacy accounting: sigma for a target epsilon, or epsilon for a sigma");
  add_flag_options(sub, *o);
  sub->add_option("--spec", o->specs,
                  "print what a run of this spec would spend (N counted from its data; with "
                  "--eps, exit 2 if it exceeds that budget); several specs: each in turn (with "
                  "--json one object per line), exit status the largest");
  sub->add_option("--set", o->sets, "spec override key.path=value (with --spec)")->take_all();
  sub->add_option("--queries", o->queries,
                  "answer many calls in one process: each line of this file (- = stdin) holds "
                  "the flags of one call without --spec; with --json one compact object per "
                  "line, with \"query\"; exit status the largest");
  sub->add_flag("--json", o->json, "one JSON object");
  sub->add_option("run_dir", o->run_dir,
                  "a run directory: what the run spent, from its metrics.json ledger (alone, or "
                  "with --json)");
  sub->callback([o, sub, &ctx] {
    ctx.action = [o, sub] {
      if (!o->run_dir.empty()) {
        only_with(*sub, "run_dir",
                  "conflicts with a run directory: `dpft account RUN_DIR` reports what that run "
                  "spent (give --spec SPEC for a plan, or the flags for a release)");
        return account_run(o->run_dir, o->json);
      }
      if (!o->queries.empty()) {
        only_with(*sub, "--queries",
                  "conflicts with --queries: each line of the file holds all of its query's "
                  "flags (give only --queries FILE and --json)");
        return account_queries(o->queries, o->json);
      }
      if (!o->specs.empty()) return account_specs(*o);
      print(account_flags_json(*o), o->json);
      return 0;
    };
  });
}

}  // namespace dpft
