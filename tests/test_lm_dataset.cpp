// LM data pipeline: plain-text files, tokenization with truncation and eos on the real PubMed
// CSV with the GPT-2 tokenizer, packing into blocks, response masks (chat_format none and
// chatml with the Qwen tokenizer), dropped empty examples, train_extra indices, collation.
// Expected ids are built in the tests from the tokenizer's own encode() of each piece (the
// tokenizer has its own parity tests); the pipeline's job is how pieces are joined and scored.
#include <catch2/catch.hpp>

#include "core/config/spec.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/error.hpp"
#include "data/lm_dataset.hpp"
#include "methods/registry.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::data;
using Catch::Matchers::Contains;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

namespace {

// Each vocabulary is loaded once per process.
const tok::Tokenizer& gpt2_tok(const fs::path& dir) {
  static const tok::Tokenizer t = tok::load_tokenizer(dir);
  return t;
}
const tok::Tokenizer& qwen2_tok(const fs::path& dir) {
  static const tok::Tokenizer t = tok::load_tiktoken(dir / "qwen.tiktoken", "qwen2");
  return t;
}

Ids cat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<uint8_t> flags(std::initializer_list<std::pair<size_t, uint8_t>> runs) {
  std::vector<uint8_t> out;
  for (auto [n, v] : runs) out.insert(out.end(), n, v);
  return out;
}

}  // namespace

TEST_CASE("text format: one example per non-blank line, .txt detected", "[data]") {
  test::TempDir d;
  Table t = read_table(d.write("a.txt", " = Title = \n \n\n\tbody line\r\nlast"));
  CHECK(t.columns == std::vector<std::string>{"text"});
  REQUIRE(t.rows.size() == 3);
  CHECK(t.rows[0][0] == " = Title = ");
  CHECK(t.rows[1][0] == "\tbody line");
  CHECK(t.rows[2][0] == "last");
  CHECK(t.line == std::vector<int64_t>{1, 4, 5});
  CHECK(read_table(d.write("b.data", "x\ny\n"), "text").rows.size() == 2);
  SHARED_DATA_OR_SKIP(lm, "lm_text_misc");
  // grep -c '[^[:space:]]' wikitext-2_valid.txt = 2461
  CHECK(read_table(lm / "wikitext-2_valid.txt").rows.size() == 2461);
}

TEST_CASE("PubMed with GPT-2: truncation to max_length, eos when it fits, all ids scored",
          "[data]") {
  SHARED_DATA_OR_SKIP(g, "gpt2_tokenizer");
  SHARED_DATA_OR_SKIP(pm, "pe_sgd_text/pubmed");
  const tok::Tokenizer& tk = gpt2_tok(g);
  REQUIRE_FALSE(tk.add_bos());
  const int32_t eos = *tk.eos_id();
  CHECK(eos == 50256);
  auto ex = examples(read_table(pm / "dev.csv"), "text");
  ex.resize(200);
  LmDataOptions o;
  o.max_length = 256;
  LmDataset ds = build_lm_dataset(ex, tk, o);
  REQUIRE(ds.size() == 200);
  int64_t total = 0, with_eos = 0;
  for (size_t i = 0; i < ex.size(); ++i) {
    Ids full = tk.encode(ex[i].text);
    Ids want = full.size() < 256 ? cat(full, {eos}) : Ids(full.begin(), full.begin() + 256);
    with_eos += full.size() < 256;
    INFO("example " << i);
    CHECK(ds.items[i].index == static_cast<int64_t>(i));
    CHECK(ds.items[i].ids == want);
    CHECK(ds.items[i].scored == std::vector<uint8_t>(want.size(), 1));
    total += static_cast<int64_t>(want.size());
  }
  CHECK(ds.num_tokens() == total);
  CHECK(with_eos > 0);
  CHECK(with_eos < 200);  // some abstracts are longer than 256 tokens: both branches are covered
  o.add_eos = false;
  LmDataset no_eos = build_lm_dataset(ex, tk, o);
  CHECK(no_eos.items[0].ids ==
        Ids(ds.items[0].ids.begin(), ds.items[0].ids.end() - (ds.items[0].ids.back() == eos)));
}

TEST_CASE("packing: documents + eos concatenated, cut into full blocks, tail dropped", "[data]") {
  SHARED_DATA_OR_SKIP(g, "gpt2_tokenizer");
  SHARED_DATA_OR_SKIP(pm, "pe_sgd_text/pubmed");
  const tok::Tokenizer& tk = gpt2_tok(g);
  auto ex = examples(read_table(pm / "dev.csv"), "text");
  ex.resize(30);
  ex[3].text = "";  // an empty document is skipped, not turned into a lone eos
  Ids stream;
  for (const auto& e : ex)
    if (!e.text.empty()) stream = cat(cat(stream, tk.encode(e.text)), {*tk.eos_id()});
  LmDataOptions o;
  o.max_length = 100;
  o.packing = true;
  LmDataset ds = build_lm_dataset(ex, tk, o);
  const size_t blocks = stream.size() / 100;
  REQUIRE(blocks > 5);
  REQUIRE(ds.size() == static_cast<int64_t>(blocks));
  for (size_t k = 0; k < blocks; ++k) {
    CHECK(ds.items[k].index == static_cast<int64_t>(k));
    CHECK(ds.items[k].ids == Ids(stream.begin() + k * 100, stream.begin() + (k + 1) * 100));
    CHECK(ds.items[k].scored == std::vector<uint8_t>(100, 1));
  }
  CHECK(ds.num_tokens() == static_cast<int64_t>(blocks * 100));
}

TEST_CASE("empty and too-short examples are dropped and counted", "[data]") {
  SHARED_DATA_OR_SKIP(g, "gpt2_tokenizer");
  const tok::Tokenizer& tk = gpt2_tok(g);
  std::vector<Example> ex = {{0, "", "", {}}, {1, "a", "x", {}}, {2, "", "", {}}};
  LmDataset ds = build_lm_dataset(ex, tk, LmDataOptions{});
  REQUIRE(ds.size() == 1);
  CHECK(ds.dropped == 2);
  CHECK(ds.items[0].index == 1);
  CHECK(ds.items[0].label == "x");
  CHECK(ds.items[0].ids == cat(tk.encode("a"), {*tk.eos_id()}));
  LmDataOptions no_eos;
  no_eos.add_eos = false;
  CHECK(build_lm_dataset(ex, tk, no_eos).size() == 0);  // "a" alone is one id: nothing to predict
  LmDataOptions tiny;
  tiny.max_length = 1;
  CHECK_THROWS_AS(build_lm_dataset(ex, tk, tiny), ConfigError);
}

TEST_CASE("prompt/response pairs, chat_format none: response mask and truncation", "[data]") {
  SHARED_DATA_OR_SKIP(g, "gpt2_tokenizer");
  const tok::Tokenizer& tk = gpt2_tok(g);
  const int32_t eos = *tk.eos_id();
  Example e{4, " the response text.", "", std::string("Question: what is DP?\nAnswer:")};
  Ids p = tk.encode(*e.prompt), r = tk.encode(e.text);
  LmDataOptions o;
  o.response_only = true;
  LmDataset ds = build_lm_dataset({e}, tk, o);
  REQUIRE(ds.size() == 1);
  CHECK(ds.items[0].ids == cat(cat(p, r), {eos}));
  CHECK(ds.items[0].scored == flags({{p.size(), 0}, {r.size() + 1, 1}}));
  o.response_only = false;
  CHECK(build_lm_dataset({e}, tk, o).items[0].scored ==
        std::vector<uint8_t>(p.size() + r.size() + 1, 1));
  // truncated inside the response: no eos, the kept response ids are scored
  o.response_only = true;
  o.max_length = static_cast<int64_t>(p.size() + 2);
  LmDataset cut = build_lm_dataset({e}, tk, o);
  REQUIRE(cut.size() == 1);
  CHECK(cut.items[0].ids == cat(p, {r[0], r[1]}));
  CHECK(cut.items[0].scored == flags({{p.size(), 0}, {2, 1}}));
  // the prompt fills max_length: nothing left to score, dropped
  o.max_length = static_cast<int64_t>(p.size());
  LmDataset none = build_lm_dataset({e}, tk, o);
  CHECK(none.size() == 0);
  CHECK(none.dropped == 1);
}

TEST_CASE("prompt/response pairs, chatml with the Qwen tokenizer: only the answer is scored",
          "[data]") {
  SHARED_DATA_OR_SKIP(q, "qwen_tokenizer");
  const tok::Tokenizer& tk = qwen2_tok(q);
  Example e{0, "Differential privacy bounds what one record can change.", "",
            std::string("What is DP?")};
  const int32_t im_end = 151645;
  REQUIRE(tk.token_to_id("<|im_end|>") == im_end);
  tok::EncodeOptions special;
  special.allow_special = true;
  Ids head = tk.encode("<|im_start|>user\nWhat is DP?<|im_end|>\n<|im_start|>assistant\n", special);
  Ids answer = cat(tk.encode(e.text), {im_end});
  Ids tail = tk.encode("\n");
  LmDataOptions o;
  o.chat_format = ChatFormatChoice::kChatML;
  o.response_only = true;
  LmDataset ds = build_lm_dataset({e}, tk, o);
  REQUIRE(ds.size() == 1);
  CHECK(ds.items[0].ids ==
        cat(cat(head, answer), tail));  // no extra eos: the format closes the turn
  CHECK(ds.items[0].scored == flags({{head.size(), 0}, {answer.size(), 1}, {tail.size(), 0}}));
  o.response_only = false;
  CHECK(build_lm_dataset({e}, tk, o).items[0].scored ==
        std::vector<uint8_t>(ds.items[0].ids.size(), 1));
  // a plain example in the same set is not rendered as a chat
  Example plain{1, "just text", "", std::nullopt};
  CHECK(build_lm_dataset({plain}, tk, o).items[0].ids ==
        cat(tk.encode("just text"), {*tk.eos_id()}));
  // auto = the tokenizer's format: Qwen2 is qwen2.5, which adds its default system message
  o.chat_format = ChatFormatChoice::kAuto;
  Ids sys = tk.encode(
      std::string("<|im_start|>system\n") + tok::kQwen25DefaultSystem + "<|im_end|>\n", special);
  LmDataset a = build_lm_dataset({e}, tk, o);
  REQUIRE(a.items[0].ids.size() == sys.size() + ds.items[0].ids.size());
  CHECK(Ids(a.items[0].ids.begin(), a.items[0].ids.begin() + sys.size()) == sys);
  CHECK(Ids(a.items[0].ids.begin() + sys.size(), a.items[0].ids.end()) == ds.items[0].ids);
  // an unknown data.chat_format is the spec parser's (test_config)
}

TEST_CASE("load_lm_dataset: train + train_extra indices, subsampling, errors name the key",
          "[data]") {
  SHARED_DATA_OR_SKIP(g, "gpt2_tokenizer");
  const tok::Tokenizer& tk = gpt2_tok(g);
  test::TempDir d;
  Spec s =
      parse_spec(YAML::Load(fmt::format("data:\n  train: {{path: {0}/a.csv, label_column: y}}\n  "
                                        "train_extra:\n    - {{path: {0}/b.txt}}\n"
                                        "  max_length: 16\n",
                                        d.path.string())));
  d.write("a.csv", "text,y\nalpha one,p\nbeta two,n\ngamma three,p\n");
  d.write("b.txt", "delta four\n\nepsilon five\n");
  LmDataset ds = load_lm_dataset(s.data.train, s.data.train_extra, s.data, tk, 0);
  REQUIRE(ds.size() == 5);
  std::vector<int64_t> idx;
  for (auto& it : ds.items) idx.push_back(it.index);
  CHECK(idx == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(ds.items[1].label == "n");
  CHECK(ds.items[4].ids == cat(tk.encode("epsilon five"), {*tk.eos_id()}));
  // num_samples on data.train subsamples the concatenation
  s.data.train.num_samples = 3;
  LmDataset sub = load_lm_dataset(s.data.train, s.data.train_extra, s.data, tk, 1);
  CHECK(sub.size() == 3);
  CHECK(std::is_sorted(sub.items.begin(), sub.items.end(),
                       [](const auto& a, const auto& b) { return a.index < b.index; }));
  s.data.train_extra[0].path = (d.path / "missing.txt").string();
  CHECK_THROWS_WITH(load_lm_dataset(s.data.train, s.data.train_extra, s.data, tk, 0),
                    Contains("data.train_extra[0].path: data file"));
  CHECK_THROWS_AS(load_lm_dataset(s.data.train, s.data.train_extra, s.data, tk, 0), InputError);
  CHECK_THROWS_WITH(load_lm_dataset(s.data.eval, {}, s.data, tk, 0),
                    Contains("data.eval.path: not set"));
  DatasetSpec wrong_column;
  wrong_column.path = (d.path / "a.csv").string();
  wrong_column.text_column = "txt";
  CHECK_THROWS_WITH(read_examples(wrong_column, "data.train"),
                    Contains("data.train: ") && Contains("no column 'txt'"));
}

TEST_CASE("lm_data_options follows the data spec", "[data]") {
  Spec s = parse_spec(
      YAML::Load("data:\n  train: {prompt_column: q}\n  max_length: 64\n  packing: true\n"
                 "  add_eos: false\n  loss_on: response\n  chat_format: chatml\n"));
  LmDataOptions o = lm_data_options(s.data);
  CHECK(o.max_length == 64);
  CHECK(o.packing);
  CHECK_FALSE(o.add_eos);
  CHECK(o.response_only);
  CHECK(o.chat_format == ChatFormatChoice::kChatML);
  LmDataOptions def = lm_data_options(parse_spec(YAML::Node(YAML::NodeType::Map)).data);
  CHECK(def.max_length == 128);
  CHECK(def.add_eos);
  CHECK_FALSE(def.packing);
  CHECK_FALSE(def.response_only);
  CHECK(def.chat_format == ChatFormatChoice::kNone);
}

TEST_CASE("collate: right padding, attention mask, labels -100 at padding and unscored ids",
          "[data]") {
  LmDataset ds;
  ds.items.push_back({10, {5, 6, 7}, {0, 1, 1}, ""});
  ds.items.push_back({11, {1, 2, 3, 4, 8}, {1, 1, 0, 1, 1}, ""});
  LmBatch b = collate(ds, {1, 0}, 99);
  CHECK(b.index == std::vector<int64_t>{11, 10});
  CHECK(torch::equal(b.input_ids,
                     torch::tensor({{1, 2, 3, 4, 8}, {5, 6, 7, 99, 99}}, torch::kInt64)));
  CHECK(torch::equal(b.attention_mask,
                     torch::tensor({{1, 1, 1, 1, 1}, {1, 1, 1, 0, 0}}, torch::kInt64)));
  CHECK(torch::equal(b.labels,
                     torch::tensor({{1, 2, -100, 4, 8}, {-100, 6, 7, -100, -100}}, torch::kInt64)));
  LmBatch one = collate(ds, {0}, 99);
  CHECK(one.input_ids.sizes() == torch::IntArrayRef({1, 3}));
  LmBatch empty = collate(ds, {}, 99);
  CHECK(empty.input_ids.sizes() == torch::IntArrayRef({0, 1}));
  CHECK(empty.labels.sizes() == torch::IntArrayRef({0, 1}));
  CHECK(empty.index.empty());
  CHECK_THROWS_AS(collate(ds, {2}, 99), RuntimeError);
}

TEST_CASE("example_key: a pair is its two sentences; prompts do not change a text's key",
          "[lm-dataset]") {
  lm::Example a, b, c;
  a.text = b.text = c.text = "A premise.";
  a.text_pair = "One hypothesis.";
  b.text_pair = "Another hypothesis.";
  CHECK(data::example_key(a) != data::example_key(b));  // RTE reuses premises across pairs
  CHECK(data::example_key(a) != data::example_key(c));
  lm::Example p = c;
  p.prompt = "Summarise:";
  CHECK(data::example_key(p) == data::example_key(c));
}
