// `dpft bench`: the subcommands; `bench accountant`, `bench tokenizer`, `bench data` are
// methods/bench/io_bench.hpp, the others are registered from their own files.
#include <CLI/CLI.hpp>

#include <memory>

#include "cli/app.hpp"
#include "core/tokenizer/load.hpp"
#include "methods/bench/io_bench.hpp"

namespace dpft {

void register_bench_model(CLI::App* bench, CliContext& ctx);  // cli/cmd_bench_model.cpp
void register_bench_train(CLI::App* bench, CliContext& ctx);  // cli/cmd_bench_train.cpp
void register_bench_pe(CLI::App* bench, CliContext& ctx);     // cli/cmd_bench_pe.cpp

void register_bench(CLI::App& app, CliContext& ctx) {
  auto reps = std::make_shared<int>(5);
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("bench", "benchmarks (results belong in docs/BENCHMARKS.md)");
  sub->require_subcommand(1);
  CLI::App* acc = sub->add_subcommand("accountant", "time PRV/RDP epsilon and sigma calibration");
  acc->add_option("--reps", *reps, "repetitions (median reported)")->check(CLI::PositiveNumber)->capture_default_str();
  acc->add_flag("--json", *json, "one JSON object");
  acc->callback([reps, json, &ctx] {
    ctx.action = [reps, json] { return bench::bench_accountant(*reps, *json); };
  });

  auto tb = std::make_shared<bench::TokenizerBench>();
  CLI::App* tk =
      sub->add_subcommand("tokenizer", "encode throughput of a tokenizer (MB/s, tokens/s)");
  tk->add_option("--tokenizer", tb->tokenizer, "tokenizer directory or file")->required();
  tk->add_option("--file", tb->files, "text file(s) to encode (repeatable)")
      ->required()
      ->check(CLI::ExistingFile);
  tk->add_option("--mb", tb->mb, "megabytes of text to encode")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  tk->add_option("--tiktoken-family", tb->family, "family of a tiktoken file (default: detected)")
      ->check(CLI::IsMember(tok::kTiktokenFamilies));
  tk->add_flag("--json", tb->json, "one JSON object");
  tk->callback([tb, &ctx] { ctx.action = [tb] { return bench::bench_tokenizer(*tb); }; });

  auto db = std::make_shared<bench::DataBench>();
  CLI::App* dt = sub->add_subcommand(
      "data", "read_table throughput on a large file and its UTF-8 validation share");
  dt->add_option("--file", db->file, "data file whose rows are repeated (header once)")
      ->required()
      ->check(CLI::ExistingFile);
  dt->add_option("--mb", db->mb,
                 "megabytes of data to read (built in memory, written to a temporary file)")
      ->check(CLI::Range(0.001, 16000.0))
      ->capture_default_str();
  dt->add_option("--format", db->format, "auto | csv | tsv | jsonl | text")
      ->check(CLI::IsMember({"auto", "csv", "tsv", "jsonl", "text"}))
      ->capture_default_str();
  dt->add_flag("--json", db->json, "one JSON object");
  dt->callback([db, &ctx] { ctx.action = [db] { return bench::bench_data(*db); }; });
  register_bench_model(sub, ctx);
  register_bench_train(sub, ctx);
  register_bench_pe(sub, ctx);
}

}  // namespace dpft
