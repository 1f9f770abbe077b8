// Tokenizer loaders: HF tokenizer.json, GPT-2 vocab.json + merges, tiktoken rank files, and
// tokenizer_config.json (see load.hpp and docs/tokenizers.md).
#include "core/tokenizer/load.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <limits>
#include <unordered_set>

#include "core/tokenizer/unicode.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::tok {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& p) {
  std::string text = read_file(p);
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", p.string(), e.what()));
  }
}

// Token text in the byte-level spelling -> bytes, or InputError naming where it came from.
std::string spelled_to_bytes(const std::string& spelled, const std::string& where) {
  std::string bytes;
  if (!byte_level_to_bytes(spelled, bytes))
    throw InputError(
        fmt::format("{}: '{}' is not spelled in the byte-level alphabet: not a byte-level "
                    "BPE vocabulary",
                    where, spelled));
  return bytes;
}

// "<s>", "</s>", "<pad>", "<|endoftext|>": the shape of control tokens in vocab.json files.
bool looks_like_control_token(const std::string& s) {
  if (s.size() < 3 || s.front() != '<' || s.back() != '>') return false;
  for (size_t i = 1; i + 1 < s.size(); ++i)
    if (s[i] == '<' || s[i] == '>' || std::isspace(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

std::optional<TokenId> find_token(const TokenizerParts& p, const std::string& s) {
  for (const auto& t : p.added)
    if (t.content == s) return t.id;
  if (p.spm) return p.spm->find(s);
  std::string bytes;
  if (byte_level_to_bytes(s, bytes)) {
    if (auto id = p.bpe->find(bytes)) return id;
    for (const auto& e : p.inert)
      if (e.bytes == bytes) return e.id;
  }
  return std::nullopt;
}

std::optional<TokenId> find_added(const TokenizerParts& p, const char* content) {
  for (const auto& t : p.added)
    if (t.content == content) return t.id;
  return std::nullopt;
}

// bos/eos/pad from the usual control tokens when nothing set them: RoBERTa's <s> </s> <pad>,
// GPT-2's <|endoftext|> (bos = eos, as HF's GPT-2 tokenizer has it).
void default_special_ids(TokenizerParts& p) {
  auto s = find_added(p, "<s>"), e = find_added(p, "</s>"), eot = find_added(p, "<|endoftext|>");
  if (!p.bos) p.bos = s ? s : eot;
  if (!p.eos) p.eos = e ? e : eot;
  if (!p.pad) p.pad = find_added(p, "<pad>");
}

std::string pattern_name(const std::string& pattern) {
  if (pattern == kGpt2Pattern) return "gpt2";
  if (pattern == kLlama3Pattern) return "llama3";
  if (pattern == kQwen2Pattern) return "qwen2";
  return "custom";
}

// ---- HF tokenizer.json ---------------------------------------------------------------------

struct PreTokenizerSpec {
  std::string pattern;
  bool byte_level = false;
  bool add_prefix_space = false;
};

void parse_pre_tokenizer(const json& pt, PreTokenizerSpec& out, const std::string& origin) {
  const std::string type = pt.at("type").get<std::string>();
  auto set_pattern = [&](std::string p) {
    if (!out.pattern.empty())
      throw InputError(
          fmt::format("{}: pre_tokenizer splits with two regexes; only one is supported", origin));
    out.pattern = std::move(p);
  };
  if (type == "ByteLevel") {
    out.byte_level = true;
    out.add_prefix_space = pt.value("add_prefix_space", false);
    if (pt.value("use_regex", true)) set_pattern(kGpt2Pattern);
  } else if (type == "Split") {
    if (out.byte_level)
      throw InputError(
          fmt::format("{}: pre_tokenizer has a Split after ByteLevel; only Split then "
                      "ByteLevel is supported",
                      origin));
    const json& pat = pt.at("pattern");
    if (!pat.contains("Regex"))
      throw InputError(fmt::format(
          "{}: pre_tokenizer Split by a plain string is not supported (a Regex is)", origin));
    std::string behavior = pt.value("behavior", "Isolated");
    if (behavior != "Isolated" || pt.value("invert", false))
      throw InputError(
          fmt::format("{}: pre_tokenizer Split with behavior '{}'{} is not supported (Isolated "
                      "is)",
                      origin, behavior, pt.value("invert", false) ? " inverted" : ""));
    set_pattern(pat.at("Regex").get<std::string>());
  } else if (type == "Sequence") {
    for (const json& sub : pt.at("pretokenizers")) parse_pre_tokenizer(sub, out, origin);
  } else {
    throw InputError(
        fmt::format("{}: pre_tokenizer type '{}' is not supported (ByteLevel, Split + "
                    "ByteLevel, Sequence of those)",
                    origin, type));
  }
}

void parse_post_processor(const json& pp, TokenizerParts& p, const std::string& origin) {
  if (pp.is_null()) return;
  const std::string type = pp.at("type").get<std::string>();
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& sub : pp.at("processors")) parse_post_processor(sub, p, origin);
  } else if (type == "TemplateProcessing") {
    std::vector<TokenId> before, after;
    bool seen_text = false;
    for (const json& item : pp.at("single")) {
      if (item.contains("Sequence")) {
        seen_text = true;
      } else if (item.contains("SpecialToken")) {
        std::string name = item["SpecialToken"].at("id").get<std::string>();
        for (const json& id : pp.at("special_tokens").at(name).at("ids"))
          (seen_text ? after : before).push_back(id.get<TokenId>());
      }
    }
    if (before.size() > 1 || after.size() > 1)
      throw InputError(
          fmt::format("{}: post_processor adds more than one token before or after the text; "
                      "only a bos and an eos are supported",
                      origin));
    if (!before.empty()) {
      p.bos = before[0];
      p.add_bos = true;
    }
    if (!after.empty()) {
      p.eos = after[0];
      p.add_eos = true;
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    p.bos = pp.at("cls").at(1).get<TokenId>();
    p.eos = pp.at("sep").at(1).get<TokenId>();
    p.add_bos = p.add_eos = true;
  } else {
    throw InputError(
        fmt::format("{}: post_processor type '{}' is not supported (ByteLevel, "
                    "TemplateProcessing, RobertaProcessing, Sequence)",
                    origin, type));
  }
}

TokenizerParts parts_from_hf_json(const fs::path& file) {
  const std::string origin = file.string();
  json j = read_json(file);
  TokenizerParts p;
  p.source = origin;
  p.format = "tokenizer.json";
  try {
    if (!j.is_object() || !j.contains("model"))
      throw InputError(fmt::format("{}: no \"model\" block: not a HF tokenizer.json", origin));
    const json& m = j["model"];
    const std::string type = m.value("type", "BPE");
    if (type != "BPE")
      throw InputError(
          fmt::format("{}: model type '{}' is not supported (byte-level BPE only)", origin, type));
    if (m.value("byte_fallback", false))
      throw InputError(fmt::format(
          "{}: a SentencePiece-style tokenizer.json (byte_fallback BPE) is read from the "
          "model's SentencePiece file: put its tokenizer.model beside it",
          origin));
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty())
        throw InputError(
            fmt::format("{}: model.{} is not supported (byte-level BPE has none)", origin, key));

    std::unordered_set<TokenId> added_ids;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      for (const json& a : j["added_tokens"]) {
        p.added.push_back({a.at("content").get<std::string>(), a.at("id").get<TokenId>(),
                           a.value("special", false)});
        added_ids.insert(p.added.back().id);
      }
    }
    std::vector<BpeModel::Entry> vocab;
    vocab.reserve(m.at("vocab").size());
    for (const auto& [spelled, id] : m.at("vocab").items()) {
      TokenId tid = id.get<TokenId>();
      if (added_ids.count(tid)) continue;  // matched and decoded as an added token
      vocab.push_back({spelled_to_bytes(spelled, origin + ": model.vocab"), tid});
    }
    std::vector<BpeModel::MergeRule> rules;
    rules.reserve(m.at("merges").size());
    for (const json& mg : m.at("merges")) {
      std::string a, b;
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw InputError(fmt::format(
              "{}: model.merges entry '{}' is not two tokens separated by one space", origin, s));
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (mg.is_array() && mg.size() == 2) {
        a = mg[0].get<std::string>(), b = mg[1].get<std::string>();
      } else {
        throw InputError(fmt::format("{}: model.merges entry {} is neither \"a b\" nor [a, b]",
                                     origin, mg.dump()));
      }
      rules.push_back({spelled_to_bytes(a, origin + ": model.merges"),
                       spelled_to_bytes(b, origin + ": model.merges"), 0});
    }
    auto bpe = BpeModel::from_merges(std::move(vocab), rules, origin);
    bpe.set_ignore_merges(m.value("ignore_merges", false));
    p.bpe = std::make_unique<BpeModel>(std::move(bpe));

    const json& norm = j.contains("normalizer") ? j["normalizer"] : json();
    if (!norm.is_null()) {
      std::string nt = norm.at("type").get<std::string>();
      if (nt == "NFC")
        spdlog::warn(
            "{}: the NFC normalizer is not applied; text is encoded as given (NFC text encodes "
            "identically)",
            origin);
      else if (!(nt == "Sequence" && norm.value("normalizers", json::array()).empty()))
        throw InputError(
            fmt::format("{}: normalizer '{}' is not supported (none, or NFC)", origin, nt));
    }
    if (!j.contains("pre_tokenizer") || j["pre_tokenizer"].is_null())
      throw InputError(fmt::format("{}: no pre_tokenizer: not a byte-level BPE tokenizer", origin));
    PreTokenizerSpec pre;
    parse_pre_tokenizer(j["pre_tokenizer"], pre, origin);
    if (!pre.byte_level)
      throw InputError(
          fmt::format("{}: the pre_tokenizer has no ByteLevel step: not a byte-level BPE", origin));
    if (pre.pattern.empty())
      throw InputError(fmt::format("{}: the pre_tokenizer has no splitting regex", origin));
    p.pattern = pre.pattern;
    p.pretokenizer = pattern_name(pre.pattern);
    p.add_prefix_space = pre.add_prefix_space;
    if (j.contains("post_processor")) parse_post_processor(j["post_processor"], p, origin);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: malformed tokenizer.json: {}", origin, e.what()));
  }
  default_special_ids(p);
  return p;
}

// ---- GPT-2 vocab.json + merges.txt ---------------------------------------------------------

TokenizerParts parts_from_vocab_merges(const fs::path& vocab_path, const fs::path& merges_path) {
  const std::string vorigin = vocab_path.string(), morigin = merges_path.string();
  json v = read_json(vocab_path);
  if (!v.is_object())
    throw InputError(fmt::format("{}: expected a JSON object {{token: id}}", vorigin));
  std::string text = read_file(merges_path);
  std::vector<BpeModel::MergeRule> rules;
  std::unordered_set<std::string> used;  // tokens merges produce or consume
  size_t pos = 0, line = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string l = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (l.empty() || (line == 1 && l.rfind("#version", 0) == 0)) continue;
    size_t sp = l.find(' ');
    if (sp == std::string::npos || l.find(' ', sp + 1) != std::string::npos)
      throw InputError(fmt::format(
          "{}: line {}: expected two tokens separated by one space, got '{}'", morigin, line, l));
    std::string where = fmt::format("{}: line {}", morigin, line);
    BpeModel::MergeRule r{spelled_to_bytes(l.substr(0, sp), where),
                          spelled_to_bytes(l.substr(sp + 1), where), line};
    used.insert(r.left);
    used.insert(r.right);
    used.insert(r.left + r.right);
    rules.push_back(std::move(r));
  }
  TokenizerParts p;
  p.source = vorigin;
  p.format = "vocab+merges";
  std::vector<BpeModel::Entry> vocab;
  for (const auto& [spelled, idj] : v.items()) {
    if (!idj.is_number_integer())
      throw InputError(fmt::format("{}: the id of '{}' is not an integer", vorigin, spelled));
    TokenId id = idj.get<TokenId>();
    std::string bytes;
    bool spelled_ok = byte_level_to_bytes(spelled, bytes);
    if (spelled_ok && (bytes.size() == 1 || used.count(bytes))) {
      vocab.push_back({std::move(bytes), id});  // BPE can produce it
    } else if (looks_like_control_token(spelled)) {
      p.added.push_back({spelled, id, true});  // <s>, </s>, <pad>, <|endoftext|>, ...
    } else if (spelled_ok) {
      p.inert.push_back(
          {std::move(bytes), id});  // e.g. fairseq's madeupword0000: decodes, never produced
    } else {
      spelled_to_bytes(spelled, vorigin);  // throws with the message
    }
  }
  p.bpe = std::make_unique<BpeModel>(BpeModel::from_merges(std::move(vocab), rules, morigin));
  p.pattern = kGpt2Pattern;
  p.pretokenizer = "gpt2";
  default_special_ids(p);
  // RoBERTa layout: HF wraps every text in <s> ... </s>.
  if (find_added(p, "<s>") && find_added(p, "</s>")) p.add_bos = p.add_eos = true;
  return p;
}

// ---- tiktoken ------------------------------------------------------------------------------

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

bool base64_decode(std::string_view in, std::string& out) {
  out.clear();
  if (in.size() % 4 != 0) return false;
  for (size_t i = 0; i < in.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int k = 0; k < 4; ++k) {
      unsigned char c = static_cast<unsigned char>(in[i + k]);
      if (c == '=' && i + 4 == in.size() && k >= 2) {
        v[k] = 0;
        ++pad;
      } else {
        if (pad) return false;  // data after padding
        v[k] = base64_value(c);
        if (v[k] < 0) return false;
      }
    }
    uint32_t n =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>(n >> 16));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xFF));
  }
  return true;
}

// Parses "<base64> <rank>" lines; nullopt from the first line when it is not one (sniffing).
std::optional<std::vector<BpeModel::Entry>> parse_tiktoken(const std::string& text,
                                                           const std::string& origin,
                                                           bool sniff_only) {
  std::vector<BpeModel::Entry> out;
  size_t pos = 0, line = 0;
  std::string bytes;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    std::string_view l(text.data() + pos, nl - pos);
    pos = nl + 1;
    ++line;
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    if (l.empty()) continue;
    size_t sp = l.find(' ');
    bool ok = sp != std::string_view::npos && sp > 0 && sp + 1 < l.size() &&
              base64_decode(l.substr(0, sp), bytes);
    long long rank = -1;
    if (ok) {
      std::string_view num = l.substr(sp + 1);
      ok = num.size() <= 10 &&
           std::all_of(num.begin(), num.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (ok) rank = std::stoll(std::string(num));
      ok = ok && rank <= std::numeric_limits<TokenId>::max();
    }
    if (!ok) {
      if (sniff_only) return std::nullopt;
      throw InputError(fmt::format("{}: line {}: expected '<base64 token> <rank>'", origin, line));
    }
    if (sniff_only) return out;
    out.push_back({bytes, static_cast<TokenId>(rank)});
  }
  if (out.empty() && !sniff_only) throw InputError(fmt::format("{}: no ranks in the file", origin));
  return out;
}

void check_family(const std::string& family) {
  if (std::find(kTiktokenFamilies.begin(), kTiktokenFamilies.end(), family) ==
      kTiktokenFamilies.end())
    throw ConfigError(fmt::format("tiktoken family '{}' is not known; allowed: {}", family,
                                  join(kTiktokenFamilies, ", ")));
}

TokenizerParts parts_from_tiktoken(const fs::path& file, const std::string& family) {
  check_family(family);
  const std::string origin = file.string();
  auto ranks = *parse_tiktoken(read_file(file), origin, false);
  TokenId max_rank = 0;
  for (const auto& e : ranks) max_rank = std::max(max_rank, e.id);
  TokenizerParts p;
  p.source = origin;
  p.format = "tiktoken";
  auto bpe = BpeModel::from_ranks(std::move(ranks), origin);
  bpe.set_ignore_merges(true);  // tiktoken emits a piece that is a token as is
  p.bpe = std::make_unique<BpeModel>(std::move(bpe));
  p.added = tiktoken_special_tokens(family, max_rank + 1);
  if (family == "llama3") {
    p.pattern = kLlama3Pattern;
    p.pretokenizer = "llama3";
    p.bos = find_added(p, "<|begin_of_text|>");
    p.eos = find_added(p, "<|end_of_text|>");
    p.add_bos = true;
    p.chat_format = ChatFormat::kLlama3;
  } else {
    p.pattern = kQwen2Pattern;
    p.pretokenizer = "qwen2";
    p.eos = find_added(p, "<|endoftext|>");
    p.pad = p.eos;
    p.chat_format = family == "qwen2" ? ChatFormat::kQwen25 : ChatFormat::kChatML;
  }
  return p;
}

std::string detect_tiktoken_family(const fs::path& file, const json* config) {
  if (config && config->is_object()) {
    std::string cls =
        config->contains("tokenizer_class") && (*config)["tokenizer_class"].is_string()
            ? (*config)["tokenizer_class"].get<std::string>()
            : "";
    if (cls == "QWenTokenizer") return "qwen1";
    if (cls.find("Qwen2") != std::string::npos) return "qwen2";
    std::string dump = config->dump();
    if (dump.find("<|begin_of_text|>") != std::string::npos ||
        dump.find("<|eot_id|>") != std::string::npos)
      return "llama3";
    if (dump.find("<|im_start|>") != std::string::npos) return "qwen2";
  }
  std::string name = to_lower(file.filename().string());
  if (name.find("qwen") != std::string::npos) return "qwen2";
  if (name.find("llama") != std::string::npos || name == "tokenizer.model") return "llama3";
  throw InputError(
      fmt::format("{}: cannot tell which tokenizer family this tiktoken file belongs to; pass "
                  "one of {} (--tiktoken-family)",
                  file.string(), join(kTiktokenFamilies, ", ")));
}

// ---- tokenizer_config.json -----------------------------------------------------------------

void apply_config(TokenizerParts& p, const json& c, const std::string& origin) {
  if (!c.is_object()) throw InputError(fmt::format("{}: expected a JSON object", origin));
  try {
    if (c.contains("added_tokens_decoder") && c["added_tokens_decoder"].is_object()) {
      for (const auto& [key, tok] : c["added_tokens_decoder"].items()) {
        TokenId id = static_cast<TokenId>(std::stol(key));
        std::string content = tok.at("content").get<std::string>();
        auto known = find_token(p, content);
        if (known && *known == id) continue;
        if (known)
          throw InputError(
              fmt::format("{}: added_tokens_decoder gives '{}' id {}, the tokenizer has it as {}",
                          origin, content, id, *known));
        p.added.push_back(
            {content, id, tok.value("special", false)});  // the Tokenizer checks id clashes
      }
    }
    struct Field {
      const char* key;
      std::optional<TokenId>* id;
      bool* add;
    };
    for (const Field& f :
         {Field{"bos_token", &p.bos, &p.add_bos}, Field{"eos_token", &p.eos, &p.add_eos},
          Field{"pad_token", &p.pad, nullptr}}) {
      if (!c.contains(f.key)) continue;
      const json& v = c[f.key];
      if (v.is_null()) {
        *f.id = std::nullopt;
        if (f.add) *f.add = false;
        continue;
      }
      std::string s = v.is_object() ? v.at("content").get<std::string>() : v.get<std::string>();
      auto id = find_token(p, s);
      if (!id)
        throw InputError(
            fmt::format("{}: {} '{}' is not a token of this tokenizer", origin, f.key, s));
      *f.id = id;
    }
    if (c.contains("add_bos_token") && c["add_bos_token"].is_boolean())
      p.add_bos = c["add_bos_token"].get<bool>();
    if (c.contains("add_eos_token") && c["add_eos_token"].is_boolean())
      p.add_eos = c["add_eos_token"].get<bool>();
    if (c.contains("chat_template")) {
      const json& t = c["chat_template"];
      std::string tmpl;
      if (t.is_string()) {
        tmpl = t.get<std::string>();
      } else if (t.is_array()) {  // [{name, template}, ...]: the "default" one, else the first
        for (const json& e : t)
          if (tmpl.empty() || e.value("name", "") == "default") tmpl = e.value("template", "");
      }
      if (auto f = chat_format_from_template(tmpl)) {
        p.chat_format = *f;
      } else if (!tmpl.empty()) {
        p.chat_template_unknown = true;
        spdlog::warn(
            "{}: chat_template not recognised (known: chatml, qwen2.5, llama3, llama2, mistral, "
            "gemma, phi3); using the {} format (data.chat_format names another)",
            origin, chat_format_name(p.chat_format));
      }
    }
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: malformed tokenizer_config.json: {}", origin, e.what()));
  } catch (const std::logic_error& e) {  // std::stol on a non-numeric key
    throw InputError(
        fmt::format("{}: added_tokens_decoder keys must be ids: {}", origin, e.what()));
  }
}

// ---- SentencePiece -------------------------------------------------------------------------

// The model's control and unknown pieces (<s>, </s>, <unk>, [INST], ...) become special added
// tokens: matched in text only with allow_special, decoded as their text. bos / eos / pad from
// the model; bos added when the model has one (Llama-2, Mistral, Gemma), else eos (T5);
// tokenizer_config.json may change both.
TokenizerParts parts_from_sentencepiece(const fs::path& file) {
  TokenizerParts p;
  p.source = file.string();
  p.format = "sentencepiece";
  p.pretokenizer = "sentencepiece";
  p.spm = SpmModel::load(file);
  for (TokenId id = 0; id < p.spm->size(); ++id) {
    const SpmModel::PieceKind k = p.spm->kind(id);
    if (k == SpmModel::PieceKind::kControl || k == SpmModel::PieceKind::kUnknown)
      p.added.push_back({p.spm->piece(id), id, true});
  }
  p.bos = p.spm->bos_id();
  p.eos = p.spm->eos_id();
  p.pad = p.spm->pad_id();
  p.add_bos = p.bos.has_value();
  p.add_eos = !p.bos && p.eos;
  return p;
}

// What a tokenizer.json says of a SentencePiece model: whether it is one (byte_fallback BPE or
// Unigram: its tokenizer.model beside it is then the one to read), and where it puts the dummy
// prefix: a Metaspace pre-tokenizer with prepend_scheme "first" only at the start of the text
// (HF legacy: false), "always" or a Prepend normaliser on every stretch between added tokens.
struct HfSpmInfo {
  bool sentencepiece = false;
  std::optional<bool> prefix_first_only;  // unset: the file does not say
};

HfSpmInfo hf_json_spm_info(const fs::path& file) {
  const json j = read_json(file);
  HfSpmInfo info;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return info;
  const json& m = j["model"];
  info.sentencepiece = m.value("byte_fallback", false) || m.value("type", "") == "Unigram";
  auto visit = [&](const json& node, auto& self) -> void {
    if (!node.is_object()) return;
    const std::string type = node.value("type", "");
    if (type == "Metaspace" && node.contains("prepend_scheme") &&
        node["prepend_scheme"].is_string())
      info.prefix_first_only = node["prepend_scheme"].get<std::string>() == "first";
    if (type == "Prepend") info.prefix_first_only = false;
    for (const char* list : {"pretokenizers", "normalizers"})
      if (node.contains(list) && node[list].is_array())
        for (const json& n : node[list]) self(n, self);
  };
  for (const char* key : {"normalizer", "pre_tokenizer"})
    if (j.contains(key)) visit(j[key], visit);
  return info;
}

bool is_tiktoken_file(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  std::string first;
  std::getline(in, first);
  return !first.empty() && parse_tiktoken(first, f.string(), true).has_value();
}

}  // namespace

std::vector<AddedToken> tiktoken_special_tokens(const std::string& family, TokenId first_id) {
  check_family(family);
  std::vector<std::pair<std::string, bool>> names;  // (content, special)
  if (family == "llama3") {
    // Meta's Llama-3 tokenizer.py: 10 named slots, then reserved tokens 5..250 (256 in all).
    for (const char* s : {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                          "<|reserved_special_token_1|>", "<|reserved_special_token_2|>",
                          "<|reserved_special_token_3|>", "<|start_header_id|>",
                          "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"})
      names.emplace_back(s, true);
    for (int i = 5; i <= 250; ++i)
      names.emplace_back(fmt::format("<|reserved_special_token_{}|>", i), true);
  } else {
    for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
      names.emplace_back(s, true);
    if (family == "qwen2") {
      // Qwen2.5's tokenizer_config added_tokens_decoder (151646..151664); the last 8 are
      // "special": false there (always matched in text).
      for (const char* s : {"<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
                            "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                            "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"})
        names.emplace_back(s, true);
      for (const char* s : {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                            "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"})
        names.emplace_back(s, false);
    } else {
      // Qwen(-1) tokenization_qwen.py: EXTRAS = <|extra_0|> .. <|extra_204|>.
      for (int i = 0; i < 205; ++i) names.emplace_back(fmt::format("<|extra_{}|>", i), true);
    }
  }
  std::vector<AddedToken> out;
  for (size_t i = 0; i < names.size(); ++i)
    out.push_back({names[i].first, first_id + static_cast<TokenId>(i), names[i].second});
  return out;
}

Tokenizer load_hf_tokenizer_json(const fs::path& file) {
  return Tokenizer(parts_from_hf_json(file));
}

Tokenizer load_vocab_merges(const fs::path& vocab_json, const fs::path& merges) {
  return Tokenizer(parts_from_vocab_merges(vocab_json, merges));
}

Tokenizer load_tiktoken(const fs::path& file, const std::string& family) {
  return Tokenizer(parts_from_tiktoken(file, family));
}

Tokenizer load_tokenizer(const fs::path& path, const LoadOptions& opt) {
  if (!opt.tiktoken_family.empty()) check_family(opt.tiktoken_family);
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw InputError(fmt::format("tokenizer not found: {} does not exist", path.string()));
  if (fs::is_regular_file(path, ec)) {
    if (path.extension() == ".json") return load_hf_tokenizer_json(path);
    if (!is_tiktoken_file(path)) return Tokenizer(parts_from_sentencepiece(path));
    return load_tiktoken(path, opt.tiktoken_family.empty() ? detect_tiktoken_family(path, nullptr)
                                                           : opt.tiktoken_family);
  }
  if (!fs::is_directory(path, ec))
    throw InputError(
        fmt::format("tokenizer path {} is neither a file nor a directory", path.string()));

  auto file = [&](const char* name) -> std::optional<fs::path> {
    fs::path f = path / name;
    return fs::is_regular_file(f, ec) ? std::optional<fs::path>(f) : std::nullopt;
  };
  std::optional<json> config;
  auto config_path = file("tokenizer_config.json");
  if (config_path) config = read_json(*config_path);

  TokenizerParts parts;
  auto spm_file = [&]() -> std::optional<fs::path> {
    auto tm = file("tokenizer.model");
    return tm && !is_tiktoken_file(*tm) ? tm : std::nullopt;
  };
  // The SentencePiece check reads the first line of tokenizer.model before tokenizer.json is
  // parsed for its model kind (a large file, parsed again to load it).
  const std::optional<fs::path> sm = spm_file();
  const std::optional<fs::path> tj = file("tokenizer.json");
  const HfSpmInfo tj_info = sm && tj ? hf_json_spm_info(*tj) : HfSpmInfo{};
  if (tj && !(sm && tj_info.sentencepiece)) {
    parts = parts_from_hf_json(*tj);
  } else if (sm) {
    parts = parts_from_sentencepiece(*sm);
    // Where the dummy prefix goes: as tokenizer.json says (what HF's fast tokenizer does),
    // else tokenizer_config.json's `legacy: false` (HF's slow tokenizer), else every stretch.
    parts.spm_prefix_first_only = tj_info.prefix_first_only.value_or(
        config && config->is_object() && config->contains("legacy") &&
        (*config)["legacy"].is_boolean() && !(*config)["legacy"].get<bool>());
  } else {
    auto vocab = file("vocab.json");
    if (!vocab) vocab = file("encoder.json");
    auto merges = file("merges.txt");
    if (!merges) merges = file("vocab.bpe");
    if (vocab && merges) {
      parts = parts_from_vocab_merges(*vocab, *merges);
    } else if (vocab || merges) {
      throw InputError(
          fmt::format("{}: found {} but no {}", path.string(), (vocab ? *vocab : *merges).string(),
                      vocab ? "merges.txt or vocab.bpe" : "vocab.json or encoder.json"));
    } else {
      std::vector<fs::path> cands;
      for (const auto& e : fs::directory_iterator(path, ec))
        if (e.is_regular_file() && e.path().extension() == ".tiktoken") cands.push_back(e.path());
      if (cands.empty()) {
        if (auto tm = file("tokenizer.model")) cands.push_back(*tm);  // a tiktoken file
      }
      if (cands.size() > 1)
        throw InputError(fmt::format(
            "{}: several *.tiktoken files; pass the one to use as the path", path.string()));
      if (cands.empty())
        throw InputError(
            fmt::format("{}: no tokenizer files: expected tokenizer.json, vocab.json + merges.txt "
                        "(or vocab.bpe), a SentencePiece tokenizer.model, or a tiktoken rank file "
                        "(*.tiktoken, tokenizer.model)",
                        path.string()));
      std::string family = opt.tiktoken_family.empty()
                               ? detect_tiktoken_family(cands[0], config ? &*config : nullptr)
                               : opt.tiktoken_family;
      parts = parts_from_tiktoken(cands[0], family);
    }
  }
  if (config) apply_config(parts, *config, config_path->string());
  return Tokenizer(std::move(parts));
}

}  // namespace dpft::tok
