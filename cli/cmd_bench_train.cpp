// `dpft bench train`: its options and printing; the benchmark is methods/bench/train_bench.hpp.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "cli/app.hpp"
#include "methods/bench/bench_common.hpp"
#include "methods/bench/train_bench.hpp"

namespace dpft {

void register_bench_train(CLI::App* bench, CliContext& ctx) {
  auto o = std::make_shared<bench::TrainBench>();
  CLI::App* s = bench->add_subcommand(
      "train", "DP-SGD step time and memory vs a non-private step (one process)");
  s->add_option("--arch", o->arch,
                "gpt2 | llama | qwen2 | qwen3 | mistral | gemma | gemma2 | phi3 | bert | roberta | "
                "bart (encoders: a 2-class classifier, "
                "LoRA trains the head too; bart: --seq source and --seq target tokens)")
      ->capture_default_str();
  s->add_option("--preset", o->preset, "model preset (docs/models.md)")->capture_default_str();
  s->add_option("--vocab", o->vocab, "vocabulary size")->capture_default_str();
  s->add_option("--batch", o->batch, "sequences per logical batch")->capture_default_str();
  s->add_option("--seq", o->seq, "tokens per sequence")->capture_default_str();
  s->add_option("--micro", o->micro, "physical micro-batch (0 = the whole batch)")
      ->capture_default_str();
  s->add_option("--peft", o->peft, "lora | full")->capture_default_str();
  s->add_option("--r", o->r, "LoRA rank")->capture_default_str();
  s->add_option(
      "--targets", o->targets,
      "modules to train (default: the family's targets: auto, docs/models.md; all for full)");
  s->add_option("--grad-mode", o->grad_mode, "per-sample norms: auto | materialize | ghost")
      ->capture_default_str();
  s->add_option("--reps", o->reps, "timed repetitions of each step (medians reported)")
      ->capture_default_str();
  s->add_option("--dtype", o->dtype, "model dtype, as model.dtype (sums and noise stay float32)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  s->add_option("--device", o->device, "cpu | cuda | cuda:N (peak RSS is host memory only)")
      ->capture_default_str();
  s->add_option("--noise-draw", o->noise_draw,
                "where the noise is drawn, as privacy.noise_draw: auto (the GPU for cuda) | host "
                "| device")
      ->check(CLI::IsMember({"auto", "host", "device"}))
      ->capture_default_str();
  s->add_option("--noise-mode", o->noise_mode, kBenchNoiseModeHelp)
      ->check(CLI::IsMember({"keyed", "seeded", "os"}))
      ->capture_default_str();
  s->add_option("--only", o->only, "internal: run one kind (np | dp) and print its peak RSS");
  s->add_flag("--json", o->json, "print JSON");
  s->add_flag("--denoise", o->denoise,
              "also time method denoise's post-processing of each DP step's gradient (naive "
              "per-matrix SVD, batched SVD, randomized top-k SVD) as a share of the step");
  s->add_option("--dp-sft", o->dp_sft_k,
                "also time a DP-SFT stage-2 step (P^T g_i clipped in R^k, noise, P g) on a "
                "random orthonormal P with this many columns, and building P (trajectory rows, "
                "Gram-route SVD); 0 = off")
      ->capture_default_str();
  s->add_option("--unit-rows", o->unit_rows,
                "also time a user-level DP-SGD step (privacy.unit user) on the same rows as "
                "users of this many rows each; 0 = off")
      ->capture_default_str();
  s->add_flag("--per-layer", o->per_layer,
              "also time the DP-SGD step with privacy.clipping_style per_layer (each trainable "
              "parameter clipped on its own), interleaved with the flat one");
  s->add_option("--dp-sft-storage", o->dp_sft_storage, "P's storage with --dp-sft")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  s->callback([o, &ctx] {
    ctx.action = [o] {
      const nlohmann::json out = bench::train_bench(*o);
      if (!o->only.empty())
        std::cout << out.dump() << "\n";  // for the parent's run_child
      else
        std::cout << (o->json ? out.dump(2) + "\n" : bench::train_bench_text(*o, out));
      return 0;
    };
  });
}

}  // namespace dpft
