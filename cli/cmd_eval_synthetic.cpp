// `dpft eval-synthetic --real F --synthetic F --embedder DIR [...]` (or `--run RUN`): the
// command line of methods/synthetic_eval (the evaluation: MAUVE, FID, precision / recall, and
// with --lm / --classify the downstream models), its options and its printout. Not a DP
// release: an evaluation against the real texts as given.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/util/error.hpp"
#include "methods/synthetic_eval/synthetic_eval.hpp"

namespace dpft {

namespace {

// --lm and --classify: the downstream models' options.
void add_downstream_options(CLI::App* sub, EvalSyntheticOptions* o) {
  sub->add_flag("--lm", o->lm.on,
                "also train a causal BERT language model from scratch on the synthetic texts and "
                "report its next-token accuracy and perplexity on the real ones");
  sub->add_option("--lm-tokenizer", o->lm.tokenizer, "--lm: BERT WordPiece vocabulary directory");
  sub->add_option("--lm-preset", o->lm.preset, "--lm: BERT shape (tiny | mini | small | bert-base)")
      ->capture_default_str();
  sub->add_option("--lm-steps", o->lm.steps, "--lm: optimizer steps")->capture_default_str();
  sub->add_option("--lm-batch", o->lm.batch, "--lm: batch size")->capture_default_str();
  sub->add_option("--lm-micro", o->lm.micro, "--lm: micro-batch (memory)")->capture_default_str();
  sub->add_option("--lm-lr", o->lm.lr, "--lm: peak learning rate (linear decay to 0)")
      ->capture_default_str();
  sub->add_option("--lm-max-length", o->lm.max_length, "--lm: tokens per text")
      ->capture_default_str();
  sub->add_option("--lm-seed", o->lm.seed, "--lm: initialisation and data-order seed")
      ->capture_default_str();
  sub->add_flag("--classify", o->clf.on,
                "also fine-tune a classifier on the labelled synthetic texts and report its "
                "accuracy on the labelled real ones");
  sub->add_option("--classifier-from", o->clf.from,
                  "--classify: pretrained encoder checkpoint (bert / roberta) given a new "
                  "classification head");
  sub->add_option("--label-column", o->clf.label_column, "--classify: label column of both files")
      ->capture_default_str();
  sub->add_option("--labels", o->clf.labels,
                  "--classify: the label values in class-id order (never read from the files)")
      ->delimiter(',');
  sub->add_option("--clf-peft", o->clf.peft, "--classify: full | lora (query, value + the head)")
      ->check(CLI::IsMember({"full", "lora"}))
      ->capture_default_str();
  sub->add_option("--clf-steps", o->clf.steps, "--classify: optimizer steps")
      ->capture_default_str();
  sub->add_option("--clf-batch", o->clf.batch, "--classify: batch size")->capture_default_str();
  sub->add_option("--clf-micro", o->clf.micro, "--classify: micro-batch (memory)")
      ->capture_default_str();
  sub->add_option("--clf-lr", o->clf.lr, "--classify: peak learning rate (linear decay to 0)")
      ->capture_default_str();
  sub->add_option("--clf-max-length", o->clf.max_length, "--classify: tokens per text")
      ->capture_default_str();
  sub->add_option("--clf-seed", o->clf.seed, "--classify: head initialisation and data seed")
      ->capture_default_str();
}

void print_result(const nlohmann::json& out, const EvalSyntheticOptions& o) {
  const nlohmann::json& mv = out["mauve"];
  std::cout << fmt::format(
      "{} real, {} synthetic texts (embedder {}):\n  MAUVE {:.4f} (frontier integral "
      "{:.4f}, {} buckets, {} PCA dims)\n  FID {:.4f}\n  precision {:.4f}, recall {:.4f} "
      "(k {})\n(an evaluation against the real texts, not a DP release)\n",
      out["real"]["texts"].get<int64_t>(), out["synthetic"]["texts"].get<int64_t>(), o.embedder,
      mv["mauve"].get<double>(), mv["frontier_integral"].get<double>(),
      mv["buckets"].get<int64_t>(), mv["pca_dims"].get<int64_t>(), out["fid"].get<double>(),
      out["precision_recall"]["precision"].get<double>(),
      out["precision_recall"]["recall"].get<double>(), out["precision_recall"]["k"].get<int64_t>());
  if (out.contains("downstream_lm")) {
    const nlohmann::json& lm = out["downstream_lm"];
    std::cout << fmt::format(
        "  downstream LM ({}, {} steps): next-token accuracy {:.4f}, perplexity {:.2f} on "
        "the real texts\n",
        lm["model"].get<std::string>(), o.lm.steps, lm["next_token_accuracy"].get<double>(),
        lm["perplexity"].get<double>());
  }
  if (out.contains("downstream_classifier"))
    std::cout << fmt::format(
        "  downstream classifier ({}, {} steps): accuracy {:.4f} on the real texts\n", o.clf.from,
        o.clf.steps, out["downstream_classifier"]["accuracy"].get<double>());
}

}  // namespace

void register_eval_synthetic(CLI::App& app, CliContext& ctx) {
  using Options = EvalSyntheticOptions;
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "eval-synthetic",
      "MAUVE, FID and precision / recall of synthetic texts against real ones (embeddings)");
  sub->add_option("--real", o->real, "the real texts: .txt, .csv, .tsv or .jsonl")->required();
  auto* syn_opt = sub->add_option("--synthetic", o->synthetic,
                                  "the synthetic texts (e.g. a run's synthetic/*.jsonl)");
  sub->add_option("--run", o->run,
                  "a finished run directory: evaluate its synthetic/synthetic.jsonl and record "
                  "the result in its metrics.json (`synthetic_eval.<--name>`), where "
                  "`dpft report --table ctcl-*` reads it")
      ->excludes(syn_opt);
  auto* name_opt =
      sub->add_option("--name", o->name,
                      "--run: the key under metrics.json's synthetic_eval (default: main, or "
                      "n<N> with --subset N)");
  sub->add_option("--subset", o->subset,
                  "--run: evaluate synthetic/synthetic_n<N>.jsonl, the N-document subset a ctcl "
                  "run's method.generation.subsets wrote (Fig. 3's scaling in N_syn)")
      ->check(CLI::PositiveNumber);
  sub->add_flag("--keep-work", o->keep_work,
                "--run: keep the downstream models and runs (default: removed once read)");
  sub->add_option("--embedder", o->embedder, "encoder checkpoint (BERT / RoBERTa) for both")
      ->required();
  sub->add_option("--real-column", o->real_column, "text column of --real")->capture_default_str();
  sub->add_option("--synthetic-column", o->synthetic_column, "text column of --synthetic")
      ->capture_default_str();
  sub->add_option("--format", o->format, "input format of both: auto | csv | tsv | jsonl | text")
      ->capture_default_str();
  sub->add_option("--max-real", o->max_real, "use the first N real texts (0: all)")
      ->capture_default_str();
  sub->add_option("--max-synthetic", o->max_synthetic, "use the first N synthetic texts (0: all)")
      ->capture_default_str();
  sub->add_option("--k", o->k, "neighbours of precision / recall")->capture_default_str();
  sub->add_option("--buckets", o->mauve.buckets,
                  "MAUVE's k-means clusters (0: max(2, min(n_real, n_synthetic) / 10))")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--seed", o->mauve.seed, "MAUVE's seed (k-means uses seed + 2)")
      ->capture_default_str();
  sub->add_option("--batch", o->batch, "texts per forward of the embedder")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-length", o->max_length, "tokens per text (0: the embedder's positions)")
      ->capture_default_str();
  sub->add_option("--device", o->device, "cpu | cuda | cuda:N (the embedder's)")
      ->capture_default_str();
  sub->add_option("--out", o->out, "also write the JSON here");
  add_downstream_options(sub, o.get());
  sub->add_option("--work", o->work,
                  "--lm / --classify: directory for their models and runs (default: --out's "
                  "path with .work appended, or eval-synthetic.work)");
  sub->add_flag("--json", o->json, "print JSON");
  sub->callback([o, &ctx, name_opt] {
    const bool name_given = name_opt->count() > 0;
    ctx.action = [o, name_given] {
      const nlohmann::json out = evaluate_synthetic(*o, name_given);
      if (o->json) {
        std::cout << out.dump(2) << "\n";
        return 0;
      }
      print_result(out, *o);
      return 0;
    };
  });
}

}  // namespace dpft
