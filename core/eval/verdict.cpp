#include "core/eval/verdict.hpp"

#include <fmt/format.h>

#include <cmath>

namespace dpft::eval {

double mcc_noise_band(int64_t n) {
  return n > 0 ? 2.0 / std::sqrt(static_cast<double>(n)) : 1.0;
}

namespace {

double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

// A classifier's warnings from its confusion matrix [true][predicted] and MCC.
void classifier_warnings(const nlohmann::json& c, std::vector<std::string>& out) {
  const nlohmann::json& conf = c.value("confusion", nlohmann::json::array());
  const int64_t n = c.value("samples", int64_t{0});
  if (n <= 0 || !conf.is_array()) return;
  std::vector<int64_t> predicted(conf.size(), 0);
  for (const auto& row : conf)
    for (size_t p = 0; p < row.size() && p < predicted.size(); ++p)
      predicted[p] += row[p].get<int64_t>();
  int used = 0;
  size_t only = 0;
  for (size_t p = 0; p < predicted.size(); ++p)
    if (predicted[p] > 0) ++used, only = p;
  if (used == 1)
    out.push_back(fmt::format(
        "trivial result: the final model predicts class {} for every one of the {} eval rows "
        "(a constant predictor: its accuracy {:.4f} is that class's share); train longer, "
        "raise train.lr, or give more data or a larger privacy.epsilon",
        only, n, num(c, "accuracy")));
  const double mcc = num(c, "mcc"), band = mcc_noise_band(n);
  if (std::fabs(mcc) < band)
    out.push_back(fmt::format(
        "trivial result: MCC {:.4f} is within noise of 0 (|MCC| < 2 / sqrt({}) = {:.4f}): the "
        "classifier is no better than chance on this eval set",
        mcc, n, band));
}

}  // namespace

EvalVerdict eval_verdict(const nlohmann::json& base, const nlohmann::json& final_eval,
                         bool classifier) {
  EvalVerdict v;
  if (!base.is_object() || !final_eval.is_object()) return v;
  const double l0 = num(base, "loss"), l1 = num(final_eval, "loss");
  v.line = fmt::format("eval loss {:.4f} -> {:.4f}, accuracy {:.4f} -> {:.4f}", l0, l1,
                       num(base, "accuracy"), num(final_eval, "accuracy"));
  const nlohmann::json* c0 = base.contains("classification") ? &base["classification"] : nullptr;
  const nlohmann::json* c1 =
      final_eval.contains("classification") ? &final_eval["classification"] : nullptr;
  if (c1 && c1->is_object() && c1->contains("mcc") && c1->contains("confusion")) {
    if (c0 && c0->is_object() && c0->contains("mcc"))
      v.line +=
          fmt::format(", macro-F1 {:.4f} -> {:.4f}, MCC {:.4f} -> {:.4f}", num(*c0, "macro_f1"),
                      num(*c1, "macro_f1"), num(*c0, "mcc"), num(*c1, "mcc"));
    else
      v.line += fmt::format(", macro-F1 {:.4f}, MCC {:.4f}", num(*c1, "macro_f1"), num(*c1, "mcc"));
    classifier_warnings(*c1, v.warnings);
  }
  if (!classifier && l1 > l0) {
    v.warnings.push_back(fmt::format(
        "the final model's eval loss {:.4f} is worse than the base model's {:.4f}: fine-tuning "
        "made it worse (the noise may dominate at this epsilon: try a lower train.lr, fewer "
        "steps, or more data)",
        l1, l0));
  }
  return v;
}

}  // namespace dpft::eval
