// Data-to-text generation data (paper 003, Section 4.2 and Appendix E): the E2E NLG challenge
// CSVs and DART, linearised as the LoRA / prefix-tuning papers feed them to GPT-2, and the
// reference / hypothesis files `dpft eval-nlg` scores.
//
// Table formats (data.*.format; data/table.hpp reads them):
//   e2e         the challenge CSV (mr,ref): one row per reference, columns `source` (the
//               meaning representation linearised: "name : The Vaults | Type : pub | price :
//               more than £30", attribute names spelled as prefix-tuning's data does:
//               eatType -> Type, priceRange -> price, familyFriendly -> family friendly),
//               `prompt` (source + " ||", the separator of prefix-tuning's "source || target"
//               files: what the model is conditioned on), `text` (the reference) and `mr` (as
//               in the file).
//   dart        DART's JSON ([{tripleset, annotations: [{text}]}]): one row per annotation,
//               `source` = "s1 : p1 : o1 | s2 : p2 : o2" with predicates lower-cased (as LoRA's
//               converter), `prompt`, `text`.
//   dart-train, dart-test
//               a deterministic 80 / 20 split of that file by triple set (only the v1.1.1 dev
//               split is available here): a triple set is test when the first 8 bytes of
//               sha256(source) read as a big-endian integer are 0 mod 5, so every reference of a
//               triple set (and any repeat of it) lands on the same side.
// Grouping rows by prompt (first appearance order) gives the multi-reference segments the
// metrics score (nlg_segments).
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "core/eval/nlg_eval.hpp"
#include "data/table.hpp"

namespace dpft::data {

// The prompt column of a linearised source.
std::string nlg_prompt(const std::string& source);

// "name[The Vaults], eatType[pub]" -> "name : The Vaults | Type : pub". InputError naming
// `where` for a malformed representation.
std::string linearize_e2e_mr(const std::string& mr, const std::string& where);

// Format e2e: the challenge CSV, already read as a table (columns mr, ref), as columns
// source, prompt, text, mr. Format dart / dart-train / dart-test ("" / "train" / "test"): the
// file's text into `t` (columns source, prompt, text).
Table e2e_table(const Table& csv);
void parse_dart(const std::string& text, const std::string& split, Table& t);
bool dart_is_test(const std::string& source);

// Rows grouped by prompt (first appearance order). Examples without a prompt are refused.
std::vector<eval::NlgSegment> nlg_segments(const std::vector<Example>& examples,
                                           const std::string& where);

// Files for `dpft eval-nlg`:
//   hypotheses: one per line (.jsonl: one JSON string per line); a final newline ends the last.
//   references: groups separated by blank lines, one reference per line, as the E2E scripts
//               read them (.jsonl: one JSON array of strings per line).
// InputError (naming file and line) for a missing file, an empty group or bad JSON.
std::vector<std::string> read_hypotheses(const std::filesystem::path& path);
std::vector<std::vector<std::string>> read_references(const std::filesystem::path& path);

}  // namespace dpft::data
