// NLG metrics (core/eval/nlg_metrics.hpp), data-to-text data (data/nlg.hpp) and `dpft eval-nlg`:
// hand-computed cases, and parity with an independent reference (tests/reference/
// nlg_reference.py: NLTK's BLEU, NIST and METEOR; mteval's multi-reference NIST and the
// MS-COCO scripts' ROUGE-L and CIDEr-D written out in Python; the v13a tokenizer with Python's
// re) on a seeded random multi-reference corpus and on E2E dev.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "core/eval/nlg_metrics.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/nlg.hpp"
#include "data/table.hpp"
#include "run_fixture.hpp"
#include "test_util.hpp"

using namespace dpft;
namespace nlg = dpft::eval::nlg;

namespace {

nlg::Corpus one(const std::string& hyp, std::vector<std::string> refs) {
  return nlg::make_corpus({hyp}, {refs});
}

bool have_nltk() {
  return std::system("/usr/bin/python3 -c 'import nltk' >/dev/null 2>&1") == 0;
}

// A seeded corpus of `n` segments with 1-4 references each; hypotheses are edited references
// (dropped, replaced and swapped words, inflections the stemmer folds, punctuation glued to
// words) so that every metric sees partial matches.
std::pair<std::vector<std::string>, std::vector<std::vector<std::string>>> random_corpus(
    int n, uint32_t seed) {
  const std::vector<std::string> words = {
      "the",     "a",     "restaurant", "restaurants", "serve",    "serves", "served",
      "serving", "food",  "cheap",      "cheaper",     "city",     "centre", "near",
      "river",   "rated", "rating",     "family",      "friendly", "is",     "it",
      "and",     "with",  ",",          ".",           "£20-25",   "it's",   "3.5",
      "1-2",     "&amp;", "(pub)",      "Blue",        "Spice",    "coffee", "shop"};
  std::mt19937 rng(seed);
  auto pick = [&](size_t k) { return std::uniform_int_distribution<size_t>(0, k - 1)(rng); };
  auto sentence = [&]() {
    std::vector<std::string> s;
    size_t len = 5 + pick(12);
    for (size_t i = 0; i < len; ++i) s.push_back(words[pick(words.size())]);
    return s;
  };
  auto join = [&](const std::vector<std::string>& s) {
    std::string out;
    for (const auto& w : s) {
      bool glue = !out.empty() && (w == "," || w == ".") && pick(2) == 0;
      if (!out.empty() && !glue) out += " ";
      out += w;
    }
    return out;
  };
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
  for (int i = 0; i < n; ++i) {
    std::vector<std::vector<std::string>> group;
    size_t k = 1 + pick(4);
    for (size_t r = 0; r < k; ++r) group.push_back(sentence());
    std::vector<std::string> h = group[pick(k)];
    for (size_t e = 0, edits = pick(5); e < edits && h.size() > 5; ++e) {
      size_t at = pick(h.size());
      switch (pick(4)) {
        case 0:
          h.erase(h.begin() + static_cast<long>(at));
          break;
        case 1:
          h[at] = words[pick(words.size())];
          break;
        case 2:
          std::swap(h[at], h[pick(h.size())]);
          break;
        default:
          h.insert(h.begin() + static_cast<long>(at), words[pick(words.size())]);
      }
    }
    hyps.push_back(join(h));
    std::vector<std::string> rs;
    for (const auto& g : group) rs.push_back(join(g));
    refs.push_back(rs);
  }
  return {hyps, refs};
}

void check_against_reference(const std::vector<std::string>& hyps,
                             const std::vector<std::vector<std::string>>& refs) {
  test::TempDir d;
  nlohmann::json in = {{"hyps", hyps}, {"refs", refs}};
  fs::path input = d.write("corpus.json", in.dump());
  fs::path out = d.path / "ref.json";
  fs::path script = fs::path(DPFT_SOURCE_DIR) / "tests" / "reference" / "nlg_reference.py";
  std::string cmd =
      "/usr/bin/python3 " + script.string() + " " + input.string() + " > " + out.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  nlohmann::json ref = nlohmann::json::parse(read_file(out));
  nlg::Corpus c = nlg::make_corpus(hyps, refs);
  // The tokenizer: the Perl script's regular expressions run by Python's re.
  for (size_t i = 0; i < hyps.size(); ++i) {
    INFO(hyps[i]);
    REQUIRE(c.hyps[i] == ref["tokens"]["hyps"][i].get<nlg::Tokens>());
    for (size_t r = 0; r < refs[i].size(); ++r)
      REQUIRE(c.refs[i][r] == ref["tokens"]["refs"][i][r].get<nlg::Tokens>());
  }
  CHECK(nlg::bleu(c) == Approx(ref["bleu"].get<double>()).epsilon(1e-12));
  CHECK(nlg::nist(c) == Approx(ref["nist"].get<double>()).epsilon(1e-12));
  nlg::Corpus first = c;
  for (auto& g : first.refs) g.resize(1);
  CHECK(nlg::nist(first) == Approx(ref["nist_single"].get<double>()).epsilon(1e-12));
  double meteor_sum = 0;
  for (size_t i = 0; i < hyps.size(); ++i) {
    INFO("METEOR segment " << i << ": " << hyps[i]);
    double m = ref["meteor"][i].get<double>();
    CHECK(nlg::meteor_segment(c.hyps[i], c.refs[i]) == Approx(m).epsilon(1e-12).margin(1e-15));
    meteor_sum += m;
  }
  CHECK(nlg::meteor(c) == Approx(meteor_sum / static_cast<double>(hyps.size())).epsilon(1e-12));
  CHECK(nlg::rouge_l(c) == Approx(ref["rouge_l"].get<double>()).epsilon(1e-12));
  CHECK(nlg::cider(c) == Approx(ref["cider"].get<double>()).epsilon(1e-12));
}

}  // namespace

TEST_CASE("mteval-v13a tokenization", "[nlg]") {
  using T = nlg::Tokens;
  CHECK(nlg::tokenize("The Vaults is a pub, near Café Adriatic.") ==
        T{"the", "vaults", "is", "a", "pub", ",", "near", "café", "adriatic", "."});
  CHECK(nlg::tokenize("Prices are £20-25 and 3.5 stars; it's (very) good!") ==
        T{"prices", "are", "£20", "-", "25", "and", "3.5", "stars", ";", "it's", "(", "very", ")",
          "good", "!"});
  CHECK(nlg::tokenize("a,b 1,000 x.y &amp; &quot;q&quot;") ==
        T{"a", ",", "b", "1,000", "x", ".", "y", "&", "\"", "q", "\""});
  CHECK(nlg::tokenize("Blue Spice", true) == T{"Blue", "Spice"});
  CHECK(nlg::tokenize("   ").empty());
}

TEST_CASE("NLG metrics on hand-computed cases", "[nlg]") {
  // BLEU: all precisions 1, brevity penalty exp(1 - 6/4).
  CHECK(nlg::bleu(one("the cat sat on", {"the cat sat on the mat"})) ==
        Approx(std::exp(-0.5)).epsilon(1e-12));
  CHECK(nlg::bleu(one("the cat sat on the mat", {"the cat sat on the mat", "a cat"})) ==
        Approx(1.0));
  CHECK(nlg::bleu(one("dogs bark loudly today", {"the cat sat on the mat"})) == 0.0);
  // ROUGE-L: LCS "a c d" = 3, P 3/4, R 3/5, F_1.2 = 2.44 P R / (R + 1.44 P).
  CHECK(nlg::rouge_l(one("a b c d", {"a c d e f"})) ==
        Approx(2.44 * 0.75 * 0.6 / (0.6 + 1.44 * 0.75)).epsilon(1e-12));
  // METEOR: "cats" matches "cat" by stem; one chunk of 3: (1 - 0.5 (1/3)^3) * 1.
  CHECK(nlg::meteor(one("the cats sat", {"the cat sat"})) == Approx(1 - 0.5 / 27).epsilon(1e-12));
  // Two chunks of 2 and 1 of 4 matches: P = R = 1 -> 1 - 0.5 (2/4)^3.
  CHECK(nlg::meteor(one("c d a b", {"a b c d"})) == Approx(1 - 0.5 / 8).epsilon(1e-12));
  // CIDEr: one segment -> idf log(1) = 0 everywhere (a property of the definition).
  CHECK(nlg::cider(one("a b c", {"a b c"})) == 0.0);
  // Identical hypotheses score the maximum on a corpus with distinct references.
  auto same = nlg::make_corpus({"a b c d e", "f g h i j"}, {{"a b c d e"}, {"f g h i j"}});
  CHECK(nlg::cider(same) == Approx(10.0).epsilon(1e-12));
  CHECK(nlg::rouge_l(same) == Approx(1.0));
  CHECK(nlg::meteor(same) == Approx(1 - 0.5 / 125).epsilon(1e-12));
  // NIST of identical text is the sum of the information of its n-grams per n-gram.
  CHECK(nlg::nist(same) > 0);
  CHECK_THROWS_AS(nlg::make_corpus({"a", "b"}, {{"a"}}), InputError);
  CHECK_THROWS_AS(nlg::make_corpus({"a"}, {{}}), InputError);
  nlg::MeteorParams bad;
  bad.stemmer = "klingon";
  CHECK_THROWS_AS(nlg::meteor(same, bad), ConfigError);
}

TEST_CASE("NLG metrics match the independent reference on a random corpus", "[nlg][parity]") {
  if (!have_nltk()) {
    WARN("skipped: no python3 with nltk (apt-get install python3-nltk; scripts/setup.sh does)");
    return;
  }
  for (uint32_t seed : {1u, 2u}) {
    INFO("seed " << seed);
    auto [hyps, refs] = random_corpus(60, seed);
    check_against_reference(hyps, refs);
  }
}

TEST_CASE("NLG metrics match the independent reference on E2E dev", "[nlg][parity]") {
  SHARED_DATA_OR_SKIP(e2e, "e2e");
  if (!have_nltk()) {
    WARN("skipped: no python3 with nltk (apt-get install python3-nltk; scripts/setup.sh does)");
    return;
  }
  // The first 80 meaning representations; each one's last reference plays the system output,
  // scored against the others (E2E style, several references per segment).
  data::Table t = data::read_table(e2e / "devset.csv", "e2e");
  std::vector<data::Example> ex = data::examples(t, "text", "", "source");
  auto segs = data::nlg_segments(ex, "e2e dev");
  REQUIRE(segs.size() > 80);
  std::vector<std::string> hyps;
  std::vector<std::vector<std::string>> refs;
  for (size_t i = 0; i < 80; ++i) {
    if (segs[i].refs.size() < 2) continue;
    hyps.push_back(segs[i].refs.back());
    refs.emplace_back(segs[i].refs.begin(), segs[i].refs.end() - 1);
  }
  REQUIRE(hyps.size() > 50);
  check_against_reference(hyps, refs);
}

TEST_CASE("E2E and DART tables: linearised sources, grouped references, a fixed DART split",
          "[nlg][data]") {
  CHECK(data::linearize_e2e_mr("name[The Vaults], eatType[pub], priceRange[more than £30], "
                               "familyFriendly[yes], customer rating[5 out of 5]",
                               "x") ==
        "name : The Vaults | Type : pub | price : more than £30 | family friendly : yes | "
        "customer rating : 5 out of 5");
  CHECK_THROWS_AS(data::linearize_e2e_mr("name The Vaults", "x"), InputError);
  CHECK_THROWS_AS(data::linearize_e2e_mr("", "x"), InputError);
  test::TempDir d;
  fs::path dart = d.write("dart.json", R"([
    {"tripleset": [["A", "NICKNAME", "B"], ["A", "Type", "C"]],
     "annotations": [{"source": "x", "text": "A is B."}, {"source": "y", "text": "A, B."}]},
    {"tripleset": [["D", "city", "E"]], "annotations": [{"text": "D is in E."}]}])");
  data::Table all = data::read_table(dart, "dart");
  REQUIRE(all.rows.size() == 3);
  CHECK(all.rows[0][0] == "A : nickname : B | A : type : C");
  auto segs = data::nlg_segments(data::examples(all, "text", "", "source"), "dart");
  REQUIRE(segs.size() == 2);
  CHECK(segs[0].refs == std::vector<std::string>{"A is B.", "A, B."});
  data::Table train = data::read_table(dart, "dart-train"),
              test = data::read_table(dart, "dart-test");
  CHECK(train.rows.size() + test.rows.size() == 3);
  for (const auto& r : test.rows) CHECK(data::dart_is_test(r[0]));
  for (const auto& r : train.rows) CHECK_FALSE(data::dart_is_test(r[0]));
  CHECK_THROWS_AS(data::read_table(d.write("bad.json", R"([{"tripleset": [["a", "b"]], )"
                                                       R"("annotations": []}])"),
                                   "dart"),
                  InputError);
  CHECK_THROWS_AS(data::nlg_segments(data::examples(all, "text"), "dart"), ConfigError);
}

TEST_CASE("the DART dev split is 80 / 20 by triple set and keeps sources apart", "[nlg][data]") {
  SHARED_DATA_OR_SKIP(dart, "dart");
  fs::path f = dart / "dart-v1.1.1-full-dev.json";
  auto train = data::nlg_segments(
      data::examples(data::read_table(f, "dart-train"), "text", "", "source"), "train");
  auto test = data::nlg_segments(
      data::examples(data::read_table(f, "dart-test"), "text", "", "source"), "test");
  std::set<std::string> tr;
  for (const auto& s : train) tr.insert(s.source);
  for (const auto& s : test) CHECK(tr.count(s.source) == 0);
  double share = static_cast<double>(test.size()) / static_cast<double>(train.size() + test.size());
  CHECK(share > 0.17);
  CHECK(share < 0.23);
}

TEST_CASE("dpft eval-nlg scores reference groups and refuses mismatched files", "[nlg][cli]") {
  test::TempDir d;
  fs::path refs = d.write("refs.txt",
                          "the cat sat on the mat\na cat sat on a mat\n\n"
                          "dogs bark at night\n\nit rains today\nrain today\n");
  fs::path hyps = d.write("hyps.txt", "the cat sat on a mat\ndogs bark at noon\nit rains\n");
  std::string out;
  REQUIRE(test::cli({"eval-nlg", "--refs", refs.string(), "--hyps", hyps.string(), "--json"},
                    &out) == 0);
  auto j = nlohmann::json::parse(test::last_line(out));
  auto c = nlg::make_corpus({"the cat sat on a mat", "dogs bark at noon", "it rains"},
                            {{"the cat sat on the mat", "a cat sat on a mat"},
                             {"dogs bark at night"},
                             {"it rains today", "rain today"}});
  CHECK(j["segments"] == 3);
  CHECK(j["references"] == 5);
  CHECK(j["bleu"].get<double>() == Approx(nlg::bleu(c)));
  CHECK(j["nist"].get<double>() == Approx(nlg::nist(c)));
  CHECK(j["meteor"].get<double>() == Approx(nlg::meteor(c)));
  CHECK(j["rouge_l"].get<double>() == Approx(nlg::rouge_l(c)));
  CHECK(j["cider"].get<double>() == Approx(nlg::cider(c)));
  // .jsonl files give the same corpus
  fs::path rj = d.write("refs.jsonl",
                        "[\"the cat sat on the mat\", \"a cat sat on a mat\"]\n"
                        "[\"dogs bark at night\"]\n[\"it rains today\", \"rain today\"]\n");
  fs::path hj =
      d.write("hyps.jsonl", "\"the cat sat on a mat\"\n\"dogs bark at noon\"\n\"it rains\"\n");
  std::string out2;
  REQUIRE(test::cli({"eval-nlg", "--refs", rj.string(), "--hyps", hj.string(), "--json"}, &out2) ==
          0);
  CHECK(nlohmann::json::parse(test::last_line(out2))["bleu"].get<double>() == Approx(nlg::bleu(c)));
  fs::path two = d.write("two.txt", "a\nb\n");
  CHECK(test::cli({"eval-nlg", "--refs", refs.string(), "--hyps", two.string()}) == 3);
  CHECK(test::cli(
            {"eval-nlg", "--refs", (d.path / "none.txt").string(), "--hyps", hyps.string()}) == 3);
}

TEST_CASE("eval.nlg decodes data.eval's sources at the listed steps; resume keeps the history",
          "[nlg][run]") {
  test::Fixture f;
  test::make_fixture(f);
  // A small E2E-format data set: 6 meaning representations with 4 references for training,
  // 3 with 2 references to evaluate.
  std::string train = "mr,ref\n", eval = "mr,ref\n";
  const std::vector<std::string> names = {"Alimentum",  "Aromi", "Bibimbap",
                                          "Blue Spice", "Cotto", "Giraffe"};
  for (size_t i = 0; i < names.size(); ++i)
    for (int r = 0; r < 4; ++r)
      train += fmt::format(
          "\"name[{}], area[city centre], eatType[pub]\",\"{} is a pub number {} "
          "in the city centre.\"\n",
          names[i], names[i], r);
  for (const std::string n : {"Wildwood", "Zizzi", "Strada"})
    for (int r = 0; r < 2; ++r)
      eval += fmt::format("\"name[{}], area[riverside]\",\"{} is by the river ({}).\"\n", n, n, r);
  const std::string tr = f.tmp.write("e2e_train.csv", train).string(),
                    ev = f.tmp.write("e2e_eval.csv", eval).string();
  const std::vector<std::string> nlg = {"--set", "data.train.path=" + tr,
                                        "--set", "data.train.format=e2e",
                                        "--set", "data.train.prompt_column=prompt",
                                        "--set", "data.train.num_samples=0",
                                        "--set", "data.eval.path=" + ev,
                                        "--set", "data.eval.format=e2e",
                                        "--set", "data.eval.prompt_column=prompt",
                                        "--set", "data.eval.num_samples=0",
                                        "--set", "data.loss_on=response",
                                        "--set", "data.max_length=48",
                                        "--set", "method.name=dp-sgd",
                                        "--set", "privacy.epsilon=8",
                                        "--set", "eval.nlg.at_steps=[3,6]",
                                        "--set", "eval.nlg.num_beams=2",
                                        "--set", "eval.nlg.max_new_tokens=6",
                                        "--set", "eval.nlg.batch=2",
                                        "--set", "output.checkpoint_every=2"};
  const std::string out = (f.tmp.path / "runs").string();
  std::string dir;
  nlohmann::json m = test::run_metrics(f, out, nlg, &dir);
  REQUIRE(m["eval"]["nlg"].size() == 2);
  for (int i = 0; i < 2; ++i) {
    const auto& e = m["eval"]["nlg"][i];
    const int step = 3 * (i + 1);
    CHECK(e["step"] == step);
    CHECK(e["segments"] == 3);
    CHECK(e["references"] == 6);
    // The scores are those of the outputs written beside them.
    std::vector<std::string> hyps;
    std::vector<std::vector<std::string>> refs;
    std::istringstream lines(
        read_file(fs::path(dir) / fmt::format("generations/step-{}.jsonl", step)));
    for (std::string line; std::getline(lines, line);) {
      auto j = nlohmann::json::parse(line);
      hyps.push_back(j["hypothesis"]);
      refs.push_back(j["references"]);
      CHECK(j["source"].get<std::string>().rfind(" ||") ==
            j["source"].get<std::string>().size() - 3);
    }
    REQUIRE(hyps.size() == 3);
    CHECK(refs[0] == std::vector<std::string>{"Wildwood is by the river (0).",
                                              "Wildwood is by the river (1)."});
    auto s = nlg::score_all(nlg::make_corpus(hyps, refs));
    CHECK(e["bleu"].get<double>() == Approx(s.bleu));
    CHECK(e["rouge_l"].get<double>() == Approx(s.rouge_l));
    CHECK(e["cider"].get<double>() == Approx(s.cider));
  }
  // Stopped after 4 steps (nlg at 3 done, checkpointed at 4) and resumed: the same history.
  std::string stopped;
  std::vector<std::string> stop = nlg;
  stop.insert(stop.end(), {"--stop-after", "4"});
  test::run_metrics(f, out, stop, &stopped);
  std::string printed;
  REQUIRE(test::cli({"run", "--resume", stopped}, &printed) == 0);
  auto resumed = nlohmann::json::parse(read_file(fs::path(stopped) / "metrics.json"));
  CHECK(resumed["eval"]["nlg"] == m["eval"]["nlg"]);
  // Bad settings are refused before training.
  std::vector<std::string> late = nlg;
  late.insert(late.end(), {"--set", "eval.nlg.at_steps=[7]"});
  CHECK(test::cli(test::run_args(f, out, late)) == 2);
  std::vector<std::string> no_prompt;  // the same without data.eval.prompt_column
  for (size_t i = 0; i + 1 < nlg.size(); i += 2)
    if (nlg[i + 1] != "data.eval.prompt_column=prompt")
      no_prompt.insert(no_prompt.end(), {nlg[i], nlg[i + 1]});
  REQUIRE(no_prompt.size() + 2 == nlg.size());
  CHECK(test::cli(test::run_args(f, out, no_prompt)) == 2);
}
