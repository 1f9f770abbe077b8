// `dpft bench pe-sgd`: its options and printing; the benchmark is methods/bench/pe_bench.hpp.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "cli/app.hpp"
#include "methods/bench/bench_common.hpp"
#include "methods/bench/pe_bench.hpp"

namespace dpft {

void register_bench_pe(CLI::App* bench, CliContext& ctx) {
  auto o = std::make_shared<bench::PeBench>();
  CLI::App* s = bench->add_subcommand(
      "pe-sgd",
      "PE-SGD step time and memory vs DP-SGD (generation excluded), generation throughput");
  s->add_option("--model", o->model, "HF checkpoint dir (default: the embedded model)");
  s->add_option("--targets", o->targets, "LoRA target modules")->capture_default_str();
  s->add_option("--r", o->r, "LoRA rank")->capture_default_str();
  s->add_option("--batch", o->batch, "private batch size M~")->capture_default_str();
  s->add_option("--synthetic", o->synthetic, "synthetic set size N")->capture_default_str();
  s->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str();
  s->add_option("--micro", o->micro, "physical micro-batch")->capture_default_str();
  s->add_option("--gen", o->gen, "RANDOM_API samples (then one variation each)")
      ->capture_default_str();
  s->add_option("--gen-tokens", o->gen_tokens, "max new tokens per sample")->capture_default_str();
  s->add_option("--prompts", o->prompts, "prompt file")->capture_default_str();
  s->add_option("--reps", o->reps, "timed repetitions (medians)")->capture_default_str();
  s->add_option("--noise-mode", o->noise_mode, kBenchNoiseModeHelp)
      ->check(CLI::IsMember({"keyed", "seeded", "os"}))
      ->capture_default_str();
  s->add_option("--only", o->only, "internal: run one kind (dp | pe) and print its peak RSS");
  s->add_flag("--json", o->json, "print JSON");
  s->callback([o, &ctx] {
    ctx.action = [o] {
      const nlohmann::json out = bench::pe_bench(*o);
      if (!o->only.empty())
        std::cout << out.dump() << "\n";  // for the parent's run_child
      else
        std::cout << (o->json ? out.dump(2) + "\n" : bench::pe_bench_text(*o, out));
      return 0;
    };
  });
}

}  // namespace dpft
