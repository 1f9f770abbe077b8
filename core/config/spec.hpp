// The experiment spec: typed structs, each field with its default, parsed and validated in one
// place (spec.cpp). Precedence: these defaults < the YAML file < `--set key.path=value`.
// docs/spec.md documents every field; `dpft config dump SPEC` prints the resolved spec.
#pragma once
#include <yaml-cpp/yaml.h>

#include "core/privacy/modes.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config/train_modes.hpp"
#include "core/model/peft_kind.hpp"
#include "core/util/enum_names.hpp"

namespace dpft {

class Fields;

struct PeftSpec {
  model::PeftKind kind = model::PeftKind::kLora;
  int r = 8;                  // LoRA rank
  double alpha = 16;          // LoRA scaling alpha (scale = alpha / r)
  double dropout = 0.0;       // LoRA dropout probability, [0, 1)
  // Module names to wrap / train; [auto] (the default): the model family's usual LoRA
  // targets (model::auto_targets), resolved from its config.json before a run starts.
  std::vector<std::string> targets = {model::kAutoTargets};
  // lora / adapter: modules trained in full besides the factors / adapters (HF peft's
  // modules_to_save); unset = [classifier] with data.task classification, none otherwise.
  std::optional<std::vector<std::string>> modules_to_save;
  int reduction_factor = 48;  // adapter: bottleneck width = hidden_size / reduction_factor
};

struct ModelSpec {
  std::string path;               // HF-format checkpoint dir; "" = the embedded default model
  std::string tokenizer;          // directory with the tokenizer files; "" = model.path's own
  FloatType dtype = FloatType::kFloat32;  // float32 | bfloat16 | float16 (half types need a GPU)
  PeftSpec peft;
};

struct DatasetSpec {
  std::string path;             // CSV / TSV / JSONL / plain text file; "" = none
  std::string format = "auto";  // auto (from extension) | csv | tsv | jsonl | text
  std::string text_column =
      "text";                 // column (or JSON key) holding the text (the response of a pair)
  std::string prompt_column;  // set: examples are prompt/response pairs ("" = plain text)
  // set: each row is a chat, this JSONL field's [{role, content}, ...] (needs chat_format)
  std::string messages_column;
  std::string prompt;         // one fixed prompt for every row (rows become its responses)
  std::string label_column;   // optional label column ("" = unlabelled)
  // data.train / train_extra with privacy.unit user: the column naming each row's user (the
  // privacy unit); every row needs a non-empty one.
  std::string user_column;
  std::string text_pair_column;  // second sentence of a pair (data.task classification)
  int64_t num_samples = 0;    // deterministic seeded subsample; 0 = all rows
  // [begin, end): only these data rows of the file (0-based, file order), before subsampling;
  // empty = all rows. A fixed split of one file into training and test parts (IMDB).
  std::vector<int64_t> rows;
  // [lo, hi) with 0 <= lo < hi <= 1: only rows whose text hashes into this part of [0, 1) (the
  // first 8 bytes of SHA-256 of the example's key, data::example_key, over 2^64), after `rows`
  // and before subsampling; empty = all rows. A per-row rule, so equal texts always fall on the
  // same side and one file splits into disjoint private and public parts (dp-sft's data.public)
  // whatever else the file holds.
  std::vector<double> hash_split;
  // File label -> the label the task uses (e.g. IMDB's negative/positive as SST-2's 0/1, for a
  // transfer run's data.public); every label of the file must be a key. Empty = as written.
  std::map<std::string, std::string> label_map;
  // data.eval only: drop rows whose text is one of the (subsampled) training texts before
  // subsampling, so the eval set can be a held-out part of the training file (lr selection).
  bool exclude_train = false;
  // data.eval_sets entries: the set's name in metrics.json; data.train: the dataset's name in
  // reports (metrics.json run.dataset_name; "" = the name of the file's folder)
  std::string name;
};

// data.denoising (task seq2seq): BART's text infilling (Lewis et al. 2020, Sec. 2.2): the
// source of each row is its own target with spans of tokens, of Poisson(poisson_lambda)
// lengths, each replaced by one <mask> until mask_ratio of its tokens are hidden (a span of
// length 0 inserts a <mask>); drawn afresh for every batch (eval: one fixed draw).
struct DenoisingSpec {
  bool enabled = false;  // the block is present
  double mask_ratio = 0.3;
  double poisson_lambda = 3.0;
};

// data.task: what the model learns (DataSpec::task).
enum class Task { kLm, kClassification, kMlm, kSeq2seq };
inline constexpr std::array<EnumName<Task>, 4> kTaskNames = {
    {{Task::kLm, "lm"},
     {Task::kClassification, "classification"},
     {Task::kMlm, "mlm"},
     {Task::kSeq2seq, "seq2seq"}}};
inline const char* name_of(Task t) {
  return enum_name(t, kTaskNames);
}

struct DataSpec {
  // lm: language modelling (next-token loss; decoders, or an encoder with a causal-LM head).
  // classification: sequence classification with an encoder's classifier (label_column required;
  // text_pair_column for sentence pairs). mlm: masked-LM pretraining of an encoder. seq2seq: an
  // encoder-decoder (bart) learns target = text_column given source = prompt_column / prompt.
  Task task = Task::kLm;
  double mlm_probability = 0.15;         // mlm: share of text ids masked (lm::MaskingOptions::rate)
  DenoisingSpec denoising;               // seq2seq: sources made from the targets (see above)
  std::vector<std::string> labels;       // classification: label names in class-id order
  DatasetSpec train;                     // the private training set
  std::vector<DatasetSpec> train_extra;  // more training sets, appended to train (public corpora)
  DatasetSpec eval;                      // held-out evaluation set
  // More named evaluation sets (MNLI matched / mismatched style), evaluated with data.eval at
  // every evaluation; metrics.json reports each under eval.<tag>.sets.<name>.
  std::vector<DatasetSpec> eval_sets;
  // data.public: a public training set for methods that learn from public data at no privacy
  // cost (dp-sft's method.source: public). Prepared as data.train is; refused by other methods.
  DatasetSpec public_data;
  int max_length = 128;         // tokens per example after truncation (block size if packed)
  bool packing = false;         // concatenate documents (each + eos), cut into max_length blocks
  bool add_eos = true;          // append eos to each unpacked example when it fits
  // all | response (score only response tokens; needs prompt_column) | assistant (the
  // assistant turns of messages_column chats, or pairs' responses)
  LossOn loss_on = LossOn::kAll;
  // none | auto | a format of core/tokenizer/chat.hpp (pairs and messages as chats)
  ChatFormatChoice chat_format = ChatFormatChoice::kNone;
};

// One group of privacy.clip_groups: the trainable parameters whose name contains `params`, and
// its share of the clipping budget (threshold C sqrt(share / sum of shares)).
struct ClipGroupSpec {
  std::string params;
  double share = 1.0;
};

struct PrivacySpec {
  // Target epsilon; .inf = non-private. No default: a DP method needs epsilon or
  // noise_multiplier given (train::resolve_dp refuses neither). Null with noise_multiplier.
  std::optional<double> epsilon;
  double delta = 1e-5;                     // target delta, (0, 1)
  // privacy.delta: auto: delta = 1 / (N ln N) for the N private examples (CTCL's and its
  // reference code's choice), set by resolve_auto_delta once N is counted, before anything is
  // planned or released; the run's config.resolved.yaml then holds the number.
  bool delta_auto = false;
  bool delta_set = false;  // privacy.delta given (a number or auto) in the spec or by --set
  privacy::AccountantKind accountant = privacy::AccountantKind::kPrv;  // prv | rdp | gaussian
  double eps_error = 0.01;                 // PRV accountant's epsilon discretisation error
  std::optional<double> noise_multiplier;  // sigma; when set, epsilon is computed, not targeted
  std::optional<double> sampling_rate;     // Poisson rate q; null = train.batch_size / N
  double clip_norm = 1.0;  // per-sample clipping bound C (inf = none; only without noise)
  privacy::Clipping clipping = privacy::Clipping::kClip;  // clip | normalize (automatic clipping)
  // flat | per_layer | groups (core/privacy/modes.hpp): which parts of a per-sample gradient are
  // clipped separately, at thresholds that split C (train::clip_groups)
  privacy::ClippingStyle clipping_style = privacy::ClippingStyle::kFlat;
  std::vector<ClipGroupSpec> clip_groups;  // clipping_style groups: one or more
  // Adaptive clipping (core/train/adaptive_clip.hpp; Andrew et al. 2021): set, C starts at
  // clip_norm and moves towards this quantile of the per-unit gradient norms, at rate lr, from
  // a noisy count of std count_std (unset: expected batch / 20) released each step.
  std::optional<double> adaptive_clip_quantile;
  double adaptive_clip_lr = 0.2;
  std::optional<double> adaptive_clip_count_std;
  privacy::NoiseDivisor noise_divisor =
      privacy::NoiseDivisor::kExpected;  // expected (q*N) | realized (actual batch size)
  bool secure_noise = false;             // draw noise from the OS CSPRNG (getrandom)
  // Reproducible research noise: noise and Poisson batches from generators seeded by this
  // (core/privacy/randomness.hpp); anyone who knows it can replay and subtract the noise, so
  // such a run is labelled "noise seeded: not shareable". Unset (the default): keyed by a secret
  // per-run key. Never derived from `seed`.
  std::optional<int64_t> noise_seed;
  // where seeded noise for a GPU's tensors is drawn (core/privacy/noise.hpp): auto = the device
  privacy::NoiseDraw noise_draw = privacy::NoiseDraw::kAuto;
  // What the guarantee protects (core/privacy/modes.hpp): example | document | user. N, the
  // sampling and the sensitivity all count units.
  privacy::PrivacyUnit unit = privacy::PrivacyUnit::kExample;
  // unit user: the most rows of one user a run reads (the first ones in file order, chosen
  // without looking at their content).
  int64_t max_examples_per_user = 16;
  // The one definition of a private spec: noise (given, or calibrated to a finite epsilon).
  // Methods noise their fixed releases (CTCL's histogram, PE's class histogram) only then; the
  // option table (privacy_options.hpp) labels the rest non-private.
  bool is_private() const {
    return noise_multiplier ? *noise_multiplier > 0 : epsilon && std::isfinite(*epsilon);
  }
};

struct TrainSpec {
  int64_t steps = 100;              // optimizer steps (logical batches)
  // Instead of steps: passes over the private set, steps = ceil(epochs / q), converted once N
  // is counted (methods/run.cpp); the resolved spec then holds the steps.
  std::optional<double> epochs;
  int64_t batch_size = 64;          // expected logical batch size (Poisson: q * N)
  int64_t micro_batch_size = 16;    // physical batch bound for memory
  OptimizerKind optimizer = OptimizerKind::kAdamW;  // sgd | adamw
  double lr = 1e-3;                 // peak learning rate
  double weight_decay = 0.0;
  double momentum = 0.0;              // SGD momentum
  double warmup_ratio = 0.0;          // fraction of steps with linear warmup, [0, 1]
  Schedule schedule = Schedule::kConstant;  // constant | linear | cosine (decay after warmup)
};

// Generation evaluation of data-to-text runs (paper 003, Tables 4-5; docs/nlg.md): at the
// listed steps the model decodes every source of data.eval by beam search and the outputs are
// scored against the source's references (BLEU, NIST, METEOR, ROUGE-L, CIDEr).
struct NlgEvalSpec {
  std::vector<int64_t> at_steps;  // empty = off
  int64_t num_beams = 10;         // Yu et al. 2021's decoding (the LoRA code's E2E setting)
  double length_penalty = 0.8;
  int64_t no_repeat_ngram_size = 4;
  int64_t max_new_tokens = 64;
  int64_t max_sources = 0;  // decode only the first N sources of data.eval (0 = all)
  int64_t batch = 8;        // sources per beam-search batch
};

struct EvalSpec {
  int64_t every = 0;        // evaluate every N steps (0 = only before and after training)
  int64_t max_samples = 0;  // cap on evaluated examples (0 = all)
  bool per_sample = true;   // write per_sample.jsonl for the base and final model
  // Steps-to-accuracy (paper 003, Tables 2-3): the first evaluated step whose accuracy reaches
  // 90 % and 95 % of this reference; 0 = not recorded.
  double reference_accuracy = 0;
  NlgEvalSpec nlg;
};

struct OutputSpec {
  std::string dir = "runs";      // runs go to <dir>/<name>/<run-id>/
  int64_t checkpoint_every = 0;  // steps between checkpoints (0 = none)
  bool save_model = true;        // save the trained adapter (LoRA) or model (full) in the run dir
  FloatType save_dtype = FloatType::kFloat32;  // a saved full model's: float32 | float16 | bfloat16
  // Write non-private statistics of the private data (per-step batch loss, realised batch size,
  // gradient norms, clipped fraction, diagnostics, timing, memory) into metrics.json's
  // `non_private` block and metrics.jsonl's step events; false: never compute or write them.
  bool non_private_stats = true;
};

// The method a spec's block configured, opaque to core: methods/method.hpp's Method derives
// from it. The spec parser has the methods layer build it, once per parse (MethodParser below);
// a run works on a copy of it (methods/registry.hpp configured_method), never on a re-parse.
class ConfiguredMethod {
 public:
  virtual ~ConfiguredMethod() = default;
};

// The method block: its name and its options as the method resolved them (every key, defaults
// included), all products of the parse. The methods layer owns their meaning:
// methods/registry.hpp parses and validates them (MethodParser below).
struct MethodSpec {
  std::string name = "noop";
  YAML::Node options;  // resolved options (a map; without `name`), for dumps and the config hash
  std::string label;   // the method's report label for these options (e.g. PE-SGD-FixSample)
  std::shared_ptr<const ConfiguredMethod> configured;  // null only in a Spec not parsed
};

struct Spec {
  std::string name = "experiment";  // run group name: letters, digits, '-', '_', '.'
  std::string label;                // display label for reports ("" = the method's, e.g. PE-SGD)
  int64_t seed = 0;  // public randomness: init, subsampling, public sampling, dropout, generation
                     // (never the noise or Poisson batches: core/privacy/randomness.hpp)
  std::string device = "cpu";       // cpu | cuda | cuda:N
  ModelSpec model;
  DataSpec data;
  PrivacySpec privacy;
  TrainSpec train;
  MethodSpec method;
  EvalSpec eval;
  OutputSpec output;
};

// Load a spec file (InputError, exit 3, if missing, a directory or unreadable; ConfigError
// with line:column on bad YAML, and for duplicate or non-scalar keys and deep nesting).
YAML::Node load_spec_yaml(const std::string& path);

// ConfigError naming the key (and line) of a duplicate key, a key that is not a plain name, or
// nesting deeper than a spec needs. load_spec_yaml and parse_spec call it.
void check_spec_structure(const YAML::Node& root);

// Apply one `key.path=value` override; the value is typed as YAML (so `1e-5`, `inf`, `[a, b]`,
// `null` to unset an optional key); an empty value is a ConfigError.
void apply_override(YAML::Node& root, const std::string& assignment);

// Reads and validates a method block (every key but `name`, through `block`, so unknown keys are
// reported with the rest of the spec's) and returns the resolved options and label. Supplied by
// the methods layer (methods/registry.hpp), which knows the methods; ConfigError for an unknown
// method name.
struct MethodBlock {
  YAML::Node options;
  std::string label;
  bool makes_sources = false;  // data.task seq2seq: the method makes each source (from topics)
  std::shared_ptr<const ConfiguredMethod> configured;
};
using MethodParser = std::function<MethodBlock(const std::string& name, Fields& block)>;

// Parse and validate a whole spec (the node after overrides). Throws ConfigError.
Spec parse_spec(const YAML::Node& root, const MethodParser& parse_method);

// Convenience: file + overrides -> validated Spec. An empty path means "defaults only".
Spec load_spec(const std::string& path, const std::vector<std::string>& overrides,
               const MethodParser& parse_method);

// The fully resolved spec, every field present.
YAML::Node spec_to_yaml(const Spec& spec);
std::string spec_to_yaml_string(const Spec& spec);

// privacy.delta: auto -> 1 / (N ln N) for N private examples (delta_auto cleared). ConfigError
// when that is above 0.01 (N < 40: too few examples for a meaningful delta; set one). A spec
// without delta: auto is left alone.
void resolve_auto_delta(Spec& spec, int64_t n);

// FNV-1a 64 (hex) of the resolved spec without name, seed and output: equal for runs of one
// configuration that differ only in seed, so reports can group them.
std::string config_hash(const Spec& spec);

}  // namespace dpft
