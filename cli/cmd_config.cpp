// `dpft config validate SPEC... [--set ...] [--no-data]` (with each spec's pre-flight and privacy
// verdict),
// `dpft config dump [SPEC] [--set ...]` and `dpft config privacy-options [--markdown]`
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/config/privacy_options.hpp"
#include "core/config/spec.hpp"
#include "core/run/runner.hpp"
#include "core/util/error.hpp"
#include "methods/preflight.hpp"
#include "methods/registry.hpp"

namespace dpft {

void register_config(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string spec;
    std::vector<std::string> specs, sets;
    bool no_data = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cfg = app.add_subcommand("config", "check or print experiment specs");
  cfg->require_subcommand(1);

  CLI::App* validate =
      cfg->add_subcommand("validate", "parse and validate specs; exit 0 if every one is valid");
  validate
      ->add_option("spec", o->specs,
                   "experiment specs (YAML); each is reported (`ok: SPEC ...` or an error "
                   "naming it) and the exit status is the largest")
      ->required();
  validate->add_option("--set", o->sets, "override: key.path=value (repeatable)")->take_all();
  validate->add_flag("--no-data", o->no_data,
                     "check the specs alone: skip the pre-flight that opens each one's model "
                     "directory and data files, counts N and plans the releases");
  validate->callback([o, &ctx] {
    ctx.action = [o] {
      int worst = 0;
      for (const std::string& f : o->specs) {
        try {
          Spec s = load_spec(f, o->sets);
          try {
            check_executable(s);
          } catch (const ConfigError& e) {  // valid, but `dpft run` will refuse it on this build
            spdlog::warn("{}", e.what());
          }
          std::vector<std::string> checked;
          if (!o->no_data) {
            PreflightReport pf = preflight(s);
            s = pf.resolved;
            checked = pf.lines;
          }
          std::cout << "ok: " << f << " (method " << s.method.name << ", config hash "
                    << config_hash(s) << ")" << std::endl;  // whole lines beside stderr's
          for (const std::string& line : checked) std::cout << "  pre-flight: " << line << "\n";
          for (const std::string& line : privacy_verdict(s)) std::cout << line << std::endl;
        } catch (const Error& e) {
          if (o->specs.size() == 1) throw;  // one spec: the usual error and exit status
          worst = std::max(worst, e.exit_code());
          spdlog::error("{}: {}", f, e.what());
        }
      }
      return worst;
    };
  });

  CLI::App* popts =
      cfg->add_subcommand("privacy-options",
                          "list every spec option that touches the privacy guarantee and its "
                          "effect (safe | non-private | changes-unit | releases)");
  auto markdown = std::make_shared<bool>(false);
  popts->add_flag("--markdown", *markdown, "print the table as Markdown (docs/privacy.md's copy)");
  popts->callback([markdown, &ctx] {
    ctx.action = [markdown] {
      if (*markdown) {
        std::cout << privacy_options_markdown();
        return 0;
      }
      for (const PrivacyOption& p : privacy_options())
        std::cout << p.key << ": " << p.setting << " -> " << name_of(p.effect) << ": " << p.why
                  << (*p.fix ? std::string("; ") + p.fix : std::string()) << "\n";
      return 0;
    };
  });

  CLI::App* dump =
      cfg->add_subcommand("dump", "print the fully resolved spec (defaults < file < --set)");
  dump->add_option("spec", o->spec, "experiment spec (YAML); omitted = defaults only");
  dump->add_option("--set", o->sets, "override: key.path=value (repeatable)")->take_all();
  dump->callback([o, &ctx] {
    ctx.action = [o] {
      std::cout << spec_to_yaml_string(load_spec(o->spec, o->sets));
      return 0;
    };
  });
}

}  // namespace dpft
