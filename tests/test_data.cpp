// Data readers: CSV (quoted newlines, doubled quotes, CRLF, BOM), TSV, JSONL, errors with
// line numbers, column lookup, deterministic subsampling; row counts of the real data sets in
// ../shared/data against the counts its README states (and Python's csv module gives).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <set>

#include "core/util/error.hpp"
#include "data/table.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::data;
using Catch::Matchers::Contains;

TEST_CASE("CSV: quoted fields with commas, quotes, newlines; CRLF; BOM", "[data]") {
  test::TempDir d;
  auto p = d.write("a.csv", "\xEF\xBB\xBFtext,label\r\n\"hello, world\",1\r\n\"say \"\"hi\"\"\nnext line\",0\nplain,2\n\n");
  Table t = read_table(p);
  REQUIRE(t.columns == std::vector<std::string>{"text", "label"});
  REQUIRE(t.rows.size() == 3);
  CHECK(t.rows[0][0] == "hello, world");
  CHECK(t.rows[1][0] == "say \"hi\"\nnext line");
  CHECK(t.rows[2] == std::vector<std::string>{"plain", "2"});
  CHECK(t.line == std::vector<int64_t>{2, 3, 5});
  auto ex = examples(t, "text", "label");
  CHECK(ex[1].label == "0");
  CHECK(ex[2].index == 2);
}

TEST_CASE("CSV/TSV/JSONL errors name the file and line", "[data]") {
  test::TempDir d;
  CHECK_THROWS_WITH(read_table(d.write("b.csv", "a,b\n1,2\n3\n")), Contains("b.csv:3: 1 fields, but the header has 2"));
  CHECK_THROWS_WITH(read_table(d.write("c.csv", "a\n\"open\n")), Contains("c.csv:2: unterminated quoted field"));
  CHECK_THROWS_WITH(read_table(d.write("d.tsv", "s\tl\nx\t1\ny\n")), Contains("d.tsv:3: 1 fields"));
  CHECK_THROWS_WITH(read_table(d.write("e.jsonl", "{\"text\": \"a\"}\n{oops\n")), Contains("e.jsonl:2: invalid JSON"));
  CHECK_THROWS_WITH(read_table(d.write("f.jsonl", "[1, 2]\n")), Contains("f.jsonl:1: expected a JSON object"));
  CHECK_THROWS_AS(read_table(d.path / "missing.csv"), InputError);
  CHECK_THROWS_AS(read_table(d.write("g.dat", "x")), ConfigError);
  CHECK_THROWS_AS(read_table(d.write("h.csv", "")), InputError);
  Table t = read_table(d.write("i.csv", "text,label\nx,1\n"));
  CHECK_THROWS_WITH(examples(t, "txt"), Contains("no column 'txt'; columns are: text, label (did you mean 'text'?)"));
}

TEST_CASE("TSV and JSONL rows", "[data]") {
  test::TempDir d;
  Table t = read_table(d.write("a.tsv", "sentence\tlabel\r\nit 's good \t1\nbad\t0\n"));
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows[0][0] == "it 's good ");
  Table j = read_table(d.write("a.jsonl", "{\"text\": \"x\\ny\", \"n\": 3}\n\n{\"n\": 4, \"text\": \"z\"}\n"));
  REQUIRE(j.rows.size() == 2);
  CHECK(j.rows[0][j.column("text")] == "x\ny");
  CHECK(j.rows[1][j.column("n")] == "4");
  CHECK(j.line == std::vector<int64_t>{1, 3});
}

TEST_CASE("a .json document of rows: object of objects (GLUE export) or array", "[data]") {
  test::TempDir d;
  // Integer keys out of order: rows follow the keys' numeric order.
  Table g = read_table(d.write("g.json",
                               "{\n \"10\": {\"text_a\": \"q2\", \"text_b\": \"s2\", "
                               "\"label\": \"entailment\"},\n \"2\": {\"text_a\": "
                               "\"q1\", \"text_b\": \"s1\", \"label\": 0}\n}\n"));
  REQUIRE(g.rows.size() == 2);
  CHECK(g.columns.size() == 3);  // keys in the JSON parser's (sorted) order, as for JSONL
  CHECK(g.rows[0][g.column("text_a")] == "q1");
  CHECK(g.rows[0][g.column("label")] == "0");
  CHECK(g.rows[1][g.column("text_b")] == "s2");
  CHECK(g.line == std::vector<int64_t>{1, 2});  // row ordinals
  auto ex = examples(g, "text_a", "label", "", "text_b");
  CHECK(ex[1].text_pair == std::string("s2"));
  Table a = read_table(d.write("a.json", "[{\"text\": \"x\"}, {\"text\": \"y\"}]"));
  REQUIRE(a.rows.size() == 2);
  CHECK(a.rows[1][0] == "y");
  // A one-line .json object of values stays a JSONL row; JSONL lines in a .json file too.
  CHECK(read_table(d.write("one.json", "{\"text\": \"z\", \"n\": 1}\n")).rows.size() == 1);
  CHECK(read_table(d.write("l.json", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n")).rows.size() == 2);
  // A row that is not an object names its ordinal.
  CHECK_THROWS_WITH(read_table(d.write("bad.json", "[{\"text\": \"x\"}, 5]")),
                    Contains("bad.json:2: expected an object per row"));
}

TEST_CASE("subsampling is deterministic, seeded, in file order", "[data]") {
  std::vector<Example> all;
  for (int i = 0; i < 100; ++i) all.push_back({i, std::to_string(i), "", {}});
  auto a = subsample(all, 10, 7), b = subsample(all, 10, 7), c = subsample(all, 10, 8);
  REQUIRE(a.size() == 10);
  std::vector<int64_t> ia, ib, ic;
  for (auto& e : a) ia.push_back(e.index);
  for (auto& e : b) ib.push_back(e.index);
  for (auto& e : c) ic.push_back(e.index);
  CHECK(ia == ib);
  CHECK(ia != ic);
  CHECK(std::is_sorted(ia.begin(), ia.end()));
  CHECK(std::set<int64_t>(ia.begin(), ia.end()).size() == 10);
  CHECK(subsample(all, 0, 1).size() == 100);
  CHECK(subsample(all, 500, 1).size() == 100);
}

TEST_CASE("real data sets read with the row counts their README states", "[data]") {
  std::filesystem::path dir = test::shared_data_dir();
  if (dir.empty()) {
    WARN("skipped: ../shared/data not found");
    return;
  }
  CHECK(read_table(dir / "pe_sgd_text/pubmed/dev.csv").rows.size() == 1435);
  CHECK(read_table(dir / "pe_sgd_text/pubmed/test.csv").rows.size() == 4307);
  Table yelp = read_table(dir / "yelp_augpe/dev.csv");
  CHECK(yelp.rows.size() == 5000);
  CHECK(yelp.columns == std::vector<std::string>{"text", "label1", "label2"});
  CHECK_THAT(examples(yelp, "text", "label1")[0].label, Contains("Business Category: "));
  CHECK(read_table(dir / "glue_sst2/dev.tsv").rows.size() == 872);
  CHECK(read_table(dir / "imdb_subset/imdb_2499_clean.csv").rows.size() == 2499);
  CHECK(read_table(dir / "chatbot_arena_sample/chatbot_arena_conversations_sample.jsonl").rows.size() == 2129);
  Table qnli = read_table(dir / "glue_samples/qnli/dev.json");  // the GLUE JSON export
  CHECK(qnli.columns.size() == 3);
  CHECK(qnli.rows.front()[qnli.column("text_a")] ==
        "How long after the annexation of Kresy was the amendment made?");
  CHECK(qnli.rows.front()[qnli.column("label")] == "not_entailment");
}

TEST_CASE("dpft bench data reads the repeated rows and times the UTF-8 check", "[data][cli]") {
  test::TempDir tmp;
  // 2 rows (9 + 14 bytes) under an 8-byte header: 0.001 MB needs ceil((1000 - 8) / 23) = 44
  // repeats of the body.
  auto f = tmp.write("t.csv", "text,id\n\"a, b\",1\nhello world,2\n");
  std::string out;
  REQUIRE(test::cli({"bench", "data", "--file", f.string(), "--mb", "0.001", "--json"}, &out) == 0);
  auto j = nlohmann::json::parse(out);
  CHECK(j["rows"] == 88);
  CHECK(j["cells"] == 176);
  CHECK(j["cell_bytes"] == 44 * (4 + 1 + 11 + 1));
  CHECK(j["mb"].get<double>() == Approx((8 + 44 * 23) / 1e6));
  CHECK(j["utf8_check_share"].get<double>() >= 0);
  // A Latin-1 byte is refused by the read itself, as `dpft run` would refuse it.
  auto bad = tmp.write("bad.csv", "text\ncaf\xE9\n");
  CHECK(test::cli({"bench", "data", "--file", bad.string(), "--mb", "0.001"}) == 3);
}
