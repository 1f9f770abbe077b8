// `dpft bench decode`, `bench forward`, `bench generate`: their options; the benchmarks are
// methods/bench/model_bench.hpp.
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/app.hpp"
#include "methods/bench/model_bench.hpp"

namespace dpft {

void register_bench_model(CLI::App* bench, CliContext& ctx) {
  struct Opts {
    std::string arch = "gpt2", preset = "tiny";
    int64_t vocab = 50257, steps = 32, batch = 8, seq = 128;
    int reps = 3;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* dec =
      bench->add_subcommand("decode", "KV-cache decoding speed: flat in position, vs recomputing");
  dec->add_option("--arch", o->arch,
                  "gpt2 | llama | qwen2 | qwen3 | mistral | gemma | gemma2 | phi3")
      ->capture_default_str();
  dec->add_option("--preset", o->preset, "model preset")->capture_default_str();
  dec->add_option("--vocab", o->vocab, "vocabulary size")->capture_default_str();
  dec->add_option("--steps", o->steps, "tokens timed per case")->capture_default_str();
  dec->callback([o, &ctx] {
    ctx.action = [o] { return bench::bench_decode(o->arch, o->preset, o->vocab, o->steps); };
  });
  CLI::App* fwd =
      bench->add_subcommand("forward", "forward throughput of a preset next to the sgemm rate");
  fwd->add_option("--arch", o->arch,
                  "gpt2 | llama | qwen2 | qwen3 | mistral | gemma | gemma2 | phi3")
      ->capture_default_str();
  fwd->add_option("--preset", o->preset, "model preset (try small)")->capture_default_str();
  fwd->add_option("--vocab", o->vocab, "vocabulary size")->capture_default_str();
  fwd->add_option("--batch", o->batch, "sequences per batch")->capture_default_str();
  fwd->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str();
  fwd->add_option("--reps", o->reps, "timed repetitions")->capture_default_str();
  auto g = std::make_shared<bench::GenerateBench>();
  CLI::App* gen = bench->add_subcommand(
      "generate",
      "batched sampling tokens/s with the KV cache vs recomputing (any arch, bart too)");
  gen->add_option("--arch", g->arch,
                  "gpt2 | llama | qwen2 | qwen3 | mistral | gemma | gemma2 | phi3 | bart")
      ->capture_default_str();
  gen->add_option("--preset", g->preset, "model preset (docs/models.md)")->capture_default_str();
  gen->add_option("--vocab", g->vocab, "vocabulary size")->capture_default_str();
  gen->add_option("--batch", g->batch, "prompts decoded together")->capture_default_str();
  gen->add_option("--prompt", g->prompt, "prompt (bart: source) tokens per row")
      ->capture_default_str();
  gen->add_option("--new", g->new_tokens, "tokens generated per row")->capture_default_str();
  gen->add_option("--reps", g->reps, "timed repetitions (medians reported)")->capture_default_str();
  gen->add_option("--device", g->device, "cpu | cuda | cuda:N")->capture_default_str();
  gen->add_flag(
      "--greedy", g->greedy,
      "argmax decoding instead of sampling (no top-p, no penalty): the draw's cost apart");
  gen->add_flag("--json", g->json, "print JSON");
  gen->callback([g, &ctx] { ctx.action = [g] { return bench::bench_generate(*g); }; });
  fwd->callback([o, &ctx] {
    ctx.action = [o] {
      return bench::bench_forward(o->arch, o->preset, o->vocab, o->batch, o->seq, o->reps);
    };
  });
}

}  // namespace dpft
