#include "core/train/model_init.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "core/model/checkpoint.hpp"
#include "core/model/config.hpp"
#include "core/model/presets.hpp"
#include "core/tokenizer/load.hpp"
#include "core/tokenizer/wordpiece.hpp"
#include "core/train/setup.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft {

namespace fs = std::filesystem;

namespace {

// An encoder config's head from --head / --labels (dpft model init and rehead).
void set_encoder_head(model::ModelConfig& cfg, const std::string& head,
                      const std::vector<std::string>& labels) {
  using model::EncoderHead;
  cfg.is_decoder = false;
  cfg.labels.clear();
  if (head == "classification") {
    cfg.head = EncoderHead::kSequenceClassification;
    cfg.labels = labels.empty() ? std::vector<std::string>{"LABEL_0", "LABEL_1"} : labels;
  } else if (head == "mlm") {
    cfg.head = EncoderHead::kMaskedLM;
  } else if (head == "causal") {
    cfg.head = EncoderHead::kCausalLM;
    cfg.is_decoder = true;
  } else if (head == "none") {
    cfg.head = EncoderHead::kNone;
  } else {
    throw ConfigError(fmt::format("--head '{}': use none, classification, mlm or causal", head));
  }
  DPFT_CHECK_AS(ConfigError, labels.empty() || cfg.head == EncoderHead::kSequenceClassification,
                "--labels needs --head classification");
  for (size_t i = 0; i < labels.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      DPFT_CHECK_AS(ConfigError, !labels[i].empty() && labels[i] != labels[j],
                    "--labels: '{}' is {}; give distinct, non-empty names, one per class",
                    labels[i], labels[i].empty() ? "empty" : "repeated");
  cfg.validate("dpft model init");
}

}  // namespace

ModelInitResult init_model(const ModelInitOptions& o) {
  const bool encoder = o.arch == "bert" || o.arch == "roberta";
  DPFT_CHECK_AS(ConfigError, encoder || (o.head == "none" && o.labels.empty()),
                "--head and --labels are for encoders (--arch bert or roberta)");
  model::ModelConfig cfg;
  std::string tok_format = "wordpiece";
  tok::LoadOptions lo;
  lo.tiktoken_family = o.family;
  if (auto wp = tok::find_wordpiece(o.tokenizer)) {  // BERT's vocab.txt
    tok::WordPiece w = tok::WordPiece::load(*wp);
    cfg = model::preset_config(o.arch, o.preset, w.vocab_size());
    if (w.pad_id()) cfg.pad_token_id = *w.pad_id();
  } else {
    tok::Tokenizer tk = tok::load_tokenizer(o.tokenizer, lo);
    tok_format = tk.format();
    cfg = model::preset_config(o.arch, o.preset, tk.vocab_size());
    if (tk.bos_id()) cfg.bos_token_id = *tk.bos_id();
    if (tk.eos_id()) cfg.eos_token_id = *tk.eos_id();
    if (tk.pad_id()) cfg.pad_token_id = *tk.pad_id();
    if (cfg.is_seq2seq() && tk.eos_id()) cfg.decoder_start_token_id = *tk.eos_id();  // BART
  }
  if (encoder) set_encoder_head(cfg, o.head, o.labels);
  model::CausalLM m = model::make_causal_lm(cfg, o.seed);
  model::save_checkpoint(m, o.out, false, train::dtype_named(o.dtype, "--dtype"));
  int copied = model::copy_tokenizer_files(o.tokenizer, o.out);
  if (!o.family.empty() && tok_format == "tiktoken") {
    // Record the family the user chose so that loading the checkpoint's tokenizer (which
    // detects it from tokenizer_config.json) gives the same tokenizer.
    fs::path cfg_path = fs::path(o.out) / "tokenizer_config.json";
    nlohmann::json tc = fs::exists(cfg_path) ? nlohmann::json::parse(read_file(cfg_path))
                                             : nlohmann::json::object();
    tc.erase("auto_map");
    tc["tokenizer_class"] = o.family == "qwen2"   ? "Qwen2Tokenizer"
                            : o.family == "qwen1" ? "QWenTokenizer"
                                                  : "PreTrainedTokenizerFast";
    if (o.family == "llama3") tc["bos_token"] = "<|begin_of_text|>";
    if (fs::exists(cfg_path))
      fs::permissions(cfg_path, fs::perms::owner_write, fs::perm_options::add);
    write_file_atomic(cfg_path, tc.dump(2) + "\n");
  }
  return {model::count_parameters(m, false), cfg.vocab_size, copied};
}

ReheadResult rehead_model(const ReheadOptions& o) {
  model::ModelConfig cfg = model::load_model_config(o.from);
  DPFT_CHECK_AS(ConfigError, cfg.is_encoder(),
                "--from {}: a {} model; rehead is for encoders (bert, roberta)", o.from,
                cfg.model_type);
  DPFT_CHECK_AS(ConfigError, fs::absolute(o.from) != fs::absolute(o.out),
                "--out must differ from --from (the source checkpoint is kept)");
  set_encoder_head(cfg, o.head, o.labels);
  model::CausalLM src = model::load_checkpoint(o.from);
  model::CausalLM m = model::make_causal_lm(cfg, o.seed);
  model::ReheadReport r = model::copy_shared_parameters(m, src);
  model::save_checkpoint(m, o.out, false, train::dtype_named(o.dtype, "--dtype"));
  return {r.copied, r.fresh, r.dropped, model::copy_tokenizer_files(o.from, o.out)};
}

}  // namespace dpft
