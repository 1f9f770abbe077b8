#include "cli/app.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>
#include <set>

#include "core/util/error.hpp"
#include "core/util/log.hpp"
#include "core/util/progress.hpp"
#include "core/util/system.hpp"
#include "dpft/build_info.hpp"

namespace dpft {

int run_cli(int argc, const char* const* argv) {
  CliContext ctx;
  for (int i = 0; i < argc; ++i) {
    ctx.command_line += (i ? " " : "") + std::string(argv[i]);
    ctx.argv.emplace_back(argv[i]);
  }

  CLI::App app{"dpft: differentially private fine-tuning of language models", "dpft"};
  app.set_version_flag("--version", std::string("dpft ") + build::kVersion);
  app.add_option("--log-level", ctx.global.log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  app.add_option("--threads", ctx.global.threads, "LibTorch intra-op threads (0 = all cores)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("-q,--quiet", ctx.global.quiet, "only warnings and errors on stderr; no progress bars");
  app.require_subcommand(1);
  app.fallthrough();  // global options may also follow the subcommand
  for (auto reg : command_registrars()) reg(app, ctx);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // `dpft frobnicate`: name the word and the commands instead of CLI11's "A subcommand is
    // required".
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names += (names.empty() ? "" : ", ") + sub->get_name();
      known |= argc > 1 && sub->get_name() == argv[1];
    }
    if (argc > 1 && argv[1][0] != '-' && !known) {
      std::cerr << "dpft: error: unknown command '" << argv[1] << "'; commands: " << names
                << " (dpft --help)\n";
      return kExitUsage;
    }
    // Every error in one form: "dpft: error: <what>" and where the flags are described.
    std::cerr << "dpft: error: " << e.what() << " (dpft"
              << (argc > 1 && argv[1][0] != '-' ? std::string(" ") + argv[1] : std::string())
              << " --help)\n";
    return kExitUsage;
  }

  try {
    setup_logging(ctx.global.log_level, ctx.global.quiet);
    set_progress_quiet(ctx.global.quiet);
    // --threads 0: all cores, unless OMP_NUM_THREADS says otherwise (Debian's libgomp may
    // otherwise start LibTorch with a single thread).
    if (ctx.global.threads > 0) set_torch_threads(ctx.global.threads);
    else if (!std::getenv("OMP_NUM_THREADS")) set_torch_threads(default_thread_count());
    warn_if_slow_blas();
    // Long compute only: a busy machine is worth a warning where minutes are at stake.
    static const std::set<std::string> kHeavy = {"run",    "bench",    "generate",       "embed",
                                                 "topics", "eval-nlg", "eval-synthetic", "audit"};
    for (const CLI::App* sub : app.get_subcommands())
      if (kHeavy.count(sub->get_name()) && !(sub->get_name() == "run" && sub->count("--dry-run")))
        warn_if_busy(torch_threads());
    if (!ctx.action) throw ConfigError("no subcommand given; see dpft --help");
    return ctx.action();
  } catch (const Error& e) {
    std::cerr << "dpft: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "dpft: internal error: " << e.what() << "\n";
    return kExitRuntime;
  }
}

}  // namespace dpft
