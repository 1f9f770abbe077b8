#include "core/eval/distribution.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/topics/topic_model.hpp"
#include "core/util/error.hpp"

namespace dpft::eval {

namespace {

torch::Tensor rows64(const torch::Tensor& x, const char* what, int64_t min_rows) {
  DPFT_CHECK_AS(InputError, x.defined() && x.dim() == 2 && x.is_floating_point(),
                "{}: embeddings must be a 2-D floating tensor (one row per text)", what);
  DPFT_CHECK_AS(InputError, x.size(0) >= min_rows,
                "{}: {} texts; this measure needs at least {}", what, x.size(0), min_rows);
  torch::Tensor y = x.to(torch::kCPU, torch::kFloat64).contiguous();
  DPFT_CHECK_AS(InputError, torch::isfinite(y).all().item<bool>(),
                "{}: the embeddings hold a NaN or an infinity", what);
  return y;
}

void same_dims(const torch::Tensor& a, const torch::Tensor& b) {
  DPFT_CHECK_AS(InputError, a.size(1) == b.size(1),
                "real embeddings have {} dimensions, synthetic ones {}: embed both with the same "
                "model",
                a.size(1), b.size(1));
}

// Per row of x (n, d): the distance to its k-th nearest row of y (m, d); `self` excludes the
// row itself (x == y, distance 0 at the same index). Exact, row chunks of 1024.
torch::Tensor kth_distance(const torch::Tensor& x, const torch::Tensor& y, int64_t k, bool self) {
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < x.size(0); i += 1024) {
    torch::Tensor d = torch::cdist(x.slice(0, i, std::min(x.size(0), i + 1024)), y);
    // With self, the smallest is the row itself (0): the k-th neighbour is the (k+1)-th.
    out.push_back(std::get<0>(d.topk(self ? k + 1 : k, 1, /*largest=*/false)).select(1, -1));
  }
  return torch::cat(out);
}

// The share of rows of `a` within the ball of some row of `b` (radii (m)): ||a_i - b_j|| <= r_j.
double share_inside(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& radii) {
  int64_t inside = 0;
  for (int64_t i = 0; i < a.size(0); i += 1024) {
    torch::Tensor d = torch::cdist(a.slice(0, i, std::min(a.size(0), i + 1024)), b);
    inside += (d <= radii.unsqueeze(0)).any(1).sum().item<int64_t>();
  }
  return static_cast<double>(inside) / static_cast<double>(a.size(0));
}

// KL(p || q) of two histograms; inf where p has mass q lacks (the package's kl_multinomial).
double kl(const std::vector<double>& p, const std::vector<double>& q) {
  double s = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    if (q[i] == 0) return std::numeric_limits<double>::infinity();
    s += p[i] * std::log(p[i] / q[i]);
  }
  return s;
}

// Trapezoid area under the curve through the points sorted by x (sklearn.metrics.auc after
// numpy.argsort, as the package computes it). Points that share an x (only when P == Q, where
// (1, 0) meets the curve's (1, 1)) keep the highest y: the frontier's upper envelope, so
// MAUVE(P, P) = 1; numpy's unstable argsort leaves that tie to chance in the package.
double area(std::vector<std::pair<double, double>> pts) {
  std::sort(pts.begin(), pts.end(), [](const auto& a, const auto& b) {
    return a.first < b.first || (a.first == b.first && a.second > b.second);
  });
  double s = 0;
  size_t prev = 0;
  for (size_t i = 1; i < pts.size(); ++i) {
    if (pts[i].first == pts[prev].first) continue;  // a lower point at the same x
    s += (pts[i].first - pts[prev].first) * (pts[i].second + pts[prev].second) / 2;
    prev = i;
  }
  return s;
}

}  // namespace

double fid(const torch::Tensor& real, const torch::Tensor& synth) {
  const torch::Tensor r = rows64(real, "fid (real)", 2), s = rows64(synth, "fid (synthetic)", 2);
  same_dims(r, s);
  const torch::Tensor mr = r.mean(0), ms = s.mean(0);
  auto cov = [](const torch::Tensor& x, const torch::Tensor& m) {  // (d, d), n - 1
    torch::Tensor c = x - m;
    return c.t().mm(c) / static_cast<double>(x.size(0) - 1);
  };
  const torch::Tensor cr = cov(r, mr), cs = cov(s, ms);
  // S_r^{1/2} from its eigendecomposition (eigenvalues clamped at 0 against rounding), then the
  // eigenvalues of the symmetric S_r^{1/2} S_s S_r^{1/2}.
  auto [er, vr] = torch::linalg_eigh(cr);
  const torch::Tensor root = vr.mm(torch::diag(er.clamp_min(0).sqrt())).mm(vr.t());
  torch::Tensor m = root.mm(cs).mm(root);
  m = (m + m.t()) / 2;
  const double tr_sqrt = torch::linalg_eigvalsh(m).clamp_min(0).sqrt().sum().item<double>();
  return (mr - ms).pow(2).sum().item<double>() + cr.trace().item<double>() +
         cs.trace().item<double>() - 2 * tr_sqrt;
}

PrecisionRecall precision_recall(const torch::Tensor& real, const torch::Tensor& synth,
                                 int64_t k) {
  DPFT_CHECK_AS(ConfigError, k >= 1, "precision / recall: k must be >= 1, got {}", k);
  const torch::Tensor r = rows64(real, "precision / recall (real)", k + 1),
                      s = rows64(synth, "precision / recall (synthetic)", k + 1);
  same_dims(r, s);
  PrecisionRecall out;
  out.k = k;
  out.precision = share_inside(s, r, kth_distance(r, r, k, true));
  out.recall = share_inside(r, s, kth_distance(s, s, k, true));
  return out;
}

MauveResult mauve_from_histograms(const std::vector<double>& p, const std::vector<double>& q,
                                  const MauveOptions& o) {
  DPFT_CHECK_AS(InputError, p.size() == q.size() && !p.empty(),
                "mauve: histograms of {} and {} buckets", p.size(), q.size());
  DPFT_CHECK_AS(ConfigError, o.curve_points >= 2 && o.scaling > 0,
                "mauve: curve_points >= 2 and scaling > 0 (got {}, {})", o.curve_points, o.scaling);
  MauveResult res;
  res.p_hist = p;
  res.q_hist = q;
  res.buckets = static_cast<int64_t>(p.size());
  const double inf = std::numeric_limits<double>::infinity();
  auto point = [&](double kq, double kp) {
    return std::pair{std::exp(-o.scaling * kq), std::exp(-o.scaling * kp)};
  };
  res.curve.push_back(point(0, inf));
  std::vector<double> r(p.size());
  for (int64_t i = 0; i < o.curve_points; ++i) {
    // numpy.linspace(1e-6, 1 - 1e-6, n)
    const double w =
        1e-6 + (1 - 2e-6) * static_cast<double>(i) / static_cast<double>(o.curve_points - 1);
    for (size_t j = 0; j < p.size(); ++j) r[j] = w * p[j] + (1 - w) * q[j];
    res.curve.push_back(point(kl(q, r), kl(p, r)));
  }
  res.curve.push_back(point(inf, 0));
  std::vector<std::pair<double, double>> swapped;
  for (const auto& [x, y] : res.curve) swapped.emplace_back(y, x);
  res.mauve = 0.5 * (area(res.curve) + area(swapped));
  double fi = 0;  // the package's frontier integral, scale 2
  for (size_t j = 0; j < p.size(); ++j) {
    const double a = p[j], b = q[j];
    if (a == 0 && b == 0) continue;
    if (a == 0 || b == 0) {
      fi += (a + b) / 4;
    } else if (std::abs(a - b) > 1e-8) {
      fi += 0.25 * (a + b) - 0.5 * a * b * (std::log(a) - std::log(b)) / (a - b);
    }
  }
  res.frontier_integral = 2 * fi;
  return res;
}

MauveResult mauve(const torch::Tensor& p, const torch::Tensor& q, const MauveOptions& o) {
  const torch::Tensor P = rows64(p, "mauve (real)", 2), Q = rows64(q, "mauve (synthetic)", 2);
  same_dims(P, Q);
  DPFT_CHECK_AS(ConfigError, o.explained_variance > 0 && o.explained_variance < 1,
                "mauve: explained_variance must be in (0, 1), got {}", o.explained_variance);
  const int64_t n = P.size(0), m = Q.size(0);
  const int64_t k =
      o.buckets > 0 ? o.buckets
                    : std::max<int64_t>(2, std::llround(static_cast<double>(std::min(n, m)) / 10));
  DPFT_CHECK_AS(ConfigError, k <= n + m, "mauve: {} buckets for {} texts", k, n + m);
  // Rows L2-normalised, the union (Q first, as the package stacks them) centred, PCA by SVD.
  torch::Tensor X = torch::cat({Q, P});
  X = X / X.norm(2, 1, true).clamp_min(1e-300);
  torch::Tensor Xc = X - X.mean(0);
  auto [U, S, Vh] = torch::linalg_svd(Xc, /*full_matrices=*/false);
  const torch::Tensor var = S.pow(2), cum = var.cumsum(0) / var.sum();
  int64_t dims = 1;
  while (dims < cum.size(0) && cum[dims - 1].item<double>() < o.explained_variance) ++dims;
  const torch::Tensor Z = Xc.mm(Vh.slice(0, 0, dims).t()).to(torch::kFloat32).contiguous();
  topics::KMeansOptions ko;
  ko.k = k;
  ko.iterations = o.kmeans_iterations;
  ko.redo = o.kmeans_redo;
  ko.seed = o.seed + 2;
  ko.spherical = false;
  const torch::Tensor centroids = topics::kmeans(Z, ko);
  const torch::Tensor labels = torch::cdist(Z, centroids).argmin(1);  // (m + n), nearest
  std::vector<double> ph(static_cast<size_t>(k), 0), qh(static_cast<size_t>(k), 0);
  auto acc = labels.accessor<int64_t, 1>();
  for (int64_t i = 0; i < m + n; ++i)
    (i < m ? qh : ph)[static_cast<size_t>(acc[i])] += 1.0 / static_cast<double>(i < m ? m : n);
  MauveResult res = mauve_from_histograms(ph, qh, o);
  res.pca_dims = dims;
  return res;
}

}  // namespace dpft::eval
