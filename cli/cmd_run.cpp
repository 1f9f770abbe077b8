// `dpft run SPEC.yaml [--set k=v ...] [--out DIR] [--dry-run [--no-data] [--check-eps E...]]`,
// `dpft run --resume RUN_DIR`
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/app.hpp"
#include "core/config/spec.hpp"
#include "core/dist/world.hpp"
#include "core/run/runner.hpp"
#include "core/util/error.hpp"
#include "core/util/log.hpp"
#include "core/util/progress.hpp"
#include "core/util/system.hpp"
#include "methods/preflight.hpp"
#include "methods/registry.hpp"
#include "methods/run.hpp"

namespace dpft {

namespace {

struct RunCliOptions {
  std::string spec, out, resume;
  std::vector<std::string> sets, check_eps;
  bool dry_run = false, no_data = false;
  int64_t stop_after = 0;
  int nproc = 1;
  double dist_timeout = 0;
};

// --dry-run: the pre-flight (unless --no-data), the resolved spec, and with --check-eps the
// spec at each epsilon, planned on the same private set (one line each; the first refused is
// the error).
int print_dry_run(const RunCliOptions& o, const Spec& given) {
  std::optional<PreflightReport> pf;
  if (!o.no_data) pf = preflight(given);
  const Spec& spec = pf ? pf->resolved : given;
  std::cout << spec_to_yaml_string(spec);
  if (pf)
    for (const std::string& line : pf->lines) std::cout << "# pre-flight: " << line << "\n";
  std::cout << "# dry run: method " << spec.method.name << ", config hash " << config_hash(spec)
            << "; nothing written" << std::endl;
  for (const std::string& e : o.check_eps) {
    std::vector<std::string> sets{"privacy.epsilon=" + e};
    sets.insert(sets.end(), o.sets.begin(), o.sets.end());
    try {
      Spec at = load_spec(o.spec, sets);
      check_executable(at);
      if (pf) at = plan_as_counted(at, *pf);
      std::cout << "# dry run at privacy.epsilon=" << e << ": method " << at.method.name
                << ", config hash " << config_hash(at) << std::endl;
    } catch (const Error& err) {
      throw Error(err.exit_code(),
                  "the spec does not accept privacy.epsilon=" + e + ": " + err.what());
    }
  }
  return 0;
}

// --nproc N: this process starts N ranks of the same command line (without --nproc), waits.
int launch_ranks(const RunCliOptions& o, const CliContext& ctx) {
  std::vector<std::string> args;
  for (size_t i = 0; i < ctx.argv.size(); ++i) {
    const std::string& a = ctx.argv[i];
    if (a == "--nproc") {
      ++i;
      continue;
    }
    if (a.rfind("--nproc=", 0) == 0) continue;
    args.push_back(a);
  }
  const double timeout = o.dist_timeout > 0 ? o.dist_timeout : dist::options_from_env().timeout_s;
  return dist::launch_local(o.nproc, args, timeout);
}

}  // namespace

void register_run(CLI::App& app, CliContext& ctx) {
  auto o = std::make_shared<RunCliOptions>();
  CLI::App* sub = app.add_subcommand("run", "run an experiment spec");
  sub->add_option("spec", o->spec, "experiment spec (YAML)");
  sub->add_option("--resume", o->resume,
                  "continue the run in this directory from its last checkpoint (its "
                  "config.resolved.yaml is the spec)");
  sub->add_option("--set", o->sets, "override a spec value: key.path=value (repeatable)")
      ->take_all();
  sub->add_option("--out", o->out, "output root (overrides output.dir)");
  sub->add_option("--stop-after", o->stop_after,
                  "stop after this many steps (writing a checkpoint; continue with --resume), e.g. "
                  "for time-limited jobs")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--dry-run", o->dry_run,
                "validate, run the pre-flight (open the model directory and every data file, "
                "count N, plan the releases) and print the resolved spec; write nothing");
  sub->add_flag("--no-data", o->no_data,
                "with --dry-run: check the spec alone (no model directory or data file read)");
  sub->add_option("--check-eps", o->check_eps,
                  "with --dry-run: also validate the spec at each of these privacy.epsilon "
                  "values, set before the --set overrides (as scripts/sweep.sh runs it), one "
                  "line each; the first value refused is the error (one process, not one per "
                  "value)")
      ->expected(1, -1);
  sub->add_option("--nproc", o->nproc,
                  "data parallel: run N processes (ranks) on this machine, each on a shard of "
                  "every batch (same results as one; docs/training.md, \"Data parallel\"). "
                  "torchrun and srun launches need no option")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--dist-timeout", o->dist_timeout,
                  "data parallel: seconds any rank waits for the others (rendezvous and each "
                  "collective) before the run fails; default 1800 (or DPFT_DIST_TIMEOUT)")
      ->check(CLI::Range(1.0, 604800.0));
  sub->callback([o, &ctx] {
    ctx.action = [o, &ctx] {
      if (!o->resume.empty()) {
        if (!o->spec.empty() || !o->sets.empty())
          throw ConfigError(
              "--resume takes the run's own config.resolved.yaml; give no spec and no --set");
        o->spec = (std::filesystem::path(o->resume) / "config.resolved.yaml").string();
        if (!std::filesystem::exists(o->spec))
          throw InputError(o->resume + " is not a dpft run directory (no config.resolved.yaml)");
      } else if (o->spec.empty()) {
        throw ConfigError("dpft run: give a spec file (dpft run SPEC.yaml) or --resume RUN_DIR");
      }
      Spec spec = load_spec(o->spec, o->sets);
      if (o->resume.empty())
        check_executable(spec);
      else
        spec = resumable_here(spec);
      if (!o->check_eps.empty() && (!o->dry_run || !o->resume.empty()))
        throw ConfigError(
            "--check-eps checks a spec without running it: give it with --dry-run "
            "and a spec file (not --resume)");
      if (o->no_data && !o->dry_run)
        throw ConfigError("--no-data skips the pre-flight of --dry-run: give it with --dry-run");
      if (o->dry_run) return print_dry_run(*o, spec);
      if (o->nproc > 1) return launch_ranks(*o, ctx);  // the parent: start the ranks, wait
      dist::WorldOptions w = dist::options_from_env();
      if (o->dist_timeout > 0) w.timeout_s = o->dist_timeout;
      dist::init(w);
      if (dist::active()) {
        set_rank_logging(dist::rank());
        if (!dist::is_root()) set_progress_quiet(true);
        // --threads 0 with several ranks on one machine: share its cores between them.
        if (ctx.global.threads == 0 && !std::getenv("OMP_NUM_THREADS") && w.local_size > 1)
          set_torch_threads(std::max(1, default_thread_count() / w.local_size));
      }
      RunOptions ro;
      ro.out_dir = o->out;
      ro.command_line = ctx.command_line;
      ro.resume_dir = o->resume;
      ro.stop_after = o->stop_after;
      RunResult r = run_method(spec, ro);
      if (dist::is_root()) std::cout << r.run_dir << "\n";
      return r.exit_code;
    };
  });
}

}  // namespace dpft
