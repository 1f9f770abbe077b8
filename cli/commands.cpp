// The explicit list of subcommands. Adding one = a cli/cmd_X.cpp file + a line here.
#include <CLI/CLI.hpp>

#include "cli/app.hpp"

namespace dpft {

void register_run(CLI::App&, CliContext&);
void register_config(CLI::App&, CliContext&);
void register_version(CLI::App&, CliContext&);
void register_methods(CLI::App&, CliContext&);
void register_account(CLI::App&, CliContext&);
void register_bench(CLI::App&, CliContext&);
void register_tokenize(CLI::App&, CliContext&);
void register_model(CLI::App&, CliContext&);
void register_generate(CLI::App&, CliContext&);
void register_report(CLI::App&, CliContext&);
void register_export(CLI::App&, CliContext&);
void register_audit(CLI::App&, CliContext&);
void register_select(CLI::App&, CliContext&);
void register_embed(CLI::App&, CliContext&);
void register_eval(CLI::App&, CliContext&);
void register_eval_nlg(CLI::App&, CliContext&);
void register_eval_synthetic(CLI::App&, CliContext&);
void register_topics(CLI::App&, CliContext&);

const std::vector<CommandRegistrar>& command_registrars() {
  static const std::vector<CommandRegistrar> list = {
      register_run,      register_config, register_version,  register_methods,
      register_account,  register_bench,  register_tokenize, register_model,
      register_generate, register_report, register_export,   register_audit,
      register_select,   register_embed,  register_eval, register_eval_nlg, register_eval_synthetic,
      register_topics};
  return list;
}

}  // namespace dpft
