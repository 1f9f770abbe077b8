#include "methods/bench/io_bench.hpp"

#include <fmt/format.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>

#include "core/privacy/calibrate.hpp"
#include "core/tokenizer/load.hpp"
#include "core/tokenizer/unicode.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/system.hpp"
#include "data/table.hpp"

namespace dpft::bench {

namespace {

double median_ms(int reps, const std::function<double()>& f, double* value) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = std::chrono::steady_clock::now();
    *value = f();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int bench_accountant(int reps, bool json) {
  using namespace privacy;
  auto prv = make_accountant("prv");
  auto rdp = make_accountant("rdp");
  struct Case {
    std::string name;
    std::function<double()> run;
  };
  std::vector<Case> cases = {
      {"prv eps: sigma 1.0, q 0.01, T 1000, delta 1e-5",
       [&] {
         return prv->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon;
       }},
      {"prv eps: sigma 1.1, q 0.2, T 1000, delta 1e-5",
       [&] {
         return prv->epsilon({{1.1, 0.2, 1000}}, 1e-5).epsilon;
       }},
      {"prv calibrate: eps 1, delta 1e-5, q 0.2, T 10 (PE-SGD default)",
       [&] { return calibrate_sigma(*prv, 0.2, 10, 1.0, 1e-5).sigma; }},
      {"prv eps: sigma 1.1, q 0.01, T 100000, delta 1e-5",
       [&] {
         return prv->epsilon({{1.1, 0.01, 100000}}, 1e-5).epsilon;
       }},
      {"rdp eps: sigma 1.0, q 0.01, T 1000, delta 1e-5",
       [&] {
         return rdp->epsilon({{1.0, 0.01, 1000}}, 1e-5).epsilon;
       }},
      {"rdp calibrate: eps 1, delta 1e-5, q 0.2, T 10",
       [&] { return calibrate_sigma(*rdp, 0.2, 10, 1.0, 1e-5).sigma; }},
  };
  nlohmann::json out = {{"threads", torch_threads()},
                        {"reps", reps},
                        {"host", host_name()},
                        {"cases", nlohmann::json::array()}};
  for (auto& c : cases) {
    double value = 0;
    double ms = median_ms(reps, c.run, &value);
    out["cases"].push_back({{"case", c.name}, {"median_ms", ms}, {"value", value}});
    if (!json)
      std::cout << fmt::format("{:<66} {:>10.1f} ms   (value {:.6g})\n", c.name, ms, value);
  }
  if (json) std::cout << out.dump(2) << "\n";
  return 0;
}

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
                        {"regex_jit", t.regex_jit()},
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
                     t.source(), t.format(), t.pretokenizer(), t.regex_jit() ? "on" : "off", load_s)
      << fmt::format("text      {:.2f} MB ({:.2f} MB distinct, from {} file(s))\n",
                     text.size() / 1e6, std::min(distinct, text.size()) / 1e6, b.files.size())
      << fmt::format(
             "encode    {:.2f} s: {:.2f} MB/s, {:.3g} tokens/s ({} tokens, {} pieces cached)\n",
             enc_s, text.size() / 1e6 / enc_s, n_tokens / enc_s, n_tokens, t.cache_size());
  return 0;
}

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

}  // namespace dpft::bench
