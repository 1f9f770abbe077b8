// Language-model data: tokenization, packing and collation (see lm_dataset.hpp).
#include "data/lm_dataset.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>

#include "core/tokenizer/chat.hpp"
#include "core/util/error.hpp"
#include "core/util/sha256.hpp"

namespace dpft::data {

std::optional<tok::ChatFormat> fixed_chat_format(ChatFormatChoice c) {
  if (c == ChatFormatChoice::kNone || c == ChatFormatChoice::kAuto) return std::nullopt;
  return tok::parse_chat_format(name_of(c));
}

LmDataOptions lm_data_options(const DataSpec& d) {
  LmDataOptions o;
  o.max_length = d.max_length;
  o.add_eos = d.add_eos;
  o.packing = d.packing;
  o.response_only = d.loss_on != LossOn::kAll;
  o.chat_format = d.chat_format;
  return o;
}

namespace {

// One example's ids before truncation / eos. `content`: ids that came from the texts (packing
// skips documents without any).
struct Doc {
  std::vector<int32_t> ids;
  std::vector<uint8_t> scored;
  size_t content = 0;
};

void append(Doc& doc, const std::vector<int32_t>& ids, uint8_t scored) {
  doc.ids.insert(doc.ids.end(), ids.begin(), ids.end());
  doc.scored.resize(doc.ids.size(), scored);
  doc.content += ids.size();
}

// cap > 0: each text is encoded to at most `cap` ids (the caller truncates the whole anyway).
Doc encode_example(const Example& e, const tok::Tokenizer& tok,
                   const std::optional<tok::ChatFormat>& chat, bool response_only, size_t cap) {
  Doc doc;
  if (!e.messages.empty()) {  // a whole chat: every turn rendered, assistant turns scored
    DPFT_CHECK_AS(ConfigError, chat.has_value(),
                  "row {} is a chat (messages_column), but data.chat_format is none: set it to "
                  "auto or a format name",
                  e.index);
    tok::ChatEncoding enc = tok::encode_chat(tok, tok::render_chat(tok, e.messages, false, *chat));
    doc.ids = std::move(enc.ids);
    doc.scored =
        response_only ? std::move(enc.response_mask) : std::vector<uint8_t>(doc.ids.size(), 1);
    doc.content = doc.ids.size();
    return doc;
  }
  if (e.prompt && chat) {
    tok::ChatPrompt p =
        tok::render_chat(tok, {{"user", *e.prompt}, {"assistant", e.text}}, false, *chat);
    tok::ChatEncoding enc = tok::encode_chat(tok, p);
    doc.ids = std::move(enc.ids);
    doc.scored =
        response_only ? std::move(enc.response_mask) : std::vector<uint8_t>(doc.ids.size(), 1);
    doc.content = doc.ids.size();
    return doc;
  }
  if (tok.add_bos() && tok.bos_id()) {
    doc.ids.push_back(*tok.bos_id());
    doc.scored.push_back(0);
  }
  tok::EncodeOptions eo;
  eo.max_length = cap;
  if (e.prompt) append(doc, tok.encode(*e.prompt, eo), response_only ? 0 : 1);
  append(doc, tok.encode(e.text, eo), 1);
  return doc;
}

// A sequence is usable when it has >= 2 ids and some scored id after position 0.
bool usable(const std::vector<int32_t>& ids, const std::vector<uint8_t>& scored) {
  if (ids.size() < 2) return false;
  return std::any_of(scored.begin() + 1, scored.end(), [](uint8_t s) { return s != 0; });
}

std::optional<tok::ChatFormat> chat_format_of(ChatFormatChoice c, const tok::Tokenizer& tok) {
  if (c == ChatFormatChoice::kAuto) {
    DPFT_CHECK_AS(ConfigError, !tok.chat_template_unknown(),
                  "data.chat_format: auto, but the chat_template of {} is none dpft knows "
                  "(known: {}); set data.chat_format to the one it implements",
                  tok.source(), tok::known_chat_formats());
    return tok.chat_format();
  }
  return fixed_chat_format(c);
}

}  // namespace

std::vector<int32_t> seq2seq_ids(const std::string& text, const tok::Tokenizer& tok,
                                 int64_t max_length) {
  DPFT_CHECK_AS(ConfigError, max_length >= 3,
                "data.max_length: {} is too small for a seq2seq pair; bos, one token and eos "
                "need 3",
                max_length);
  DPFT_CHECK_AS(InputError, tok.bos_id() && tok.eos_id(),
                "data.task seq2seq: the tokenizer has no {}; BART's sources and targets are "
                "<s> ... </s>",
                tok.bos_id() ? "eos" : "bos");
  const auto content = static_cast<size_t>(max_length - 2);
  std::vector<int32_t> ids = {static_cast<int32_t>(*tok.bos_id())};
  std::vector<tok::TokenId> body = tok.encode(text);
  if (body.size() > content) body.resize(content);
  for (auto t : body) ids.push_back(static_cast<int32_t>(t));
  ids.push_back(static_cast<int32_t>(*tok.eos_id()));
  return ids;
}

LmDataset build_seq2seq_dataset(const std::vector<Example>& examples, const tok::Tokenizer& tok,
                                int64_t max_length, bool source_from_method,
                                const DenoisingSpec& denoising, uint64_t seed) {
  seq2seq_ids("", tok, max_length);  // the length and special-token checks, before any row
  LmDataset ds;
  ds.objective = lm::Objective::kSeq2Seq;
  if (denoising.enabled) {
    const auto mask = tok.token_to_id("<mask>");
    DPFT_CHECK_AS(InputError, mask.has_value(),
                  "data.denoising: the tokenizer ({}) has no <mask> token for text infilling; "
                  "use BART's (RoBERTa's) tokenizer",
                  tok.source());
    ds.infilling = {*mask, denoising.mask_ratio, denoising.poisson_lambda, seed};
  }
  ds.items.reserve(examples.size());
  for (const Example& e : examples) {
    DPFT_CHECK_AS(InputError, e.prompt.has_value() || source_from_method || denoising.enabled,
                  "data.task seq2seq: row {} has no source (prompt); set prompt_column", e.index);
    TokenizedExample t;
    t.index = e.index;
    t.ids = seq2seq_ids(e.text, tok, max_length);
    t.scored.assign(t.ids.size(), 1);
    t.src_ids = seq2seq_ids(e.prompt.value_or(""), tok, max_length);
    t.label = e.label;
    ds.items.push_back(std::move(t));
  }
  return ds;
}

LmDataset build_lm_dataset(const std::vector<Example>& examples, const tok::Tokenizer& tok,
                           const LmDataOptions& o) {
  if (o.max_length < 2)
    throw ConfigError(fmt::format("data.max_length: {} is too small; at least 2 tokens are needed",
                                  o.max_length));
  std::optional<tok::ChatFormat> chat = chat_format_of(o.chat_format, tok);
  const size_t L = static_cast<size_t>(o.max_length);
  LmDataset ds;
  if (!o.packing) {
    ds.items.reserve(examples.size());
    for (const Example& e : examples) {
      Doc doc = encode_example(e, tok, chat, o.response_only, L);
      if (doc.ids.size() > L) {
        doc.ids.resize(L);
        doc.scored.resize(L);
      }
      if (o.add_eos && !(e.prompt && chat) && tok.eos_id() && doc.ids.size() < L) {
        doc.ids.push_back(*tok.eos_id());
        doc.scored.push_back(1);
      }
      if (!usable(doc.ids, doc.scored)) {
        ++ds.dropped;
        continue;
      }
      ds.items.push_back({e.index, std::move(doc.ids), std::move(doc.scored), e.label});
    }
    if (ds.dropped > 0)
      spdlog::warn(
          "{} of {} examples dropped: fewer than 2 tokens (empty text) or no scored token within "
          "max_length {} (loss_on: {})",
          ds.dropped, examples.size(), o.max_length, o.response_only ? "response" : "all");
    return ds;
  }

  if (!tok.eos_id())
    throw InputError(
        fmt::format("{}: data.packing needs an eos token to separate documents, and this tokenizer "
                    "has none; set data.packing: false",
                    tok.source()));
  if (o.within_documents) {  // each document's blocks on their own, indexed by the document
    int64_t empty_docs = 0, blocks = 0;
    for (const Example& e : examples) {
      Doc doc = encode_example(e, tok, chat, o.response_only, 0);
      if (doc.content == 0) {
        ++empty_docs;
        continue;
      }
      doc.ids.push_back(*tok.eos_id());
      doc.scored.push_back(1);
      for (size_t at = 0; at < doc.ids.size(); at += L, ++blocks) {
        const size_t end = std::min(doc.ids.size(), at + L);
        TokenizedExample t;
        t.index = e.index;
        t.ids.assign(doc.ids.begin() + static_cast<std::ptrdiff_t>(at),
                     doc.ids.begin() + static_cast<std::ptrdiff_t>(end));
        t.scored.assign(doc.scored.begin() + static_cast<std::ptrdiff_t>(at),
                        doc.scored.begin() + static_cast<std::ptrdiff_t>(end));
        if (usable(t.ids, t.scored))
          ds.items.push_back(std::move(t));
        else
          ++ds.dropped;
      }
    }
    if (empty_docs > 0)
      spdlog::warn("packing: {} of {} documents are empty and were skipped", empty_docs,
                   examples.size());
    spdlog::debug(
        "packing within documents: {} documents into {} blocks of at most {} ({} "
        "dropped: a tail of one token or none scored)",
        examples.size() - static_cast<size_t>(empty_docs), blocks, L, ds.dropped);
    return ds;
  }
  std::vector<int32_t> ids;
  std::vector<uint8_t> scored;
  int64_t empty_docs = 0;
  for (const Example& e : examples) {
    Doc doc = encode_example(e, tok, chat, o.response_only, 0);
    if (doc.content == 0) {
      ++empty_docs;
      continue;
    }
    ids.insert(ids.end(), doc.ids.begin(), doc.ids.end());
    scored.insert(scored.end(), doc.scored.begin(), doc.scored.end());
    ids.push_back(*tok.eos_id());
    scored.push_back(1);
  }
  size_t blocks = ids.size() / L;
  for (size_t k = 0; k < blocks; ++k) {
    TokenizedExample t;
    t.index = static_cast<int64_t>(k);
    t.ids.assign(ids.begin() + k * L, ids.begin() + (k + 1) * L);
    t.scored.assign(scored.begin() + k * L, scored.begin() + (k + 1) * L);
    if (!usable(t.ids, t.scored)) {
      ++ds.dropped;
      continue;
    }
    ds.items.push_back(std::move(t));
  }
  if (empty_docs > 0)
    spdlog::warn("packing: {} of {} documents are empty and were skipped", empty_docs,
                 examples.size());
  if (ds.dropped > 0)
    spdlog::warn("packing: {} of {} blocks have no scored token and were dropped", ds.dropped,
                 blocks);
  spdlog::debug("packing: {} tokens into {} blocks of {} ({} tokens in the dropped tail)",
                ids.size(), blocks, L, ids.size() - blocks * L);
  return ds;
}

namespace {

// Each example's user from `column` (privacy.unit user): a row without one is refused, since
// the rows of an unnamed user could not be bounded together.
void read_users(const Table& t, const std::string& column, std::vector<Example>& ex) {
  const size_t uc = t.column(column);
  for (Example& e : ex) {
    const auto i = static_cast<size_t>(e.index);
    const auto a = t.absent.find(i);
    const bool absent =
        a != t.absent.end() && std::find(a->second.begin(), a->second.end(), uc) != a->second.end();
    DPFT_CHECK_AS(InputError, !absent && !t.rows[i][uc].empty(),
                  "{}:{}: this row has no user in user_column '{}'; every row of a user-level "
                  "run needs one (drop the row, or give it its own user)",
                  t.source, t.line[i], column);
    e.user = t.rows[i][uc];
  }
}

// messages_column: each row's cell (a JSON array, as the JSONL reader keeps non-string values)
// becomes the example's chat; its text is the contents joined by newlines (what blank-row
// checks and text-based consumers see).
void read_messages(const Table& t, std::vector<Example>& ex) {
  for (Example& e : ex) {
    const auto i = static_cast<size_t>(e.index);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(e.text);
    } catch (const nlohmann::json::exception&) {
      j = nullptr;
    }
    DPFT_CHECK_AS(InputError, j.is_array() && !j.empty(),
                  "{}:{}: messages_column holds no chat: expected a non-empty JSON list of "
                  "{{\"role\": ..., \"content\": ...}} objects",
                  t.source, t.line[i]);
    std::string text;
    for (size_t m = 0; m < j.size(); ++m) {
      const nlohmann::json& x = j[m];
      DPFT_CHECK_AS(InputError,
                    x.is_object() && x.contains("role") && x["role"].is_string() &&
                        x.contains("content") && x["content"].is_string(),
                    "{}:{}: message {} is not a {{\"role\": string, \"content\": string}} object",
                    t.source, t.line[i], m);
      const std::string role = x["role"].get<std::string>();
      DPFT_CHECK_AS(InputError, role == "system" || role == "user" || role == "assistant",
                    "{}:{}: message {} has role '{}'; chat roles are system, user and assistant "
                    "(map other roles to these in the file)",
                    t.source, t.line[i], m, role);
      e.messages.push_back({role, x["content"].get<std::string>()});
      text += (m ? "\n" : "") + e.messages.back().content;
    }
    e.text = std::move(text);
  }
}

bool is_blank(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

// Rows whose text (and prompt and pair, when read) hold only whitespace carry nothing to learn
// or score: dropped, with a warning that also counts the empty lines the reader skipped.
void drop_blank_rows(const Table& t, const std::string& key, std::vector<Example>& ex) {
  const size_t before = ex.size();
  ex.erase(std::remove_if(ex.begin(), ex.end(),
                          [](const Example& e) {
                            return is_blank(e.text) && (!e.prompt || is_blank(*e.prompt)) &&
                                   (!e.text_pair || is_blank(*e.text_pair));
                          }),
           ex.end());
  const size_t dropped = before - ex.size();
  if (dropped > 0 || t.blank_lines > 0)
    spdlog::warn(
        "{}: {} rows dropped as blank ({} empty lines, {} rows whose text is only "
        "whitespace) in {}; {} rows remain",
        key, dropped + static_cast<size_t>(t.blank_lines), t.blank_lines, dropped, t.source,
        ex.size());
}

}  // namespace

std::vector<Example> read_examples(const DatasetSpec& d, const std::string& key) {
  if (d.path.empty())
    throw ConfigError(fmt::format("{}.path: not set; name a CSV, TSV, JSONL or text file", key));
  if (!std::filesystem::exists(d.path))
    throw InputError(fmt::format(
        "{}.path: data file '{}' not found (paths are relative to the working directory)", key,
        d.path));
  try {
    Table t = read_table(d.path, d.format);
    const bool chats = !d.messages_column.empty();
    std::vector<Example> ex = examples(t, chats ? d.messages_column : d.text_column, d.label_column,
                                       d.prompt_column, d.text_pair_column);
    if (chats) read_messages(t, ex);
    if (!d.prompt.empty())
      for (auto& e : ex) e.prompt = d.prompt;
    if (!d.user_column.empty()) read_users(t, d.user_column, ex);
    if (!d.rows.empty()) {
      const auto n = static_cast<int64_t>(ex.size());
      DPFT_CHECK_AS(ConfigError, d.rows[1] <= n,
                    "rows = [{}, {}], but {} has {} data rows; lower the end to at most {}",
                    d.rows[0], d.rows[1], d.path, n, n);
      ex = std::vector<Example>(ex.begin() + d.rows[0], ex.begin() + d.rows[1]);
    }
    drop_blank_rows(t, key, ex);  // after `rows`, which counts the file's data rows
    if (!d.label_map.empty())
      for (Example& e : ex) {
        auto it = d.label_map.find(e.label);
        if (it == d.label_map.end()) {
          std::string keys;
          for (const auto& kv : d.label_map) keys += (keys.empty() ? "'" : ", '") + kv.first + "'";
          throw InputError(fmt::format(
              "{}: row {} has {}, which label_map does not name (it maps {}); add it to the "
              "map or check label_column",
              d.path, e.index + 1,
              e.label.empty() ? "no label" : fmt::format("label '{}'", e.label), keys));
        }
        e.label = it->second;
      }
    if (!d.hash_split.empty()) {
      const size_t before = ex.size();
      ex.erase(std::remove_if(ex.begin(), ex.end(),
                              [&](const Example& e) {
                                const double u = hash_fraction(example_key(e));
                                return u < d.hash_split[0] || u >= d.hash_split[1];
                              }),
               ex.end());
      DPFT_CHECK_AS(ConfigError, !ex.empty(),
                    "hash_split = [{}, {}] keeps none of the {} rows of {}; widen it",
                    d.hash_split[0], d.hash_split[1], before, d.path);
    }
    return ex;
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", key, e.what()));
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", key, e.what()));
  }
}

namespace {

// A subsample larger than the data is a spec error (it would silently use every row).
void check_num_samples(const std::string& key, const DatasetSpec& d, size_t rows,
                       const std::string& note) {
  DPFT_CHECK_AS(ConfigError, d.num_samples <= static_cast<int64_t>(rows),
                "{}.num_samples = {}, but {} has {} rows{}; lower it, or set 0 for all rows", key,
                d.num_samples, d.path, rows, note);
}

}  // namespace

std::string example_key(const Example& e) {
  if (!e.messages.empty()) {  // a chat: every turn's role and content
    std::string k;
    for (const auto& m : e.messages) k += m.role + '\x1f' + m.content + '\x1e';
    return k;
  }
  return e.text_pair ? e.text + '\x1f' + *e.text_pair : e.text;
}

double hash_fraction(const std::string& key) {
  const std::string hex = sha256_hex(key);
  // The top 53 bits, so that the double is exact and below 1.
  return static_cast<double>(std::stoull(hex.substr(0, 16), nullptr, 16) >> 11) * 0x1p-53;
}

std::vector<Example> select_examples(const DatasetSpec& d, const std::vector<DatasetSpec>& extra,
                                     const DataSpec& data, uint64_t seed,
                                     const std::unordered_set<std::string>* exclude_texts) {
  bool is_eval = &d == &data.eval ||
                 (&d != &data.train && d.path == data.eval.path && d.path != data.train.path);
  const std::string key = is_eval ? "data.eval" : "data.train";
  std::vector<Example> all = read_examples(d, key);
  int64_t offset = static_cast<int64_t>(all.size());
  for (size_t i = 0; i < extra.size(); ++i) {
    std::vector<Example> more = read_examples(extra[i], fmt::format("data.train_extra[{}]", i));
    int64_t rows = static_cast<int64_t>(more.size());
    for (Example& e : more) e.index += offset;
    check_num_samples(fmt::format("data.train_extra[{}]", i), extra[i], more.size(), "");
    more = subsample(more, extra[i].num_samples, seed + 1 + i);
    all.insert(all.end(), std::make_move_iterator(more.begin()),
               std::make_move_iterator(more.end()));
    offset += rows;
  }
  if (exclude_texts) {
    const size_t before = all.size();
    all.erase(
        std::remove_if(all.begin(), all.end(),
                       [&](const Example& e) { return exclude_texts->count(example_key(e)) > 0; }),
        all.end());
    DPFT_CHECK_AS(InputError, !all.empty(),
                  "{}.exclude_train: all {} rows of {} are training texts; nothing is left to "
                  "evaluate on (use a larger file or a smaller data.train.num_samples)",
                  key, before, d.path);
  }
  check_num_samples(key, d, all.size(),
                    !extra.empty()      ? " (with data.train_extra)"
                    : exclude_texts     ? " (after exclude_train)"
                                        : "");
  return subsample(all, d.num_samples, seed);
}

LmDataset load_lm_dataset(const DatasetSpec& d, const std::vector<DatasetSpec>& extra,
                          const DataSpec& data, const tok::Tokenizer& tok, uint64_t seed) {
  return build_lm_dataset(select_examples(d, extra, data, seed), tok, lm_data_options(data));
}

}  // namespace dpft::data
