// `dpft bench accountant [--reps N] [--json]`: times the accountants in-process (median of
// N repetitions) on the cases docs/BENCHMARKS.md tracks.
// `dpft bench tokenizer --tokenizer DIR --file FILE... [--mb N] [--json]`: encode throughput
// on N MB of text made of the files (repeated if they are shorter), one cold-cache pass.
// `dpft bench data --file FILE [--mb N] [--format F] [--json]`: reading a data file of N MB
// (FILE's rows repeated under its header) with data::read_table, and the share of that time
// spent validating every cell as UTF-8 (the same check, timed on its own).
// Each prints its results (the CLI, cli/cmd_bench.cpp, parses the options) and returns 0.
#pragma once
#include <string>
#include <vector>

namespace dpft::bench {

struct TokenizerBench {
  std::string tokenizer, family;
  std::vector<std::string> files;
  double mb = 10;
  bool json = false;
};

struct DataBench {
  std::string file, format = "auto";
  double mb = 100;
  bool json = false;
};

int bench_accountant(int reps, bool json);
int bench_tokenizer(const TokenizerBench& b);
int bench_data(const DataBench& b);

}  // namespace dpft::bench
