// The `dpft` command line: a thin CLI11 front end. Each subcommand lives in its own file
// (cli/cmd_*.cpp) and registers itself in cli/commands.cpp; its action runs after parsing and
// after the global options (--log-level, --threads, --quiet) are applied.
// run_cli() never throws: errors map to the exit codes in docs/cli.md.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace dpft {

struct GlobalOptions {
  std::string log_level = "info";
  int threads = 0;       // 0 = LibTorch's default
  bool quiet = false;
};

struct CliContext {
  GlobalOptions global;
  std::function<int()> action;   // set by the chosen subcommand
  std::string command_line;      // argv joined, for manifests
  std::vector<std::string> argv;  // as given (dpft run --nproc restarts the command per rank)
};

using CommandRegistrar = void (*)(CLI::App& app, CliContext& ctx);
const std::vector<CommandRegistrar>& command_registrars();

// Parse argv and run the chosen subcommand; returns the process exit code.
int run_cli(int argc, const char* const* argv);

}  // namespace dpft
