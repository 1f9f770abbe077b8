// `dpft eval-synthetic --real F --synthetic F --embedder DIR [...]`: how close a synthetic text
// set is to the real texts, as the CTCL and Aug-PE papers measure it on sentence embeddings:
// MAUVE, FID and k-NN precision / recall (core/eval/distribution.hpp). Both files are embedded
// with the same encoder (core/eval/embed.hpp). An evaluation against the real texts as given,
// not a DP release: the output says so. (The downstream parts of the papers' evaluation, a
// language model or classifier trained on the synthetic texts, are not here yet.)
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/eval/distribution.hpp"
#include "core/eval/embed.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/table.hpp"

namespace dpft {

void register_eval_synthetic(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string real, synthetic, embedder, out, real_column = "text", synthetic_column = "text",
                                                format = "auto", device = "cpu";
    int64_t batch = 32, k = 10, max_real = 0, max_synthetic = 0;
    size_t max_length = 0;
    eval::MauveOptions mauve;
    bool json = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "eval-synthetic",
      "MAUVE, FID and precision / recall of synthetic texts against real ones (embeddings)");
  sub->add_option("--real", o->real, "the real texts: .txt, .csv, .tsv or .jsonl")->required();
  sub->add_option("--synthetic", o->synthetic, "the synthetic texts (e.g. a run's synthetic/*.jsonl)")
      ->required();
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
      ->capture_default_str();
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
  sub->add_flag("--json", o->json, "print JSON");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      auto read = [&](const std::string& path, const std::string& column, int64_t max) {
        std::vector<std::string> t = data::column_texts(path, column, o->format);
        if (max > 0 && static_cast<int64_t>(t.size()) > max) t.resize(static_cast<size_t>(max));
        return t;
      };
      const std::vector<std::string> real = read(o->real, o->real_column, o->max_real),
                                     synth = read(o->synthetic, o->synthetic_column,
                                                  o->max_synthetic);
      DPFT_CHECK_AS(InputError, static_cast<int64_t>(std::min(real.size(), synth.size())) > o->k,
                    "eval-synthetic: {} real and {} synthetic texts; precision / recall with "
                    "--k {} needs more than {} of each",
                    real.size(), synth.size(), o->k, o->k);
      eval::Embedder em = eval::load_embedder(o->embedder, o->device, "dpft eval-synthetic");
      const torch::Tensor er =
          eval::embed_with_progress(em, real, o->batch, o->max_length, "embed real");
      const torch::Tensor es =
          eval::embed_with_progress(em, synth, o->batch, o->max_length, "embed synthetic");
      const eval::MauveResult m = eval::mauve(er, es, o->mauve);
      const eval::PrecisionRecall pr = eval::precision_recall(er, es, o->k);
      const double f = eval::fid(er, es);
      nlohmann::json out = {
          {"real", {{"path", o->real}, {"texts", real.size()}}},
          {"synthetic", {{"path", o->synthetic}, {"texts", synth.size()}}},
          {"embedder", em.identity(o->max_length)},
          {"mauve",
           {{"mauve", m.mauve},
            {"frontier_integral", m.frontier_integral},
            {"buckets", m.buckets},
            {"pca_dims", m.pca_dims},
            {"seed", o->mauve.seed}}},
          {"fid", f},
          {"precision_recall", {{"k", pr.k}, {"precision", pr.precision}, {"recall", pr.recall}}},
          {"note",
           "an evaluation against the real texts as given, not a DP release (docs/outputs.md)"}};
      if (!o->out.empty()) write_file_atomic(o->out, out.dump(2) + "\n");
      if (o->json) {
        std::cout << out.dump(2) << "\n";
        return 0;
      }
      std::cout << fmt::format(
          "{} real, {} synthetic texts (embedder {}):\n  MAUVE {:.4f} (frontier integral "
          "{:.4f}, {} buckets, {} PCA dims)\n  FID {:.4f}\n  precision {:.4f}, recall {:.4f} "
          "(k {})\n(an evaluation against the real texts, not a DP release)\n",
          real.size(), synth.size(), o->embedder, m.mauve, m.frontier_integral, m.buckets,
          m.pca_dims, f, pr.precision, pr.recall, pr.k);
      return 0;
    };
  });
}

}  // namespace dpft
