#include "core/lm/objective.hpp"

#include "core/model/encoder.hpp"
#include "core/model/seq2seq.hpp"
#include "core/util/error.hpp"
#include "core/util/shape.hpp"

namespace dpft::lm {

namespace {
torch::Tensor on(const torch::Tensor& t, const torch::Device& dev) {
  return t.defined() ? t.to(dev) : t;
}
}  // namespace

torch::Tensor class_logits(model::CausalLMImpl& model, const LmBatch& b) {
  auto* enc = dynamic_cast<model::EncoderImpl*>(&model);
  DPFT_CHECK_AS(ConfigError, enc != nullptr,
                "a classification objective needs an encoder with a sequence-classification "
                "head; this is a {} model",
                model.config().model_type);
  const torch::Device dev = model.parameters().front().device();
  return enc->classify(b.input_ids.to(dev), on(b.attention_mask, dev), on(b.token_type_ids, dev));
}

torch::Tensor sample_losses(model::CausalLMImpl& model, const LmBatch& b) {
  const torch::Device dev = model.parameters().front().device();
  if (b.objective == Objective::kClassification) {
    DPFT_CHECK(b.class_labels.defined() && b.class_labels.dim() == 1 &&
                   b.class_labels.size(0) == b.input_ids.size(0),
               "a classification batch needs class_labels (B), got {}",
               b.class_labels.defined() ? shape_str(b.class_labels.sizes()) : "none");
    torch::Tensor z = class_logits(model, b).to(torch::kFloat32);  // (B, L)
    torch::Tensor y = b.class_labels.to(dev);
    DPFT_CHECK(
        y.numel() == 0 || (y.min().item<int64_t>() >= 0 && y.max().item<int64_t>() < z.size(1)),
        "class ids must lie in [0, {}) (the model's labels)", z.size(1));
    return -torch::log_softmax(z, 1).gather(1, y.unsqueeze(1)).squeeze(1);
  }
  if (b.objective == Objective::kMaskedLM) {
    return masked_lm_scores(model, b).loss;
  }
  if (b.objective == Objective::kSeq2Seq) return seq2seq_scores(model, b).loss;
  DPFT_CHECK_AS(ConfigError, !b.token_type_ids.defined(),
                "token types belong to encoder batches; a next-token batch has none");
  // The head on the scored positions only (with loss_on: response, most of a prompt's are not).
  return model::next_token_scores(model, b.input_ids.to(dev), on(b.attention_mask, dev),
                                  b.labels.to(dev))
      .loss;
}

std::pair<torch::Tensor, torch::Tensor> masked_token_loss(const torch::Tensor& logits,
                                                          const torch::Tensor& labels) {
  DPFT_CHECK(logits.dim() == 3 && labels.dim() == 2 && logits.size(0) == labels.size(0) &&
                 logits.size(1) == labels.size(1),
             "masked_token_loss: logits {} and labels {} do not match (B, T, V) / (B, T)",
             shape_str(logits.sizes()), shape_str(labels.sizes()));
  const torch::Tensor target = labels.ne(-100);                             // (B, T)
  torch::Tensor logp = torch::log_softmax(logits.to(torch::kFloat32), -1);  // (B, T, V)
  torch::Tensor nll = -logp.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1);
  nll = nll * target.to(torch::kFloat32);
  torch::Tensor count = target.sum(1);  // (B) int64
  return {nll.sum(1) / count.clamp_min(1).to(torch::kFloat32), count};
}

MaskedLmScores masked_lm_scores(model::CausalLMImpl& model, const LmBatch& b) {
  auto* enc = dynamic_cast<model::EncoderImpl*>(&model);
  DPFT_CHECK_AS(ConfigError, enc != nullptr && model.config().head == model::EncoderHead::kMaskedLM,
                "a masked-LM objective needs an encoder with a masked-LM head "
                "(BertForMaskedLM / RobertaForMaskedLM); this is a {} model",
                model.config().model_type);
  const torch::Device dev = model.parameters().front().device();
  const int64_t B = b.input_ids.size(0);
  torch::Tensor labels = b.labels.to(dev);  // (B, T)
  torch::Tensor h = enc->encode(b.input_ids.to(dev), on(b.attention_mask, dev),
                                on(b.token_type_ids, dev));  // (B, T, d)
  torch::Tensor where = labels.ne(-100).nonzero();           // (M, 2): row, position
  torch::Tensor row = where.select(1, 0), pos = where.select(1, 1);
  torch::Tensor y = labels.index({row, pos});                                          // (M)
  torch::Tensor z = enc->lm_head(h.index({row, pos})).to(torch::kFloat32);             // (M, V)
  torch::Tensor nll = -torch::log_softmax(z, 1).gather(1, y.unsqueeze(1)).squeeze(1);  // (M)
  auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  MaskedLmScores s;
  s.targets = torch::zeros({B}, i64).index_add_(0, row, torch::ones_like(row));
  s.correct = torch::zeros({B}, i64).index_add_(0, row, z.argmax(1).eq(y).to(torch::kInt64));
  s.loss = torch::zeros({B}, nll.options()).index_add(0, row, nll) /
           s.targets.clamp_min(1).to(torch::kFloat32);
  return s;
}

MaskedLmScores seq2seq_scores(model::CausalLMImpl& model, const LmBatch& b) {
  auto* s2s = dynamic_cast<model::Seq2SeqImpl*>(&model);
  DPFT_CHECK_AS(ConfigError, s2s != nullptr,
                "a seq2seq objective (data.task: seq2seq) needs an encoder-decoder model (bart); "
                "this is a {} model",
                model.config().model_type);
  DPFT_CHECK(
      b.src_ids.defined() && b.src_mask.defined() && b.src_ids.size(0) == b.input_ids.size(0),
      "a seq2seq batch needs src_ids and src_mask with one row per target");
  const torch::Device dev = model.parameters().front().device();
  const model::ModelConfig& c = model.config();
  torch::Tensor y = b.input_ids.to(dev), mask = b.attention_mask.to(dev);  // (B, T)
  // Teacher forcing: the decoder reads the start token, then the targets shifted right.
  torch::Tensor dec = model::shift_right(y, c.decoder_start_token_id, c.pad_token_id.value_or(1));
  torch::Tensor dec_mask =
      torch::cat({torch::ones_like(mask.slice(1, 0, 1)), mask.slice(1, 0, -1)}, 1);
  torch::Tensor logits = s2s->seq2seq_logits(b.src_ids.to(dev), b.src_mask.to(dev), dec,
                                             dec_mask);  // (B, T, V)
  torch::Tensor labels = b.labels.to(dev);
  MaskedLmScores s;
  std::tie(s.loss, s.targets) = masked_token_loss(logits, labels);
  s.correct = (logits.argmax(-1).eq(labels) & labels.ne(-100)).sum(1);
  return s;
}

LmBatch select_rows(const LmBatch& b, const std::vector<int64_t>& rows) {
  const torch::Tensor idx = torch::tensor(rows, torch::kInt64);
  auto pick = [&](const torch::Tensor& t) {
    return t.defined() ? t.index_select(0, idx.to(t.device())) : t;
  };
  LmBatch o;
  o.objective = b.objective;
  o.input_ids = pick(b.input_ids);
  o.attention_mask = pick(b.attention_mask);
  o.labels = pick(b.labels);
  o.token_type_ids = pick(b.token_type_ids);
  o.class_labels = pick(b.class_labels);
  o.src_ids = pick(b.src_ids);
  o.src_mask = pick(b.src_mask);
  for (int64_t r : rows) o.index.push_back(b.index.empty() ? r : b.index[static_cast<size_t>(r)]);
  return o;
}

}  // namespace dpft::lm
