// `dpft select SPEC --grid key=a,b,c [--grid ...] [--metric eval.accuracy|eval.loss]
// [--holdout F] [--mean-trials M] [--eta H] [--score-noise S] [--loss-bound L]
// [--max-epsilon E] [--set k=v] [--out DIR] [--resume] [--dry-run]`: private hyper-parameter
// selection with an accounted total (methods/select/select.hpp).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "methods/select/select.hpp"

namespace dpft {

void register_select(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string spec, metric = "eval.accuracy";
    std::vector<std::string> grid;
    double max_epsilon = 0;
    select::SelectOptions s;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "select",
      "choose hyper-parameters privately: random-search trials, each DP, a random "
      "number of them, only the best released (Papernot & Steinke 2022), one total "
      "epsilon");
  sub->add_option("spec", o->spec, "experiment spec (YAML) of a DP training method")->required();
  sub->add_option("--grid", o->grid,
                  "key=v1,v2,...: values to try (repeatable; candidates are the product)")
      ->required();
  sub->add_option("--metric", o->metric, "the held-out score to maximise (eval.loss: minimise)")
      ->check(CLI::IsMember(enum_names(select::kSelectMetricNames)))
      ->capture_default_str();
  sub->add_option("--holdout", o->s.holdout,
                  "share of the private training rows held out to score the trials")
      ->capture_default_str();
  sub->add_option("--mean-trials", o->s.mean_trials,
                  "expected number of trials E[K] (0: twice the number of candidates)")
      ->capture_default_str();
  sub->add_option("--eta", o->s.eta,
                  "shape of the trials' truncated negative binomial (1: geometric, 0: "
                  "logarithmic)")
      ->capture_default_str();
  sub->add_option("--score-noise", o->s.score_noise,
                  "std of the Gaussian noise on each trial's score sum over the held-out rows "
                  "(each row's score in [0, 1])")
      ->capture_default_str();
  sub->add_option("--loss-bound", o->s.loss_bound,
                  "eval.loss: a row's loss is clipped to [0, L] before it is scored")
      ->capture_default_str();
  sub->add_option("--max-epsilon", o->max_epsilon,
                  "refuse (before any trial) a selection whose total epsilon exceeds this");
  sub->add_option("--set", o->s.sets, "override a spec value: key.path=value (repeatable)")
      ->take_all();
  sub->add_option("--out", o->s.out_dir,
                  "selection directory (new; default <output.dir>/select/<name>-<time>)");
  sub->add_flag("--resume", o->s.resume,
                "continue the selection in --out (same spec, grid and options)");
  sub->add_flag("--dry-run", o->s.dry_run, "print the plan and its total epsilon; run nothing");
  sub->callback([o, sub, &ctx] {
    ctx.action = [o, sub, &ctx] {
      for (const std::string& g : o->grid) o->s.grid.push_back(select::parse_grid(g));
      o->s.metric = enum_value(o->metric, select::kSelectMetricNames, "--metric");
      if (sub->count("--max-epsilon") > 0) o->s.max_epsilon = o->max_epsilon;
      o->s.command_line = ctx.command_line;
      const select::SelectResult r = select::run_select(o->spec, o->s);
      const nlohmann::json& j = r.selection;
      if (o->s.dry_run) {
        std::cout << j["plan"].dump(1) << "\n";
        return 0;
      }
      const auto& w = j["winner"];
      const auto& p = j["privacy"];
      std::cout << "selected:";
      for (const auto& s : w["sets"]) std::cout << " " << s.get<std::string>();
      std::cout << "\nnoisy held-out " << j["metric"].get<std::string>() << " "
                << w["noisy_score"].dump() << " over " << w["held_out_units"] << " held-out "
                << p["unit"].get<std::string>() << "s\n"
                << "total epsilon " << p["epsilon"].dump() << " at delta " << p["delta"].dump()
                << " (" << p["accountant"].get<std::string>()
                << "; one trial alone: " << p["trial_epsilon_rdp"].dump() << ")\n"
                << "the winner's run: " << r.dir << "/" << w["run_dir"].get<std::string>()
                << " (dpft export it; the other trials are not covered)\n"
                << r.dir << "/selection.json\n";
      return 0;
    };
  });
}

}  // namespace dpft
