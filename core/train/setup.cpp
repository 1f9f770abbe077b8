#include "core/train/setup.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <unordered_set>

#include "core/eval/lm_eval.hpp"
#include "core/model/checkpoint.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/error.hpp"
#include "core/util/seed.hpp"
#include "data/table.hpp"
#include "dpft/build_info.hpp"

namespace dpft::train {

namespace fs = std::filesystem;

fs::path resolve_model_dir(const std::string& path) {
  if (!path.empty()) {
    if (!fs::is_directory(path))
      throw InputError(
          fmt::format("model.path: '{}' is not a directory (expected a HF-format checkpoint: "
                      "config.json + model.safetensors + tokenizer files)",
                      path));
    return path;
  }
  std::vector<fs::path> tried;
  if (const char* env = std::getenv("DPFT_DEFAULT_MODEL")) tried.emplace_back(env);
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) tried.push_back(exe.parent_path().parent_path() / "models" / "tiny-gpt2");
  tried.push_back(fs::path(build::kSourceDir) / "models" / "tiny-gpt2");
  for (const auto& p : tried)
    if (fs::exists(p / "config.json")) return p;
  std::string list;
  for (const auto& p : tried) list += "\n  " + p.string();
  throw InputError(
      "the embedded default model was not found; looked in:" + list +
      "\nset model.path to a checkpoint directory or DPFT_DEFAULT_MODEL to models/tiny-gpt2");
}

model::PeftOptions peft_options(const Spec& spec) {
  model::PeftOptions o;
  o.kind = spec.model.peft.kind;
  o.r = spec.model.peft.r;
  o.alpha = spec.model.peft.alpha;
  o.dropout = spec.model.peft.dropout;
  o.targets = spec.model.peft.targets;
  return o;
}

TrainInputs load_train_inputs(const Spec& spec) {
  TrainInputs in;
  in.model_dir = resolve_model_dir(spec.model.path);
  in.model = model::load_checkpoint(in.model_dir);
  in.peft = peft_options(spec);
  model::apply_peft(in.model, in.peft, derive_seed(spec.seed, "peft"));
  in.tok = std::make_shared<tok::Tokenizer>(tok::load_tokenizer(in.model_dir));
  DPFT_CHECK_AS(InputError, in.tok->vocab_size() <= in.model->config().vocab_size,
                "tokenizer in {} has {} ids but the model only {} embeddings",
                in.model_dir.string(), in.tok->vocab_size(), in.model->config().vocab_size);
  auto pad = in.tok->pad_id() ? in.tok->pad_id() : in.tok->eos_id();
  in.pad_id = pad ? *pad : 0;
  DPFT_CHECK_AS(ConfigError, !spec.data.train.path.empty(),
                "data.train.path: no private training set given");
  const std::vector<data::Example> train_examples = data::select_examples(
      spec.data.train, spec.data.train_extra, spec.data, derive_seed(spec.seed, "data"));
  in.train = data::build_lm_dataset(train_examples, *in.tok, data::lm_data_options(spec.data));
  if (!spec.data.eval.path.empty()) {
    uint64_t eval_seed = derive_seed(spec.seed, "eval-data");
    std::unordered_set<std::string> train_texts;  // data.eval.exclude_train: held-out rows only
    for (const data::Example& e : train_examples) train_texts.insert(e.text);
    const auto* exclude = spec.data.eval.exclude_train ? &train_texts : nullptr;
    std::vector<data::Example> eval_examples =
        data::select_examples(spec.data.eval, {}, spec.data, eval_seed, exclude);
    in.eval = data::build_lm_dataset(eval_examples, *in.tok, data::lm_data_options(spec.data));
    if (!spec.data.eval.label_column.empty()) {
      in.eval_examples = eval_examples;
      in.labels = eval::label_set(in.eval_examples);
      DPFT_CHECK_AS(InputError, in.labels.size() >= 2,
                    "data.eval.label_column '{}': need at least 2 distinct labels, found {}",
                    spec.data.eval.label_column, in.labels.size());
    }
  }
  spdlog::info(
      "model {} ({} trainable of {} parameters, peft {}); train {} examples ({} tokens), eval {}",
      in.model_dir.string(), model::count_parameters(in.model, true),
      model::count_parameters(in.model, false), in.peft.kind, in.train.size(),
      in.train.num_tokens(), in.eval.size());
  return in;
}

int64_t count_train_examples(const Spec& spec) {
  if (spec.data.train.path.empty()) return 0;
  int64_t n = static_cast<int64_t>(
      data::read_table(spec.data.train.path, spec.data.train.format).rows.size());
  for (const auto& e : spec.data.train_extra)
    n += static_cast<int64_t>(data::read_table(e.path, e.format).rows.size());
  if (spec.data.train.num_samples > 0) n = std::min(n, spec.data.train.num_samples);
  return n;
}

}  // namespace dpft::train
