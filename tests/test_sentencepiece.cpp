// SentencePiece tokenizers (tokenizer.model of Llama-2 / Phi-3 and Mistral v0.1 / v0.3) through
// the official library: ids equal to the fixtures the official Python binding made
// (../shared/data/*/fixtures_*_spm.json) and to llama.cpp's llama-spm and phi-3 fixtures,
// decode inverting encode, the model's control pieces as special tokens, bos added, offsets,
// a SentencePiece-style tokenizer.json read through its tokenizer.model, and bad files named.
// Skips when ../shared/data is absent.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::tok;
using Catch::Matchers::Contains;
using Ids = std::vector<TokenId>;

namespace {

// {texts: [...], ids: [[...]], ...}: every text's ids equal, and decode gives the text back.
void check_fixture(const Tokenizer& t, const fs::path& file, size_t expected) {
  const nlohmann::json f = nlohmann::json::parse(read_file(file));
  const auto& texts = f.at("texts");
  REQUIRE(texts.size() == expected);
  CHECK(t.vocab_size() == f.at("vocab_size").get<int64_t>());
  size_t same = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    INFO(file.filename().string() << " #" << i << ": '" << text << "'");
    const Ids got = t.encode(text);
    CHECK(got == f.at("ids")[i].get<Ids>());
    same += got == f.at("ids")[i].get<Ids>();
    CHECK(t.decode(got) == text);
  }
  CHECK(same == expected);
}

// llama.cpp: X.inp = texts each followed by "\n__ggml_vocab_test__\n"; X.out = one line of
// space-separated ids per text.
void check_llamacpp(const Tokenizer& t, const fs::path& dir, const std::string& name) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  const std::string inp = read_file(dir / ("ggml-vocab-" + name + ".gguf.inp"));
  std::stringstream out(read_file(dir / ("ggml-vocab-" + name + ".gguf.out")));
  size_t n = 0, same = 0;
  for (size_t pos = 0; pos < inp.size(); ++n) {
    const size_t at = inp.find(sep, pos);
    REQUIRE(at != std::string::npos);
    const std::string text = inp.substr(pos, at - pos);
    pos = at + sep.size();
    std::string line;
    REQUIRE(std::getline(out, line));
    Ids want;
    std::stringstream ids(line);
    for (TokenId id; ids >> id;) want.push_back(id);
    INFO(name << " #" << n << ": '" << text << "'");
    const Ids got = t.encode(text);
    CHECK(got == want);
    same += got == want;
  }
  CHECK(n == 46);
  CHECK(same == n);
}

}  // namespace

TEST_CASE("SentencePiece: Llama-2 / Phi-3 ids equal the official library's and llama.cpp's",
          "[tokenizer][sentencepiece]") {
  SHARED_DATA_OR_SKIP(d, "llama2_tokenizer");
  const Tokenizer t = load_tokenizer(d / "tokenizer.model");  // a file
  CHECK(t.format() == "sentencepiece");
  CHECK(t.is_sentencepiece());
  check_fixture(t, d / "fixtures_llama2_spm.json", 60);
  const fs::path llamacpp = d.parent_path() / "tokenizer_parity_llamacpp";
  if (fs::exists(llamacpp)) {
    check_llamacpp(t, llamacpp, "llama-spm");
    check_llamacpp(t, llamacpp, "phi-3");  // Phi-3's tokenizer.model is Llama-2's
  }
  // A directory holding it: the same tokenizer.
  test::TempDir tmp;
  fs::copy_file(d / "tokenizer.model", tmp.path / "tokenizer.model");
  CHECK(load_tokenizer(tmp.path).encode("Hello world") == Ids{15043, 3186});
}

TEST_CASE("SentencePiece: Mistral v0.1 and v0.3 ids equal the official library's",
          "[tokenizer][sentencepiece]") {
  SHARED_DATA_OR_SKIP(d, "mistral_tokenizer");
  check_fixture(load_tokenizer(d / "v0.1" / "tokenizer.model"),
                d / "v0.1" / "fixtures_mistral_v0.1_spm.json", 60);
  check_fixture(load_tokenizer(d / "v0.3" / "tokenizer.model.v3"),
                d / "v0.3" / "fixtures_mistral_v0.3_spm.json", 60);
}

TEST_CASE("SentencePiece: control pieces are special tokens; bos added; offsets",
          "[tokenizer][sentencepiece]") {
  SHARED_DATA_OR_SKIP(d, "llama2_tokenizer");
  const Tokenizer t = load_tokenizer(d / "tokenizer.model");
  CHECK(t.bos_id() == 1);
  CHECK(t.eos_id() == 2);
  CHECK(t.add_bos());
  CHECK_FALSE(t.add_eos());
  CHECK(t.is_special(0));  // <unk>
  CHECK(t.is_special(1));
  CHECK(t.piece(1) == "<s>");
  CHECK(t.piece(15043) == "\xe2\x96\x81Hello");  // ▁Hello
  CHECK(t.token_to_id("\xe2\x96\x81Hello") == 15043);
  CHECK(t.token_to_id("no such piece") == std::nullopt);
  EncodeOptions with;
  with.add_special = true;
  CHECK(t.encode("Hello world", with) == Ids{1, 15043, 3186});
  // "<s>" in text: ordinary text unless specials are allowed.
  CHECK(t.encode("<s>") != Ids{1});
  EncodeOptions allow;
  allow.allow_special = true;
  const Ids both = t.encode("<s>Hello", allow);
  REQUIRE_FALSE(both.empty());
  CHECK(both[0] == 1);
  CHECK(Ids(both.begin() + 1, both.end()) == t.encode("Hello"));
  CHECK(t.decode({1, 15043, 3186, 2}) == "<s>Hello world</s>");
  CHECK(t.decode({1, 15043, 3186, 2}, /*skip_special=*/true) == "Hello world");
  // Each id's byte range in the text: in order, covering it.
  const std::string text = "Hello, world!\nNew line";
  const Encoding e = t.encode_with_offsets(text);
  REQUIRE(e.offsets.size() == e.ids.size());
  CHECK(e.ids == t.encode(text));
  uint32_t last = 0;
  for (const Span& s : e.offsets) {
    CHECK(s.begin >= last);
    CHECK(s.end >= s.begin);
    last = s.end;
  }
  CHECK(last == text.size());
  // Truncation and batches work as for BPE tokenizers.
  EncodeOptions cut = with;
  cut.max_length = 3;
  CHECK(t.encode("Hello world, how are you?", cut).size() == 3);
}

TEST_CASE("SentencePiece: tokenizer.json of the SentencePiece kind reads its tokenizer.model",
          "[tokenizer][sentencepiece]") {
  SHARED_DATA_OR_SKIP(d, "mistral_tokenizer");
  test::TempDir tmp;
  const fs::path v3 = d / "v0.3";
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(v3 / f, tmp.path / f);
  // Without the model file: told to put it there.
  CHECK_THROWS_WITH(load_tokenizer(tmp.path), Contains("put its tokenizer.model beside it"));
  fs::copy_file(v3 / "tokenizer.model.v3", tmp.path / "tokenizer.model");
  const Tokenizer t = load_tokenizer(tmp.path);
  CHECK(t.format() == "sentencepiece");
  CHECK(t.vocab_size() == 32768);
  CHECK(t.encode("Hello world") == Ids{23325, 2294});
  EncodeOptions allow;
  allow.allow_special = true;
  CHECK(t.encode("[INST]", allow) == Ids{3});  // a control piece of the model
  CHECK(t.is_special(4));                      // [/INST]
  CHECK(t.add_bos());                          // tokenizer_config.json: add_bos_token true
}

TEST_CASE("SentencePiece: the dummy prefix after a special token follows HF's legacy setting",
          "[tokenizer][sentencepiece]") {
  SHARED_DATA_OR_SKIP(d, "mistral_tokenizer");
  const fs::path v3 = d / "v0.3";
  EncodeOptions allow;
  allow.allow_special = true;
  const Ids first_only_ids = [&] {
    // "Hello" with no dummy prefix is its own piece; "▁world" is 2294.
    const Tokenizer alone = load_tokenizer(v3 / "tokenizer.model.v3");
    const auto hello = alone.token_to_id("Hello");
    REQUIRE(hello);
    CHECK(*hello != 23325);
    // The model file alone: every stretch gets the prefix (HF legacy: true).
    CHECK(alone.encode("[INST]Hello world", allow) == Ids{3, 23325, 2294});
    CHECK(alone.decode({3, 23325, 2294}) == "[INST]Hello world");
    return Ids{3, *hello, 2294};
  }();
  test::TempDir tmp;
  fs::copy_file(v3 / "tokenizer.model.v3", tmp.path / "tokenizer.model");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) {
    // tokenizer.json's Metaspace prepend_scheme "first", then tokenizer_config.json's
    // legacy: false alone: the prefix only where the text starts.
    fs::copy_file(v3 / f, tmp.path / f);
    if (std::string(f) == "tokenizer_config.json") fs::remove(tmp.path / "tokenizer.json");
    INFO(f);
    const Tokenizer t = load_tokenizer(tmp.path);
    CHECK(t.encode("Hello world") == Ids{23325, 2294});
    CHECK(t.encode("[INST]Hello world", allow) == first_only_ids);
    CHECK(t.decode(first_only_ids) == "[INST]Hello world");
    CHECK(t.decode({23325, 2294, 4, 23325}) == "Hello world[/INST] Hello");
  }
}

TEST_CASE("SentencePiece: files that are not SentencePiece models are named",
          "[tokenizer][sentencepiece]") {
  test::TempDir tmp;
  fs::create_directories(tmp.path / "sp");
  tmp.write("sp/tokenizer.model", std::string("\x0a\x0b\x0a\x05<unk>\x15", 10));
  CHECK_THROWS_WITH(load_tokenizer(tmp.path / "sp"), Contains("not a SentencePiece model"));
  CHECK_THROWS_AS(load_tokenizer(tmp.path / "sp"), InputError);
  tmp.write("junk.model", "\x0a garbage that is no protobuf");
  CHECK_THROWS_WITH(load_tokenizer(tmp.path / "junk.model"),
                    Contains("junk.model: not a SentencePiece model"));
}

TEST_CASE("SentencePiece chat formats: Llama-2 and Mistral v0.3 prompts encode as their text",
          "[tokenizer][sentencepiece][chat]") {
  SHARED_DATA_OR_SKIP(d, "llama2_tokenizer");
  SHARED_DATA_OR_SKIP(mistral_dir, "mistral_tokenizer");
  const fs::path m = mistral_dir / "v0.3";
  test::TempDir tmp;
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(m / f, tmp.path / f);
  fs::copy_file(m / "tokenizer.model.v3", tmp.path / "tokenizer.model");
  const Tokenizer llama2 = load_tokenizer(d / "tokenizer.model");
  const Tokenizer mistral = load_tokenizer(tmp.path);
  CHECK(mistral.chat_format() == ChatFormat::kMistral);  // from its chat_template
  const std::vector<ChatMessage> conv = {{"system", "Answer briefly."},
                                         {"user", "What is 2+2?"},
                                         {"assistant", "4."},
                                         {"user", "And 3+3?"},
                                         {"assistant", "6, of course."}};
  EncodeOptions allow;
  allow.allow_special = true;
  for (const auto& [t, f] : {std::pair<const Tokenizer*, ChatFormat>{&llama2, ChatFormat::kLlama2},
                             {&mistral, ChatFormat::kMistral}}) {
    INFO(chat_format_name(f));
    const ChatPrompt p = render_chat(*t, conv, false, f);
    const ChatEncoding e = encode_chat(*t, p);
    // The rendered text encoded whole with its control tokens (what HF's apply_chat_template
    // tokenizes) gives the same ids: runs between control tokens are encoded whole.
    CHECK(e.ids == t->encode(p.text, allow));
    CHECK(t->decode(e.ids) == p.text);
    REQUIRE(e.response_tokens.size() == 2);
    auto text_of = [&](std::pair<size_t, size_t> r) {
      return t->decode(Ids(e.ids.begin() + r.first, e.ids.begin() + r.second));
    };
    const bool l2 = f == ChatFormat::kLlama2;
    CHECK(text_of(e.response_tokens[1]) == (l2 ? "6, of course. </s>" : "6, of course.</s>"));
    CHECK(e.ids[e.response_tokens[1].second - 1] == 2);  // </s> closes the response
    CHECK(std::count(e.response_mask.begin(), e.response_mask.end(), 1) ==
          static_cast<long>(e.response_tokens[0].second - e.response_tokens[0].first +
                            e.response_tokens[1].second - e.response_tokens[1].first));
  }
  // Mistral v0.3's [INST] / [/INST] are control pieces 3 / 4; a user typing them stays text.
  const ChatEncoding typed =
      encode_chat(mistral, render_chat(mistral, {{"user", "[INST]x"}}, true));
  CHECK(std::count(typed.ids.begin(), typed.ids.end(), 3) == 1);
  CHECK(std::count(typed.ids.begin(), typed.ids.end(), 4) == 1);
  CHECK(typed.ids.front() == 1);  // <s>
}
