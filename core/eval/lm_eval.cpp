// Language-model and classification evaluation (see lm_eval.hpp).
#include "core/eval/lm_eval.hpp"

#include "core/lm/objective.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <set>
#include <sstream>
#include <tuple>

#include "core/util/atomic_file.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"

namespace dpft::eval {

namespace {

// model->eval() for the guard's lifetime; the previous mode comes back even on an exception.
struct EvalMode {
  model::CausalLM& m;
  bool was_training;
  explicit EvalMode(model::CausalLM& model) : m(model), was_training(model->is_training()) {
    m->eval();
  }
  ~EvalMode() { m->train(was_training); }
};

torch::Device device_of(model::CausalLM& m) {
  for (const auto& p : m->parameters()) return p.device();
  return torch::kCPU;
}

void check_micro_batch(int64_t micro_batch) {
  if (micro_batch < 1)
    throw ConfigError(
        fmt::format("evaluation micro batch: {} rows; it must be at least 1 "
                    "(train.micro_batch_size)",
                    micro_batch));
}

}  // namespace

nlohmann::json LmEvalResult::to_json() const {
  nlohmann::json j = {{"loss", loss},       {"accuracy", accuracy}, {"perplexity", perplexity},
                      {"samples", samples}, {"tokens", tokens},     {"seconds", seconds}};
  if (!classification.is_null()) j["classification"] = classification;
  return j;
}

LmEvalResult evaluate_lm(model::CausalLM& model, const lm::LmDataset& ds, int64_t micro_batch,
                         int64_t max_samples, int64_t pad_id) {
  check_micro_batch(micro_batch);
  auto t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard no_grad;
  EvalMode mode(model);
  torch::Device dev = device_of(model);
  const int64_t n = max_samples > 0 ? std::min(max_samples, ds.size()) : ds.size();
  LmEvalResult r;
  r.per_sample.reserve(static_cast<size_t>(n));
  double total_nll = 0, loss_sum = 0;
  int64_t correct = 0, with_tokens = 0;
  if (ds.objective == lm::Objective::kClassification) {
    std::vector<int64_t> truth, predicted;
    int64_t K = 0;
    for (int64_t start = 0; start < n; start += micro_batch) {
      std::vector<int64_t> rows;
      for (int64_t i = start; i < std::min(n, start + micro_batch); ++i) rows.push_back(i);
      lm::LmBatch b = lm::collate(ds, rows, pad_id);
      torch::Tensor z = lm::class_logits(*model, b).to(torch::kCPU, torch::kFloat64);  // (B, K)
      K = z.size(1);
      torch::Tensor y = b.class_labels;
      torch::Tensor nll = -torch::log_softmax(z, 1).gather(1, y.unsqueeze(1)).squeeze(1);
      torch::Tensor pred = z.argmax(1);
      for (size_t i = 0; i < rows.size(); ++i) {
        const int64_t t = y[static_cast<int64_t>(i)].item<int64_t>(),
                      p = pred[static_cast<int64_t>(i)].item<int64_t>();
        SampleScore s{b.index[i], nll[static_cast<int64_t>(i)].item<double>(), 1, p == t ? 1 : 0, t,
                      p};
        loss_sum += s.loss;
        correct += s.correct;
        truth.push_back(t), predicted.push_back(p);
        r.per_sample.push_back(s);
      }
    }
    r.samples = r.tokens = n;
    r.loss = n > 0 ? loss_sum / static_cast<double>(n) : 0.0;
    r.accuracy = n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
    r.perplexity = n > 0 ? std::exp(r.loss) : 0.0;
    if (K == 0) K = model->config().num_labels();
    r.classification =
        classification_metrics(truth, predicted, std::max<int64_t>(K, 1), K == 2 ? 1 : -1)
            .to_json();
    r.seconds = seconds_since(t0);
    return r;
  }
  const bool masked = ds.objective == lm::Objective::kMaskedLM;
  for (int64_t start = 0; start < n; start += micro_batch) {
    std::vector<int64_t> rows;
    for (int64_t i = start; i < std::min(n, start + micro_batch); ++i) rows.push_back(i);
    lm::LmBatch b = lm::collate(ds, rows, pad_id);
    torch::Tensor ids = b.input_ids.to(dev), mask = b.attention_mask.to(dev),
                  labels = b.labels.to(dev);
    torch::Tensor loss, tokens, right;  // (B) each
    if (masked) {                       // at the masked positions (collate's fixed draw-0 masks)
      lm::MaskedLmScores sc = lm::masked_lm_scores(*model, b);
      loss = sc.loss, tokens = sc.targets, right = sc.correct;
    } else if (ds.objective == lm::Objective::kSeq2Seq) {  // target t given source and y_<t
      lm::MaskedLmScores sc = lm::seq2seq_scores(*model, b);
      loss = sc.loss, tokens = sc.targets, right = sc.correct;
    } else {  // position t predicts labels[t + 1]; the head on the scored positions only
      model::NextTokenScores sc = model::next_token_scores(*model, ids, mask, labels, true);
      loss = sc.loss, tokens = sc.tokens, right = sc.correct;
    }
    loss = loss.to(torch::kCPU, torch::kFloat64);
    tokens = tokens.to(torch::kCPU, torch::kInt64);
    right = right.to(torch::kCPU, torch::kInt64);
    for (size_t i = 0; i < rows.size(); ++i) {
      SampleScore s{b.index[i], loss[i].item<double>(), tokens[i].item<int64_t>(),
                    right[i].item<int64_t>()};
      total_nll += s.loss * static_cast<double>(s.tokens);
      r.tokens += s.tokens;
      correct += s.correct;
      if (s.tokens > 0) loss_sum += s.loss, ++with_tokens;
      r.per_sample.push_back(s);
    }
  }
  r.samples = n;
  r.loss = with_tokens > 0 ? loss_sum / static_cast<double>(with_tokens) : 0.0;
  r.accuracy = r.tokens > 0 ? static_cast<double>(correct) / static_cast<double>(r.tokens) : 0.0;
  r.perplexity = r.tokens > 0 ? std::exp(total_nll / static_cast<double>(r.tokens)) : 0.0;
  r.seconds = seconds_since(t0);
  return r;
}

void append_per_sample(const std::filesystem::path& file, const std::string& tag,
                       const LmEvalResult& r) {
  // Lines of this tag from an earlier attempt (a run resumed after a crash in its final
  // evaluation) are replaced, never duplicated; the file is rewritten atomically.
  std::string out;
  if (std::filesystem::exists(file)) {
    std::istringstream in(read_file(file));
    std::string line;
    while (std::getline(in, line)) {
      nlohmann::json e = nlohmann::json::parse(line, nullptr, false);
      if (!e.is_object()) continue;  // a torn last line of a killed run
      if (e.value("model", "") != tag) out += line + "\n";
    }
  }
  for (const SampleScore& s : r.per_sample) {
    nlohmann::json line = {
        {"model", tag},
        {"index", s.index},
        {"loss", s.loss},
        {"tokens", s.tokens},
        {"accuracy",
         s.tokens > 0 ? static_cast<double>(s.correct) / static_cast<double>(s.tokens) : 0.0}};
    if (s.truth >= 0) line["label"] = s.truth, line["predicted"] = s.predicted;
    out += line.dump() + "\n";
  }
  write_file_atomic(file, out);
}

nlohmann::json ClassificationMetrics::to_json() const {
  return {{"samples", samples},    {"correct", correct},         {"accuracy", accuracy},
          {"macro_f1", macro_f1},  {"positive_f1", positive_f1}, {"mcc", mcc},
          {"confusion", confusion}};
}

ClassificationMetrics classification_metrics(const std::vector<int64_t>& truth,
                                             const std::vector<int64_t>& predicted, int64_t K,
                                             int64_t positive) {
  DPFT_CHECK_AS(InputError, truth.size() == predicted.size() && K >= 1,
                "classification metrics: {} true labels but {} predictions (K = {})", truth.size(),
                predicted.size(), K);
  ClassificationMetrics m;
  m.confusion.assign(static_cast<size_t>(K), std::vector<int64_t>(static_cast<size_t>(K), 0));
  for (size_t i = 0; i < truth.size(); ++i) {
    DPFT_CHECK_AS(InputError,
                  truth[i] >= 0 && truth[i] < K && predicted[i] >= 0 && predicted[i] < K,
                  "classification metrics: sample {} has class {} / prediction {} outside [0, {})",
                  i, truth[i], predicted[i], K);
    ++m.confusion[static_cast<size_t>(truth[i])][static_cast<size_t>(predicted[i])];
  }
  m.samples = static_cast<int64_t>(truth.size());
  std::vector<double> t(static_cast<size_t>(K), 0), p(static_cast<size_t>(K), 0);
  for (int64_t a = 0; a < K; ++a)
    for (int64_t b = 0; b < K; ++b) {
      const double c = static_cast<double>(m.confusion[a][b]);
      t[a] += c;
      p[b] += c;
      if (a == b) m.correct += m.confusion[a][b];
    }
  const double s = static_cast<double>(m.samples), c = static_cast<double>(m.correct);
  m.accuracy = m.samples > 0 ? c / s : 0.0;
  auto f1 = [&](int64_t k) {
    const double tp = static_cast<double>(m.confusion[k][k]);
    const double denom = t[k] + p[k];  // 2 TP + FP + FN
    return denom > 0 ? 2 * tp / denom : 0.0;
  };
  double sum_f1 = 0;
  for (int64_t k = 0; k < K; ++k) sum_f1 += f1(k);
  m.macro_f1 = sum_f1 / static_cast<double>(K);
  m.positive_f1 = positive >= 0 && positive < K ? f1(positive) : 0.0;
  double pt = 0, pp = 0, tt = 0;
  for (int64_t k = 0; k < K; ++k) pt += p[k] * t[k], pp += p[k] * p[k], tt += t[k] * t[k];
  const double den = std::sqrt((s * s - pp) * (s * s - tt));
  m.mcc = den > 0 ? (c * s - pt) / den : 0.0;
  return m;
}

nlohmann::json ClassEvalResult::to_json() const {
  nlohmann::json j = {
      {"accuracy", accuracy}, {"samples", samples}, {"correct", correct}, {"seconds", seconds}};
  const nlohmann::json m = metrics.to_json();  // a named json: items() refers into it
  for (auto& [k, v] : m.items())
    if (!j.contains(k)) j[k] = v;
  return j;
}

std::vector<std::string> label_set(const std::vector<lm::Example>& examples) {
  std::set<std::string> s;
  for (const lm::Example& e : examples)
    if (!e.label.empty()) s.insert(e.label);
  return {s.begin(), s.end()};
}

std::vector<int32_t> candidate_ids(const tok::Tokenizer& tok, const std::string& text,
                                   const std::string& label, int64_t max_length,
                                   size_t& first_label) {
  std::vector<int32_t> ids;
  if (tok.add_bos() && tok.bos_id()) ids.push_back(*tok.bos_id());
  std::vector<int32_t> nl = tok.encode("\n"), lab = tok.encode(label);
  if (lab.empty())
    throw InputError("classification: a candidate label is empty; every label needs some text");
  int64_t budget = max_length - static_cast<int64_t>(ids.size() + nl.size() + lab.size());
  if (budget < 0)
    throw InputError(
        fmt::format("classification: label '{}' needs {} tokens, more than max_length {} allows; "
                    "raise data.max_length",
                    label, ids.size() + nl.size() + lab.size(), max_length));
  if (budget > 0) {
    tok::EncodeOptions eo;
    eo.max_length = static_cast<size_t>(budget);
    std::vector<int32_t> t = tok.encode(text, eo);
    ids.insert(ids.end(), t.begin(), t.end());
  }
  ids.insert(ids.end(), nl.begin(), nl.end());
  first_label = ids.size();
  ids.insert(ids.end(), lab.begin(), lab.end());
  return ids;
}

ClassEvalResult evaluate_classification(model::CausalLM& model,
                                        const std::vector<lm::Example>& examples,
                                        const tok::Tokenizer& tok,
                                        const std::vector<std::string>& labels, int64_t micro_batch,
                                        int64_t max_length, int64_t max_samples, int64_t pad_id) {
  check_micro_batch(micro_batch);
  if (labels.empty())
    throw ConfigError("classification: the label set is empty; give at least one label");
  auto t0 = std::chrono::steady_clock::now();
  const int64_t n =
      max_samples > 0 ? std::min<int64_t>(max_samples, examples.size()) : examples.size();
  const int64_t C = static_cast<int64_t>(labels.size());
  // Every (example, label) pair is one row whose only scored ids are the label's.
  lm::LmDataset rows;
  std::vector<int64_t> truth(static_cast<size_t>(n), -1);
  for (int64_t i = 0; i < n; ++i) {
    const lm::Example& e = examples[i];
    for (int64_t c = 0; c < C; ++c) {
      if (labels[c] == e.label) truth[i] = c;
      lm::TokenizedExample t;
      size_t first = 0;
      t.index = i * C + c;
      t.ids = candidate_ids(tok, e.text, labels[c], max_length, first);
      t.scored.assign(t.ids.size(), 0);
      std::fill(t.scored.begin() + first, t.scored.end(), 1);
      rows.items.push_back(std::move(t));
    }
    if (truth[i] < 0)
      throw InputError(
          fmt::format("classification: example {} has label '{}', which is not in the label set",
                      e.index, e.label));
  }
  torch::NoGradGuard no_grad;
  EvalMode mode(model);
  torch::Device dev = device_of(model);
  std::vector<double> nll(rows.items.size());
  for (int64_t start = 0; start < rows.size(); start += micro_batch) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(rows.size(), start + micro_batch); ++i) idx.push_back(i);
    lm::LmBatch b = lm::collate(rows, idx, pad_id);
    // The head on the scored (label) positions only; sum = mean x count per row.
    model::NextTokenScores sc = model::next_token_scores(
        *model, b.input_ids.to(dev), b.attention_mask.to(dev), b.labels.to(dev));
    torch::Tensor sum =
        (sc.loss.to(torch::kFloat64) * sc.tokens.to(torch::kFloat64)).to(torch::kCPU);  // (B)
    for (size_t k = 0; k < idx.size(); ++k) nll[idx[k]] = sum[k].item<double>();
  }
  ClassEvalResult r;
  r.samples = n;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<double> s(nll.begin() + i * C, nll.begin() + (i + 1) * C);
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (s[c] < s[best]) best = c;
    r.predicted.push_back(best);
    r.truth.push_back(truth[i]);
    r.scores.push_back(std::move(s));
    if (best == truth[i]) ++r.correct;
  }
  r.accuracy = n > 0 ? static_cast<double>(r.correct) / static_cast<double>(n) : 0.0;
  r.metrics = classification_metrics(r.truth, r.predicted, C, C == 2 ? 1 : -1);
  r.seconds = seconds_since(t0);
  return r;
}

}  // namespace dpft::eval
