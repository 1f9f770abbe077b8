// `dpft methods`: the registered fine-tuning methods.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "methods/registry.hpp"

namespace dpft {

void register_methods(CLI::App& app, CliContext& ctx) {
  CLI::App* sub = app.add_subcommand("methods", "list the available methods");
  sub->callback([&ctx] {
    ctx.action = [] {
      for (const auto& m : method_registry()) std::cout << m.name << "\t" << m.summary << "\n";
      return 0;
    };
  });
}

}  // namespace dpft
