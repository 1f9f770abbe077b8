// `dpft embed --model DIR --input F --out F.npy|F.jsonl [--column C] [--batch N]
// [--max-length N] [--device D]`: sentence embeddings of every text in F with an encoder
// checkpoint (mean over real tokens, L2-normalised; core/eval/embed.hpp). Not a DP release: the
// output is labelled non-private wherever it is written (docs/outputs.md).
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "cli/app.hpp"
#include "core/eval/embed.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/npy.hpp"
#include "data/table.hpp"

namespace dpft {

void register_embed(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string model, input, out, column = "text", format = "auto", device = "cpu";
    int64_t batch = 32;
    size_t max_length = 0;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "embed", "sentence embeddings of a file's texts with an encoder (BERT / RoBERTa)");
  sub->add_option("--model", o->model, "encoder checkpoint directory (with its tokenizer)")
      ->required();
  sub->add_option("--input", o->input, "texts: .txt (one per line), .csv, .tsv or .jsonl")
      ->required();
  sub->add_option("--out", o->out, "output: .npy (N x d float32) or .jsonl ({index, embedding})")
      ->required();
  sub->add_option("--column", o->column, "text column of a .csv / .tsv / .jsonl input")
      ->capture_default_str();
  sub->add_option("--format", o->format, "input format: auto | csv | tsv | jsonl | text")
      ->capture_default_str();
  sub->add_option("--batch", o->batch, "texts per forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-length", o->max_length,
                  "tokens per text, specials included (0: the model's positions)")
      ->capture_default_str();
  sub->add_option("--device", o->device, "cpu | cuda | cuda:N")->capture_default_str();
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      const fs::path out(o->out);
      const std::string ext = out.extension().string();
      DPFT_CHECK_AS(ConfigError, ext == ".npy" || ext == ".jsonl",
                    "--out {}: use a .npy or .jsonl file name", o->out);
      eval::Embedder em = eval::load_embedder(o->model, o->device, "dpft embed");
      const std::vector<std::string> texts = data::column_texts(o->input, o->column, o->format);
      double secs = 0;
      torch::Tensor e =
          eval::embed_with_progress(em, texts, o->batch, o->max_length, "embed", &secs);
      if (ext == ".npy") {
        write_npy(out, e);
      } else {
        std::string lines;
        for (int64_t i = 0; i < e.size(0); ++i) {
          const torch::Tensor row = e[i].contiguous();
          std::vector<float> v(row.data_ptr<float>(), row.data_ptr<float>() + row.numel());
          lines += nlohmann::json{{"index", i}, {"embedding", v}}.dump() + "\n";
        }
        write_file_atomic(out, lines);
      }
      std::cout << fmt::format(
          "wrote {} ({} texts x {} dims, {:.1f} texts/s; not a DP release: embeddings of "
          "the input as given)\n",
          o->out, e.size(0), e.size(1), secs > 0 ? static_cast<double>(e.size(0)) / secs : 0.0);
      return 0;
    };
  });
}

}  // namespace dpft
