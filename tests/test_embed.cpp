// Sentence embeddings (`dpft embed`, core/eval/embed.hpp), the encoder tokenizer, and .npy files.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>

#include "core/eval/embed.hpp"
#include "core/model/checkpoint.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/npy.hpp"
#include "test_util.hpp"

using namespace dpft;

namespace {

// Runs /usr/bin/python3 -c CODE ARGS...; "" when it fails or python3 / numpy is missing.
std::string embed_test_python(const std::string& code, const std::vector<std::string>& args) {
  std::string cmd = "/usr/bin/python3 -c '" + code + "'";
  for (const auto& a : args) cmd += " '" + a + "'";
  cmd += " 2>/dev/null";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    if (pclose(p) != 0) return "";
  }
  return out;
}

bool have_numpy() {
  return !embed_test_python("import numpy; print(1)", {}).empty();
}

}  // namespace

TEST_CASE("write_npy files open with numpy.load: shape, dtype and values", "[npy]") {
  if (!have_numpy()) {
    WARN("skipped: /usr/bin/python3 with numpy is missing (scripts/setup.sh installs it)");
    return;
  }
  test::TempDir d;
  const torch::Tensor m = torch::arange(12, torch::kFloat32).view({3, 4}) / 7.0;
  write_npy(d.path / "m.npy", m);
  write_npy(d.path / "v.npy", torch::tensor({5, -6, 7}, torch::kInt64));
  write_npy(d.path / "t.npy", torch::zeros({2, 0, 3}, torch::kFloat64));
  const std::string code =
      "import numpy as np, sys\n"
      "for f in sys.argv[1:]:\n"
      "    a = np.load(f)\n"
      "    print(a.dtype, a.shape, repr(a.ravel().tolist()))";
  const std::string out = embed_test_python(
      code,
      {(d.path / "m.npy").string(), (d.path / "v.npy").string(), (d.path / "t.npy").string()});
  REQUIRE_FALSE(out.empty());
  std::string want_m = "float32 (3, 4) [";
  for (int i = 0; i < 12; ++i) {
    // numpy prints the float32 value widened to a Python float: repr of that double.
    const float v = static_cast<float>(i) / 7.0f;
    std::string r = fmt::format("{}", static_cast<double>(v));  // shortest round trip, as repr
    if (r.find('.') == std::string::npos) r += ".0";            // repr(1.0) is "1.0"
    want_m += (i ? ", " : "") + r;
  }
  want_m += "]\n";
  CHECK(out == want_m + "int64 (3,) [5, -6, 7]\nfloat64 (2, 0, 3) []\n");
  // The data starts on a 64-byte boundary (the format's alignment).
  const std::string raw = read_file(d.path / "m.npy");
  CHECK(raw.size() - 12 * 4 == 128);
  CHECK_THROWS_AS(write_npy(d.path / "b.npy", torch::zeros({2}, torch::kBFloat16)), ConfigError);
}

TEST_CASE("encoder tokenizers: BERT WordPiece and RoBERTa BPE templates, pad and mask ids",
          "[encoder][tokenizer]") {
  SHARED_DATA_OR_SKIP(bert, "bert_base_uncased_vocab");
  SHARED_DATA_OR_SKIP(roberta, "roberta_tokenizer");
  const auto b = tok::EncoderTokenizer::load(bert);
  CHECK(b.kind() == "wordpiece");
  CHECK(b.vocab_size() == 30522);
  CHECK(b.pad_id() == 0);
  CHECK(b.mask_id() == 103);
  auto e = b.encode("Hello, world!", std::string_view("Yes."));
  // [CLS] hello , world ! [SEP] yes . [SEP]
  CHECK(e.ids == std::vector<int64_t>{101, 7592, 1010, 2088, 999, 102, 2748, 1012, 102});
  CHECK(e.type_ids == std::vector<int64_t>{0, 0, 0, 0, 0, 0, 1, 1, 1});
  const auto r = tok::EncoderTokenizer::load(roberta);
  CHECK(r.kind() == "bpe");
  CHECK(r.pad_id() == 1);
  CHECK(r.mask_id() == 50264);
  auto f = r.encode("Hello", std::string_view("world"));
  CHECK(f.ids.front() == 0);  // <s>
  CHECK(f.ids.back() == 2);   // </s>
  CHECK(f.ids.size() == 6);   // <s> Hello </s></s> world </s>
}

TEST_CASE("embed_texts: each row is the text's own embedding, unit length, input order",
          "[encoder][embed]") {
  SHARED_DATA_OR_SKIP(bert, "bert_base_uncased_vocab");
  test::TempDir d;
  REQUIRE(test::cli({"model", "init", "--arch", "bert", "--preset", "tiny", "--tokenizer",
                     bert.string(), "--out", (d.path / "m").string(), "--seed", "3"}) == 0);
  model::CausalLM m = model::load_checkpoint(d.path / "m");
  model::Encoder enc = model::as_encoder(m);
  REQUIRE(enc);
  const auto tk = tok::EncoderTokenizer::load(d.path / "m");
  const std::vector<std::string> texts = {
      "a short one", "a much longer sentence with more words in it", "", "mid length text here"};
  eval::EmbedOptions o;
  o.batch = 3;  // two batches, of mixed lengths (padding inside a batch)
  torch::Tensor e = eval::embed_texts(*enc, tk, texts, o);
  REQUIRE(e.sizes() == torch::IntArrayRef({4, 64}));
  CHECK(torch::allclose(e.norm(2, 1), torch::ones({4}), 1e-5, 1e-5));
  for (size_t i = 0; i < texts.size(); ++i) {  // alone: no padding, batch of one
    eval::EmbedOptions one;
    one.batch = 1;
    torch::Tensor alone = eval::embed_texts(*enc, tk, {texts[i]}, one);
    INFO(texts[i]);
    CHECK((alone[0] - e[static_cast<int64_t>(i)]).abs().max().item<double>() < 1e-5);
  }
  // Truncation: a cap of 4 tokens keeps [CLS] a much [SEP].
  o.max_length = 4;
  torch::Tensor cut = eval::embed_texts(*enc, tk, {texts[1]}, o);
  torch::Tensor want = eval::embed_texts(*enc, tk, {"a much"}, o);
  CHECK((cut - want).abs().max().item<double>() < 1e-6);
  CHECK(eval::embed_texts(*enc, tk, {}, o).sizes() == torch::IntArrayRef({0, 64}));
}

TEST_CASE("dpft embed writes .npy and .jsonl with the same vectors; bad use exits 2",
          "[encoder][embed][cli]") {
  SHARED_DATA_OR_SKIP(bert, "bert_base_uncased_vocab");
  test::TempDir d;
  const std::string m = (d.path / "m").string();
  REQUIRE(test::cli({"model", "init", "--arch", "bert", "--preset", "tiny", "--tokenizer",
                     bert.string(), "--out", m}) == 0);
  std::ofstream(d.path / "in.csv") << "id,text\n1,first text\n2,\"second, with a comma\"\n";
  REQUIRE(test::cli({"embed", "--model", m, "--input", (d.path / "in.csv").string(), "--out",
                     (d.path / "e.jsonl").string(), "--batch", "1"}) == 0);
  std::string out;
  REQUIRE(test::cli({"embed", "--model", m, "--input", (d.path / "in.csv").string(), "--out",
                     (d.path / "e.npy").string()},
                    &out) == 0);
  CHECK_THAT(out, Catch::Contains("2 texts x 64 dims") && Catch::Contains("not a DP release"));
  std::vector<std::vector<float>> rows;
  std::ifstream in(d.path / "e.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    CHECK(j["index"] == rows.size());
    rows.push_back(j["embedding"].get<std::vector<float>>());
  }
  REQUIRE(rows.size() == 2);
  const std::string raw = read_file(d.path / "e.npy");
  REQUIRE(raw.size() == 128 + 2 * 64 * 4);
  for (size_t r = 0; r < 2; ++r)
    for (size_t c = 0; c < 64; ++c) {
      float v;
      std::memcpy(&v, raw.data() + 128 + (r * 64 + c) * 4, 4);
      CHECK(std::abs(v - rows[r][c]) < 1e-6);
    }
  CHECK(test::cli({"embed", "--model", m, "--input", (d.path / "in.csv").string(), "--out",
                   (d.path / "e.csv").string()}) == 2);
  CHECK(test::cli({"embed", "--model", m, "--input", (d.path / "in.csv").string(), "--column",
                   "body", "--out", (d.path / "e.npy").string()}) == 3);
  const std::string gpt2 = std::string(DPFT_SOURCE_DIR) + "/models/tiny-gpt2";
  CHECK(test::cli({"embed", "--model", gpt2, "--input", (d.path / "in.csv").string(), "--out",
                   (d.path / "g.npy").string()}) == 2);
}
