#include "methods/evaluate.hpp"

#include <spdlog/spdlog.h>

#include "core/model/checkpoint.hpp"
#include "core/model/config.hpp"
#include "core/model/source.hpp"
#include "core/train/eval_block.hpp"
#include "core/train/setup.hpp"
#include "core/util/log.hpp"
#include "data/train_inputs.hpp"

namespace dpft {

namespace {

// The task a model is for: its head (an encoder's), an encoder-decoder's seq2seq, else lm.
Task default_task(const model::ModelConfig& mc) {
  if (mc.is_seq2seq()) return Task::kSeq2seq;
  if (mc.is_encoder() && mc.head == model::EncoderHead::kSequenceClassification)
    return Task::kClassification;
  if (mc.is_encoder() && mc.head == model::EncoderHead::kMaskedLM) return Task::kMlm;
  return Task::kLm;
}

}  // namespace

nlohmann::json evaluate_model(const EvalRequest& q) {
  const WarningCapture warnings;
  const model::ModelSource src = model::resolve_model_source(q.model, q.adapter);
  train::TrainInputs in;
  in.model_dir = src.base;
  in.model = model::load_checkpoint(src.base);
  if (!src.adapter.empty()) model::load_adapter(in.model, src.adapter);
  in.model->eval();
  const model::ModelConfig& mc = in.model->config();
  Spec spec;  // what reading data.eval takes from a spec
  spec.model.path = src.base.string();
  spec.data.task = q.task ? *q.task : default_task(mc);
  spec.data.max_length = static_cast<int>(q.max_length);
  spec.data.labels = q.labels;
  spec.data.eval = q.data;
  train::check_task_fits(spec, mc, src.base);
  in.model_labels = mc.labels;
  train::load_tokenizers(spec, in, mc);
  data::build_eval_inputs(spec, in);
  spdlog::info("eval {} on {}: {} examples", src.describe(), q.data.path, in.eval.size());
  const train::EvalBlock b = train::eval_block(in, q.batch, q.max_samples, q.max_length, true);
  nlohmann::json out = {{"model", src.base.string()},
                        {"adapter", src.adapter.empty() ? nlohmann::json(nullptr)
                                                        : nlohmann::json(src.adapter.string())},
                        {"data", q.data.path},
                        {"task", name_of(spec.data.task)},
                        {"eval", b.block},
                        {"note",
                         "non-private: statistics of the data file as given, not a DP release; "
                         "share them only if that file is public (docs/outputs.md)"}};
  if (const std::vector<std::string> w = captured_warnings(); !w.empty()) out["warnings"] = w;
  return out;
}

}  // namespace dpft
