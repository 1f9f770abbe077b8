// `dpft eval-nlg --refs F --hyps F [--json] [--keep-case]`: the E2E challenge's corpus-level
// metrics (BLEU, NIST, METEOR, ROUGE-L, CIDEr; core/eval/nlg_metrics.hpp) of one output per
// line against multi-reference groups (blank-line separated, as the E2E scripts read them, or
// .jsonl arrays). Scoring reads no private data a run has not already released.
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/eval/nlg_metrics.hpp"
#include "core/util/error.hpp"
#include "data/nlg.hpp"

namespace dpft {

void register_eval_nlg(CLI::App& app, CliContext& ctx) {
  struct Options {
    std::string refs, hyps;
    bool json = false, keep_case = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "eval-nlg", "BLEU, NIST, METEOR, ROUGE-L and CIDEr of generated texts (E2E style)");
  sub->add_option("--refs", o->refs,
                  "references: groups of lines separated by blank lines, one group per "
                  "hypothesis (.jsonl: one JSON array of strings per line)")
      ->required();
  sub->add_option("--hyps", o->hyps, "hypotheses: one per line (.jsonl: one JSON string per line)")
      ->required();
  sub->add_flag("--json", o->json, "one JSON object");
  sub->add_flag("--keep-case", o->keep_case, "case-sensitive (the E2E scripts lower-case)");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      auto hyps = data::read_hypotheses(o->hyps);
      auto refs = data::read_references(o->refs);
      DPFT_CHECK_AS(InputError, hyps.size() == refs.size(),
                    "{} has {} hypotheses but {} has {} reference groups: give one group "
                    "(blank-line separated) per hypothesis",
                    o->hyps, hyps.size(), o->refs, refs.size());
      DPFT_CHECK_AS(InputError, !hyps.empty(), "{}: no hypotheses", o->hyps);
      auto s = eval::nlg::score_all(eval::nlg::make_corpus(hyps, refs, o->keep_case));
      nlohmann::json j = {{"bleu", s.bleu},
                          {"nist", s.nist},
                          {"meteor", s.meteor},
                          {"rouge_l", s.rouge_l},
                          {"cider", s.cider},
                          {"segments", s.segments},
                          {"references", s.references}};
      if (o->json) {
        std::cout << j.dump() << "\n";
        return 0;
      }
      std::cout << fmt::format("segments {}  references {}\n", s.segments, s.references)
                << fmt::format(
                       "BLEU     {:.4f}\nNIST     {:.4f}\nMETEOR   {:.4f}\n"
                       "ROUGE-L  {:.4f}\nCIDEr    {:.4f}\n",
                       s.bleu, s.nist, s.meteor, s.rouge_l, s.cider);
      return 0;
    };
  });
}

}  // namespace dpft
