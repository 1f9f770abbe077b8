#include "core/eval/grad_diagnostics.hpp"

#include <map>
#include <string>

#include "core/project/projection.hpp"

namespace dpft::eval {

using torch::Tensor;

namespace {
double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}
}  // namespace

DirectionError direction_error(const Tensor& d, const Tensor& ref) {
  Tensor a = d.to(torch::kFloat64), b = ref.to(torch::kFloat64);
  DirectionError e;
  e.l2 = (a - b).norm().item<double>();
  e.cosine = (a.dot(b) / (a.norm() * b.norm()).clamp_min(1e-300)).item<double>();
  return e;
}

Tensor principal_angles_deg(const Tensor& A, const Tensor& B) {
  if (A.size(1) == 0 || B.size(1) == 0) return torch::zeros({0}, torch::kFloat64);
  Tensor s = torch::linalg_svdvals(A.t().to(torch::kFloat64).matmul(B.to(torch::kFloat64)));
  return torch::rad2deg(torch::acos(s.clamp(-1.0, 1.0)));  // s descending: angles ascending
}

double subspace_overlap(const Tensor& A, const Tensor& B) {
  if (A.size(1) == 0 || B.size(1) == 0) return 0;
  Tensor O = A.t().to(torch::kFloat64).matmul(B.to(torch::kFloat64));
  return O.pow(2).sum().item<double>();
}

nlohmann::json dp_sgd_step(const Tensor& d, const Tensor& true_mean, double signal_norm,
                           double noise_norm) {
  DirectionError de = direction_error(d, true_mean);
  const double nts = signal_norm > 0 ? noise_norm / signal_norm : 0.0;
  return {{"l2", de.l2}, {"cosine", de.cosine}, {"noise_to_signal", nts}};
}

nlohmann::json summarize_history(const nlohmann::json& history) {
  std::map<std::string, std::pair<double, int64_t>> acc;
  int64_t steps = 0;
  for (const auto& h : history) {
    if (!h.contains("diagnostics")) continue;
    ++steps;
    for (const auto& [k, v] : h["diagnostics"].items()) {
      acc[k].first += v.get<double>();
      ++acc[k].second;
    }
  }
  nlohmann::json out = {{"steps", steps}};
  const std::map<std::string, std::string> names = {{"l2", "l2_mean"}, {"cosine", "cosine_mean"}};
  for (const auto& [k, s] : acc)
    out[names.count(k) ? names.at(k) : k] = s.first / static_cast<double>(s.second);
  return out;
}

nlohmann::json ProjectionDiagnostics::record(const Step& s) {
  const int64_t M = s.Hs.size(0);
  DirectionError de = direction_error(s.direction, s.Hs.mean(0));
  Tensor n = s.noised_norms.to(torch::kFloat64);
  const double sm = M > 1 ? (n.std().item<double>() / n.mean().item<double>()) : 0.0;
  const double mm =
      n.max().item<double>() > 0 ? n.min().item<double>() / n.max().item<double>() : 0.0;
  Tensor EH = project::top_basis(s.Hs, k_), EG = project::top_basis(s.Gs, k_);
  if (!E_H0_.defined()) E_H0_ = EH;
  Tensor ang = principal_angles_deg(E_H0_, EH);
  const double angle = ang.numel() ? ang.mean().item<double>() : 0.0;
  Tensor ang64 = ang.to(torch::kFloat64).contiguous();
  std::vector<double> angles(ang64.data_ptr<double>(), ang64.data_ptr<double>() + ang64.numel());
  const double overlap = subspace_overlap(EG, EH);
  const double nts = s.signal_norm > 0 ? s.noise_norm / s.signal_norm : 0.0;
  nts_.push_back(nts);
  l2_.push_back(de.l2), cos_.push_back(de.cosine), std_mean_.push_back(sm), min_max_.push_back(mm);
  overlap_.push_back(overlap);
  if (s.step > 0) angle_.push_back(angle);
  return {{"l2", de.l2},
          {"cosine", de.cosine},
          {"noise_to_signal", nts},
          {"norm_std_over_mean", sm},
          {"norm_min_over_max", mm},
          {"overlap_g_h", overlap},
          {"principal_angle_mean_deg", angle},
          {"principal_angles_deg", angles}};
}

nlohmann::json ProjectionDiagnostics::summary() const {
  if (l2_.empty()) return nullptr;
  return {{"steps", l2_.size()},
          {"l2_mean", mean_of(l2_)},
          {"cosine_mean", mean_of(cos_)},
          {"noise_to_signal", mean_of(nts_)},
          {"norm_std_over_mean", mean_of(std_mean_)},
          {"norm_min_over_max", mean_of(min_max_)},
          {"overlap_g_h", mean_of(overlap_)},
          {"principal_angle_mean_deg",
           angle_.empty() ? nlohmann::json(nullptr) : nlohmann::json(mean_of(angle_))}};
}

}  // namespace dpft::eval
