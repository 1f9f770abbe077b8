// `dpft bench accountant [--reps N] [--json]`: times the accountants in-process (median of
// N repetitions) on the cases docs/BENCHMARKS.md tracks.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>

#include "cli/app.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/util/system.hpp"

namespace dpft {

namespace {

double median_ms(int reps, const std::function<double()>& f, double* value) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    *value = f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int bench_accountant(int reps, bool json) {
  using namespace privacy;
  auto prv = make_accountant("prv");
  auto rdp = make_accountant("rdp");
  struct Case {
    std::string name;
    std::function<double()> run;
  };
  std::vector<Case> cases = {
      {"prv eps: sigma 1.0, q 0.01, T 1000, delta 1e-5", [&] { return prv->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon; }},
      {"prv eps: sigma 1.1, q 0.2, T 1000, delta 1e-5", [&] { return prv->epsilon({{1.1, 0.2, 1000}}, 1e-5).epsilon; }},
      {"prv calibrate: eps 1, delta 1e-5, q 0.2, T 10 (PE-SGD default)",
       [&] { return calibrate_sigma(*prv, 0.2, 10, 1.0, 1e-5).sigma; }},
      {"prv eps: sigma 1.1, q 0.01, T 100000, delta 1e-5",
       [&] { return prv->epsilon({{1.1, 0.01, 100000}}, 1e-5).epsilon; }},
      {"rdp eps: sigma 1.0, q 0.01, T 1000, delta 1e-5", [&] { return rdp->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon; }},
      {"rdp calibrate: eps 1, delta 1e-5, q 0.2, T 10", [&] { return calibrate_sigma(*rdp, 0.2, 10, 1.0, 1e-5).sigma; }},
  };
  nlohmann::json out = {{"threads", torch_threads()}, {"reps", reps}, {"host", host_name()}, {"cases", nlohmann::json::array()}};
  for (auto& c : cases) {
    double value = 0;
    double ms = median_ms(reps, c.run, &value);
    out["cases"].push_back({{"case", c.name}, {"median_ms", ms}, {"value", value}});
    if (!json) std::cout << fmt::format("{:<66} {:>10.1f} ms   (value {:.6g})\n", c.name, ms, value);
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

void register_bench(CLI::App& app, CliContext& ctx) {
  auto reps = std::make_shared<int>(5);
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("bench", "benchmarks (results belong in docs/BENCHMARKS.md)");
  sub->require_subcommand(1);
  CLI::App* acc = sub->add_subcommand("accountant", "time PRV/RDP epsilon and sigma calibration");
  acc->add_option("--reps", *reps, "repetitions (median reported)")->check(CLI::PositiveNumber)->capture_default_str();
  acc->add_flag("--json", *json, "one JSON object");
  acc->callback([reps, json, &ctx] { ctx.action = [reps, json] { return bench_accountant(*reps, *json); }; });
}

}  // namespace dpft
