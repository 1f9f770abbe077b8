// `dpft audit SPEC --canaries M [--confidence 0.95] [--guesses K] [--score loss|gradient]
// [--canary-tokens L] [--canary-rows R] [--set k=v]
// [--out DIR]`: the one-run empirical privacy audit (methods/audit/one_run_audit.hpp).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/config/spec.hpp"
#include "core/run/runner.hpp"
#include "core/util/error.hpp"
#include "methods/audit/one_run_audit.hpp"
#include "methods/registry.hpp"

namespace dpft {

void register_audit(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string spec;
    std::vector<std::string> sets;
    audit::AuditOptions a;
    std::string score = "loss";
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "audit", "empirical epsilon lower bound from one training run with canaries (Steinke, "
               "Nasr, Jagielski 2023)");
  sub->add_option("spec", o->spec, "experiment spec (YAML) of a training method")->required();
  sub->add_option("--canaries", o->a.canaries, "number of canaries m, each included w.p. 1/2")
      ->capture_default_str();
  sub->add_option("--confidence", o->a.confidence, "confidence of the lower bound")
      ->capture_default_str();
  sub->add_option("--guesses", o->a.guesses,
                  "guess 'included' for the K highest and 'excluded' for the K lowest scores; "
                  "0: best over a fixed grid of K, Bonferroni-corrected")
      ->capture_default_str();
  sub->add_option("--score", o->score,
                  "loss: base loss - final loss (black-box); gradient: alignment of the released "
                  "parameters' change with each canary's gradient at the start (white-box)")
      ->check(CLI::IsMember(enum_names(audit::kAuditScoreNames)))
      ->capture_default_str();
  sub->add_option("--canary-tokens", o->a.canary_tokens,
                  "random tokens per canary (0: min(32, data.max_length / 2))")
      ->capture_default_str();
  sub->add_option("--canary-rows", o->a.canary_rows,
                  "rows of one canary user at privacy.unit user (0: min(4, "
                  "privacy.max_examples_per_user)); 1 otherwise")
      ->capture_default_str();
  sub->add_option("--canary-file", o->a.canary_file,
                  "public texts to use as canaries (column text), none in the private data; "
                  "default: random texts (pe / aug-pe: texts of the run's own initial population)");
  sub->add_option("--set", o->sets, "override a spec value: key.path=value (repeatable)")
      ->take_all();
  sub->add_option("--out", o->a.out_dir,
                  "audit directory (new; default <output.dir>/audit/<name>-<time>-s<seed>)");
  sub->callback([o, &ctx] {
    ctx.action = [o, &ctx] {
      Spec spec = load_spec(o->spec, o->sets);
      check_executable(spec);
      o->a.command_line = ctx.command_line;
      o->a.score = enum_value(o->score, audit::kAuditScoreNames, "--score");
      audit::AuditResult r = audit::run_audit(spec, o->a);
      const auto& j = r.report;
      std::cout << "audit of " << j["method"].get<std::string>() << " ("
                << j["spec"].get<std::string>() << ", seed " << j["seed"] << "): " << j["canaries"]
                << " canaries, " << j["included"] << " included, " << j["score"].get<std::string>()
                << " score\n";
      for (const auto& t : j["tests"])
        std::cout << "  k+ = k- = " << t["k_plus"] << ": " << t["correct"] << " of "
                  << t["guesses"] << " guesses right, epsilon >= " << t["eps_lower_bound"] << "\n";
      std::cout << "epsilon lower bound " << j["eps_lower_bound"] << " at confidence "
                << j["confidence"] << " (delta " << j["delta"] << ", Bonferroni over "
                << j["bonferroni"] << " tests); the run reports epsilon "
                << j["reported_epsilon"].dump() << "\n"
                << r.dir << "/audit.json\n";
      if (r.violation)
        throw RuntimeError(fmt::format(
            "audit: the empirical lower bound {} exceeds the epsilon the run reports ({}): "
            "either a 1 - {} chance event or a privacy bug; report it with {}",
            j["eps_lower_bound"].dump(), j["reported_epsilon"].dump(), j["confidence"].dump(),
            r.dir));
      return 0;
    };
  });
}

}  // namespace dpft
