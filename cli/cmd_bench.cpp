// `dpft bench accountant [--reps N] [--json]`: times the accountants in-process (median of
// N repetitions) on the cases docs/BENCHMARKS.md tracks.
// `dpft bench tokenizer --tokenizer DIR --file FILE... [--mb N] [--json]`: encode throughput
// on N MB of text made of the files (repeated if they are shorter), one cold-cache pass.
// `dpft bench data --file FILE [--mb N] [--format F] [--json]`: reading a data file of N MB
// (FILE's rows repeated under its header) with data::read_table, and the share of that time
// spent validating every cell as UTF-8 (the same check, timed on its own).
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <iostream>

#include "cli/app.hpp"
#include "core/privacy/calibrate.hpp"
#include "core/tokenizer/load.hpp"
#include "core/tokenizer/unicode.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/system.hpp"
#include "data/table.hpp"

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

struct TokenizerBench {
  std::string tokenizer, family;
  std::vector<std::string> files;
  double mb = 10;
  bool json = false;
};

int bench_tokenizer(const TokenizerBench& b) {
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point a) {
    return std::chrono::duration<double>(clock::now() - a).count();
  };
  auto t0 = clock::now();
  tok::Tokenizer t = tok::load_tokenizer(b.tokenizer, {b.family});
  double load_s = secs(t0);
  std::string corpus;
  for (const auto& f : b.files) corpus += read_file(f) + "\n";
  const size_t target = static_cast<size_t>(b.mb * 1e6), distinct = corpus.size();
  std::string text;
  while (text.size() < target) text += corpus;
  size_t cut = std::min(target, text.size());
  while (cut < text.size() && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80)
    --cut;  // UTF-8 boundary
  text.resize(cut);
  t0 = clock::now();
  size_t n_tokens = t.encode(text).size();
  double enc_s = secs(t0);
  nlohmann::json out = {{"tokenizer", t.source()},
                        {"format", t.format()},
                        {"pretokenizer", t.pretokenizer()},
                        {"regex_jit", t.splitter().jit()},
                        {"load_s", load_s},
                        {"bytes", text.size()},
                        {"distinct_bytes", distinct},
                        {"tokens", n_tokens},
                        {"encode_s", enc_s},
                        {"mb_per_s", text.size() / 1e6 / enc_s},
                        {"tokens_per_s", n_tokens / enc_s},
                        {"cached_pieces", t.cache_size()},
                        {"host", host_name()}};
  if (b.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout
      << fmt::format("tokenizer {} ({}, {} pre-tokenizer, regex JIT {}); loaded in {:.2f} s\n",
                     t.source(), t.format(), t.pretokenizer(), t.splitter().jit() ? "on" : "off",
                     load_s)
      << fmt::format("text      {:.2f} MB ({:.2f} MB distinct, from {} file(s))\n",
                     text.size() / 1e6, std::min(distinct, text.size()) / 1e6, b.files.size())
      << fmt::format(
             "encode    {:.2f} s: {:.2f} MB/s, {:.3g} tokens/s ({} tokens, {} pieces cached)\n",
             enc_s, text.size() / 1e6 / enc_s, n_tokens / enc_s, n_tokens, t.cache_size());
  return 0;
}

struct DataBench {
  std::string file, format = "auto";
  double mb = 100;
  bool json = false;
};

int bench_data(const DataBench& b) {
  namespace fs = std::filesystem;
  using clock = std::chrono::steady_clock;
  auto secs = [](clock::time_point a) {
    return std::chrono::duration<double>(clock::now() - a).count();
  };
  const std::string src = read_file(b.file);
  const std::string ext = fs::path(b.file).extension().string();
  const bool header = b.format == "csv" || b.format == "tsv" ||
                      (b.format == "auto" && (ext == ".csv" || ext == ".tsv"));
  const size_t cut = header ? src.find('\n') : std::string::npos;
  const std::string head = header ? src.substr(0, cut + 1) : "";
  std::string body = header ? src.substr(cut == std::string::npos ? src.size() : cut + 1) : src;
  if (!body.empty() && body.back() != '\n') body += '\n';
  if (body.empty())
    throw InputError(fmt::format("dpft bench data: {} has no rows to repeat", b.file));
  const fs::path tmp = fs::temp_directory_path() /
                       fmt::format("dpft-bench-data-{}{}", static_cast<long>(::getpid()), ext);
  std::string text = head;
  const size_t target = static_cast<size_t>(b.mb * 1e6);
  while (text.size() < target) text += body;
  write_file_atomic(tmp, text);
  text.clear();
  text.shrink_to_fit();
  double read_s = 0, check_s = 0;
  size_t rows = 0, cells = 0, bytes = 0;
  try {
    auto t0 = clock::now();
    const data::Table t = data::read_table(tmp, b.format);
    read_s = secs(t0);
    t0 = clock::now();
    for (const auto& row : t.rows)
      for (const std::string& c : row) {
        cells += 1;
        bytes += c.size();
        if (tok::find_invalid_utf8(c) != std::string::npos) throw RuntimeError("invalid cell");
      }
    check_s = secs(t0);
    rows = t.rows.size();
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
  const double mb = static_cast<double>(fs::file_size(tmp)) / 1e6;
  fs::remove(tmp);
  nlohmann::json out = {{"file", b.file},
                        {"mb", mb},
                        {"rows", rows},
                        {"cells", cells},
                        {"cell_bytes", bytes},
                        {"read_s", read_s},
                        {"mb_per_s", mb / read_s},
                        {"utf8_check_s", check_s},
                        {"utf8_check_share", read_s > 0 ? check_s / read_s : 0.0},
                        {"host", host_name()}};
  if (b.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format("read_table  {:.1f} MB ({} rows) in {:.2f} s: {:.1f} MB/s\n", mb, rows,
                           read_s, mb / read_s)
            << fmt::format("of which    UTF-8 check of every cell {:.3f} s ({:.1f}% of the read)\n",
                           check_s, 100 * check_s / read_s);
  return 0;
}

}  // namespace

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
  acc->callback([reps, json, &ctx] { ctx.action = [reps, json] { return bench_accountant(*reps, *json); }; });

  auto tb = std::make_shared<TokenizerBench>();
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
  tk->callback([tb, &ctx] { ctx.action = [tb] { return bench_tokenizer(*tb); }; });

  auto db = std::make_shared<DataBench>();
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
  dt->callback([db, &ctx] { ctx.action = [db] { return bench_data(*db); }; });
  register_bench_model(sub, ctx);
  register_bench_train(sub, ctx);
  register_bench_pe(sub, ctx);
}

}  // namespace dpft
