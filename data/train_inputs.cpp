#include "data/train_inputs.hpp"

#include "data/nlg.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "core/eval/lm_eval.hpp"
#include "core/model/config.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "core/util/sha256.hpp"
#include "data/classification.hpp"
#include "data/encoder_lm.hpp"
#include "data/lm_dataset.hpp"
#include "data/table.hpp"

namespace dpft::data {

namespace {

// An encoder's data.task mlm or lm set (data/encoder_lm.hpp); masking seeded by (seed, salt).
// `training`: the private training set, whose documents keep their blocks apart at
// privacy.unit document with packing (as train_lm_options does for decoders).
lm::LmDataset encoder_lm_dataset(const Spec& spec, const std::vector<Example>& examples,
                                 const tok::EncoderTokenizer& tok, const std::string& salt,
                                 bool training = false) {
  const bool mlm = spec.data.task == Task::kMlm;
  lm::LmDataset ds = build_encoder_lm_dataset(
      examples, tok, static_cast<size_t>(spec.data.max_length), spec.data.packing,
      mlm ? lm::Objective::kMaskedLM : lm::Objective::kNextToken,
      training && spec.data.packing && spec.privacy.unit == privacy::PrivacyUnit::kDocument);
  if (mlm) {
    DPFT_CHECK_AS(ConfigError, tok.mask_id().has_value(),
                  "data.task: mlm needs a mask token, and the encoder tokenizer ({}) has none "
                  "([MASK] / <mask>)",
                  tok.kind());
    ds.masking.mask_id = *tok.mask_id();
    ds.masking.vocab_size = tok.vocab_size();
    ds.masking.rate = spec.data.mlm_probability;
    ds.masking.seed = derive_seed(spec.seed, salt);
  }
  return ds;
}

}  // namespace

namespace {

// The private training set's options: packing at privacy.unit document keeps each document's
// blocks apart (LmDataOptions::within_documents).
LmDataOptions train_lm_options(const Spec& spec) {
  LmDataOptions o = lm_data_options(spec.data);
  o.within_documents = o.packing && spec.privacy.unit == privacy::PrivacyUnit::kDocument;
  return o;
}

// The privacy units of the tokenised training set `ds` built from `examples`
// (core/privacy/units.hpp): one per row; per user (privacy.unit user); per document
// (privacy.unit document: a document's blocks, which share its example index).
privacy::Units units_of(const Spec& spec, const std::vector<Example>& examples,
                        const lm::LmDataset& ds) {
  const privacy::PrivacyUnit unit = spec.privacy.unit;
  if (unit == privacy::PrivacyUnit::kExample) return {};
  std::vector<std::string> key;  // each row's unit
  if (unit == privacy::PrivacyUnit::kDocument) {
    for (const lm::TokenizedExample& t : ds.items) key.push_back(std::to_string(t.index));
    return privacy::group_rows(key, unit, std::numeric_limits<int64_t>::max(),
                               "data.train (privacy.unit: document)");
  }
  std::unordered_map<int64_t, const std::string*> user_of;  // example index -> its user
  for (const Example& e : examples) user_of[e.index] = &e.user;
  for (const lm::TokenizedExample& t : ds.items) key.push_back(*user_of.at(t.index));
  return privacy::group_rows(key, unit, spec.privacy.max_examples_per_user,
                             "data.train.user_column");
}

}  // namespace

namespace {

void build_eval_sets(const Spec& spec, train::TrainInputs& in,
                     const std::unordered_set<std::string>& train_texts);

// The data sets of `in` (whose tokenizer is loaded) as load_train_inputs builds them.
void build_sets(const Spec& spec, train::TrainInputs& in) {
  DPFT_CHECK_AS(ConfigError, !spec.data.train.path.empty(),
                "data.train.path: no private training set given");
  const std::vector<Example> train_examples = select_examples(
      spec.data.train, spec.data.train_extra, spec.data, derive_seed(spec.seed, "data"));
  const bool classify = spec.data.task == Task::kClassification,
             seq2seq = spec.data.task == Task::kSeq2seq;
  const size_t max_len = static_cast<size_t>(spec.data.max_length);
  if (classify) {
    in.labels = resolve_labels(spec.data.labels, in.model_labels);
    if (in.model) in.model->set_label_names(in.labels);  // saved models name their classes
    in.train = build_classification_dataset(train_examples, *in.enc_tok, in.labels, max_len,
                                            "data.train (" + spec.data.train.path + ")");
  } else if (in.enc_tok) {  // masked-LM pretraining, or a causal BERT's next-token training
    in.train = encoder_lm_dataset(spec, train_examples, *in.enc_tok, "mlm", true);
  } else if (seq2seq) {
    in.train = build_seq2seq_dataset(train_examples, *in.tok, spec.data.max_length,
                                     spec.method.name == "ctcl", spec.data.denoising,
                                     derive_seed(spec.seed, "denoising"));
  } else {
    in.train = build_lm_dataset(train_examples, *in.tok, train_lm_options(spec));
  }
  in.units = units_of(spec, train_examples, in.train);
  std::unordered_set<std::string> train_texts;  // exclude_train: held-out rows only
  for (const Example& e : train_examples) train_texts.insert(example_key(e));
  if (const DatasetSpec& pd = spec.data.public_data; !pd.path.empty()) {
    const std::vector<Example> ex =
        select_examples(pd, {}, spec.data, derive_seed(spec.seed, "public-data"));
    for (const Example& e : ex) in.public_overlap += train_texts.count(example_key(e));
    if (classify)
      in.public_train = build_classification_dataset(ex, *in.enc_tok, in.labels, max_len,
                                                     "data.public (" + pd.path + ")");
    else if (in.enc_tok)
      in.public_train = encoder_lm_dataset(spec, ex, *in.enc_tok, "mlm-public");
    else if (seq2seq)
      in.public_train = build_seq2seq_dataset(ex, *in.tok, spec.data.max_length);
    else
      in.public_train = build_lm_dataset(ex, *in.tok, lm_data_options(spec.data));
  }
  build_eval_sets(spec, in, train_texts);
}

// data.eval (and data.eval_sets) of `in` (whose tokenizer and, for classification, labels are
// set) as load_train_inputs builds them; `train_texts`: the training examples' keys, for
// exclude_train and the overlap count.
void build_eval_sets(const Spec& spec, train::TrainInputs& in,
                     const std::unordered_set<std::string>& train_texts) {
  if (spec.data.eval.path.empty()) return;
  const bool classify = spec.data.task == Task::kClassification,
             seq2seq = spec.data.task == Task::kSeq2seq;
  const size_t max_len = static_cast<size_t>(spec.data.max_length);
  // One evaluation set (data.eval, or a data.eval_sets entry named `name`): its examples and
  // their tokenised set. Examples that are also training examples count in eval_overlap.
  auto load_eval = [&](const DatasetSpec& d, const std::string& key, const std::string& salt,
                       std::vector<Example>* examples_out) {
    const uint64_t seed = derive_seed(spec.seed, salt);
    const std::vector<Example> examples =
        select_examples(d, {}, spec.data, seed, d.exclude_train ? &train_texts : nullptr);
    int64_t overlap = 0;
    for (const Example& e : examples) overlap += train_texts.count(example_key(e));
    if (overlap > 0) {
      DPFT_CHECK_AS(ConfigError, spec.output.non_private_stats,
                    "{}: {} of its {} examples are also training examples, so its results would "
                    "be non-private statistics of the training data, but "
                    "output.non_private_stats is false; set {}.exclude_train: true or evaluate "
                    "on a held-out file",
                    key, overlap, examples.size(), key);
      spdlog::warn(
          "{}: {} of its {} examples are also training examples: evaluation results "
          "are reported in metrics.json's non_private block (set {}.exclude_train: "
          "true to evaluate on held-out rows only)",
          key, overlap, examples.size(), key);
    }
    in.eval_overlap += overlap;
    if (examples_out) *examples_out = examples;
    if (classify)  // evaluated by the classifier (core/eval/lm_eval.hpp)
      return build_classification_dataset(examples, *in.enc_tok, in.labels, max_len,
                                          key + " (" + d.path + ")");
    if (in.enc_tok)  // fixed masks (draw 0) from their own seed
      return encoder_lm_dataset(spec, examples, *in.enc_tok,
                                examples_out ? std::string("mlm-eval") : "mlm-eval-" + d.name);
    if (seq2seq)  // ctcl gives eval documents their topics' conditions, as training ones
      return build_seq2seq_dataset(examples, *in.tok, spec.data.max_length,
                                   spec.method.name == "ctcl", spec.data.denoising,
                                   derive_seed(spec.seed, "denoising"));
    return build_lm_dataset(examples, *in.tok, lm_data_options(spec.data));
  };
  std::vector<Example> eval_examples;
  in.eval = load_eval(spec.data.eval, "data.eval", "eval-data", &eval_examples);
  for (size_t i = 0; i < spec.data.eval_sets.size(); ++i) {
    const DatasetSpec& d = spec.data.eval_sets[i];
    in.eval_sets.emplace_back(
        d.name, load_eval(d, fmt::format("data.eval_sets[{}]", i), "eval-data-" + d.name, nullptr));
  }
  if (!spec.eval.nlg.at_steps.empty()) {
    DPFT_CHECK_AS(ConfigError, in.tok != nullptr,
                  "eval.nlg decodes with a decoder's tokenizer; model {} is an encoder",
                  spec.model.path);
    in.nlg_segments = nlg_segments(eval_examples, "data.eval");
  }
  if (!classify && !in.enc_tok && !spec.data.eval.label_column.empty()) {
    in.eval_examples = eval_examples;
    in.labels = eval::label_set(in.eval_examples);
    DPFT_CHECK_AS(InputError, in.labels.size() >= 2,
                  "data.eval.label_column '{}': need at least 2 distinct labels, found {}",
                  spec.data.eval.label_column, in.labels.size());
  }
}

}  // namespace

train::TrainInputs load_train_inputs(const Spec& spec) {
  train::TrainInputs in;
  train::load_model(spec, in);
  build_sets(spec, in);
  return in;
}

void build_eval_inputs(const Spec& spec, train::TrainInputs& in) {
  if (spec.data.task == Task::kClassification)
    in.labels = resolve_labels(spec.data.labels, in.model_labels);
  build_eval_sets(spec, in, {});
}

train::TrainInputs check_train_inputs(const Spec& spec) {
  train::TrainInputs in;
  train::open_model_unloaded(spec, in);
  build_sets(spec, in);
  return in;
}

int64_t count_train_examples(const Spec& spec) {
  DPFT_CHECK_AS(ConfigError, !spec.data.train.path.empty(),
                "data.train.path: no private training set given");
  // Exactly as load_train_inputs builds the set (subsample, tokenise, drop empty examples,
  // pack), without the model's weights: only its tokenizer.
  // privacy.unit user: the units (users) instead of the examples.
  const std::vector<Example> examples = select_examples(
      spec.data.train, spec.data.train_extra, spec.data, derive_seed(spec.seed, "data"));
  lm::LmDataset ds;
  if (spec.data.task == Task::kClassification || spec.data.task == Task::kSeq2seq) {
    for (const Example& e : examples) ds.items.push_back({e.index});  // one each, none dropped
  } else {
    const std::filesystem::path dir = train::resolve_model_dir(spec.model.path);
    const std::filesystem::path tdir = train::tokenizer_dir(spec, dir);
    if (model::load_model_config(dir).is_encoder())
      ds = encoder_lm_dataset(spec, examples, tok::EncoderTokenizer::load(tdir), "mlm", true);
    else
      ds = build_lm_dataset(examples, tok::load_tokenizer(tdir), train_lm_options(spec));
  }
  return units_of(spec, examples, ds).count(ds.size());
}

nlohmann::json train_file_identity(const Spec& spec) {
  nlohmann::json files = nlohmann::json::array();
  auto add = [&](const DatasetSpec& d) {
    if (d.path.empty()) return;
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(d.path, ec);
    files.push_back({{"path", d.path},
                     {"bytes", ec ? -1 : static_cast<int64_t>(bytes)},
                     {"sha256", sha256_file_hex(d.path)}});
  };
  add(spec.data.train);
  for (const DatasetSpec& e : spec.data.train_extra) add(e);
  return files;
}

}  // namespace dpft::data
