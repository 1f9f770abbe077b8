#include "core/privacy/prv.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>

#include <algorithm>
#include <cmath>
#include <complex>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>

#include "core/privacy/normal.hpp"
#include "core/util/error.hpp"

namespace dpft::privacy {

namespace {


// log(e^y - (1-q)) for y > log(1-q), without cancellation or overflow.
double log_exp_minus(double y, double q) {
  if (q >= 1.0) return y;
  double l1q = std::log1p(-q);
  double a = y - l1q;  // > 0
  double lem1 = a > 30 ? a + std::log1p(-std::exp(-a)) : std::log(std::expm1(a));
  return l1q + lem1;
}

// The point x where the remove-direction loss L(x) = log((1-q) + q e^((2x-1)/(2 s^2))) equals y.
double x_of(double y, double q, double s) { return s * s * (log_exp_minus(y, q) - std::log(q)) + 0.5; }

}  // namespace

double PrivacyLoss::cdf(double y) const {
  double lo = q < 1 ? std::log1p(-q) : -kInf;
  if (remove) {
    if (y <= lo) return 0.0;
    double x = x_of(y, q, sigma);
    return (1 - q) * norm_cdf(x / sigma) + q * norm_cdf((x - 1) / sigma);
  }
  if (-y <= lo) return 1.0;  // y >= -log(1-q)
  return norm_cdf(-x_of(-y, q, sigma) / sigma);
}

double PrivacyLoss::sf(double y) const {
  double lo = q < 1 ? std::log1p(-q) : -kInf;
  if (remove) {
    if (y <= lo) return 1.0;
    double x = x_of(y, q, sigma);
    return (1 - q) * norm_cdf(-x / sigma) + q * norm_cdf(-(x - 1) / sigma);
  }
  if (-y <= lo) return 0.0;
  return norm_cdf(x_of(-y, q, sigma) / sigma);
}

namespace {

// One block's discretised single-step loss: masses p[j - j_lo] at values j h + shift.
struct DiscreteLoss {
  int64_t j_lo = 0;
  std::vector<double> p;
  double shift = 0;       // s = E[Y_clamped] - E[D]
  double mean_err = 0;    // bound on the error of s (quadrature)
  double clamp_mass = 0;  // P(Y outside [j_lo h, j_hi h]) per step
  int64_t steps = 1;
};

// Smallest grid index j (searching up from `start`) with f(j h) <= target, f decreasing.
template <class F>
int64_t search_up(F f, double h, int64_t start, double target) {
  int64_t step = 1, lo = start, hi = start;
  while (f(hi * h) > target) {
    lo = hi;
    hi = start + step;
    step *= 2;
    if (step > (int64_t(1) << 40)) throw RuntimeError("PRV: privacy-loss tail does not decay");
  }
  while (hi - lo > 1) {
    int64_t mid = lo + (hi - lo) / 2;
    (f(mid * h) > target ? lo : hi) = mid;
  }
  return hi;
}

DiscreteLoss discretise(const PrivacyLoss& L, int64_t steps, double h, double clamp_budget, int64_t max_cells) {
  DiscreteLoss d;
  d.steps = steps;
  double per_side = clamp_budget / 2;
  // Upper clamp: SF(j_hi h) <= per_side; lower clamp: CDF(j_lo h) <= per_side.
  int64_t j_hi = search_up([&](double y) { return L.sf(y); }, h, 0, per_side);
  int64_t j_lo = -search_up([&](double y) { return L.cdf(-y); }, h, 0, per_side);
  if (j_hi - j_lo + 1 > max_cells)
    throw RuntimeError(fmt::format("PRV: one step needs {} grid cells (limit {})", j_hi - j_lo + 1, max_cells));
  d.j_lo = j_lo;
  d.clamp_mass = L.cdf(j_lo * h) + L.sf(j_hi * h);
  int64_t m = j_hi - j_lo + 1;
  d.p.resize(m);
  // CDF and SF at the cell boundaries b_k = (j_lo + k - 1/2) h, k = 0..m, and SF at the centres.
  std::vector<double> fb(m + 1), sb(m + 1), sc(m);
  for (int64_t k = 0; k <= m; ++k) {
    double y = (j_lo + k - 0.5) * h;
    fb[k] = L.cdf(y);
    sb[k] = L.sf(y);
  }
  for (int64_t k = 0; k < m; ++k) sc[k] = L.sf((j_lo + k) * h);
  // Cell masses: CDF differences below the median, SF differences above (no cancellation).
  // The end cells also hold the clamped tails.
  for (int64_t k = 0; k < m; ++k) {
    double lo_f = k == 0 ? 0.0 : fb[k], hi_f = k == m - 1 ? 1.0 : fb[k + 1];
    double lo_s = k == 0 ? 1.0 : sb[k], hi_s = k == m - 1 ? 0.0 : sb[k + 1];
    d.p[k] = std::max(0.0, hi_f < 0.5 ? hi_f - lo_f : lo_s - hi_s);
  }
  // E[Y_clamped] = j_lo h + int_{j_lo h}^{j_hi h} SF(y) dy: Simpson on nodes spaced h/2
  // (centres and boundaries); the trapezoid rule on the centres bounds its error.
  long double simpson = 0, trap = 0, mean_d = 0;
  for (int64_t k = 0; k + 1 < m; ++k) {
    simpson += (h / 6.0) * (static_cast<long double>(sc[k]) + 4.0L * sb[k + 1] + sc[k + 1]);
    trap += (h / 2.0) * (static_cast<long double>(sc[k]) + sc[k + 1]);
  }
  for (int64_t k = 0; k < m; ++k) mean_d += static_cast<long double>(d.p[k]) * ((j_lo + k) * h);
  long double total = 0;
  for (double v : d.p) total += v;
  double mean_y = static_cast<double>(j_lo * h + simpson);
  d.shift = mean_y - static_cast<double>(mean_d);
  // Simpson's error is far below |Simpson - trapezoid|; the mass defect adds rounding slack.
  d.mean_err = static_cast<double>(std::fabs(simpson - trap)) + std::fabs(static_cast<double>(total) - 1.0) *
                                                                   std::max(std::fabs(j_lo * h), std::fabs(j_hi * h));
  DPFT_CHECK(std::fabs(d.shift) <= 0.5 * h * (1 + 1e-6) + d.mean_err,
             "PRV: discrete mean shift {} exceeds h/2 = {}", d.shift, 0.5 * h);
  return d;
}

// log E[exp(lambda * Y~)] for one step, bounded from above by binning `bin` cells together and
// using each bin's largest (lambda > 0) or smallest (lambda < 0) value.
double log_mgf_upper(const DiscreteLoss& d, double h, double lambda, int64_t bin) {
  int64_t m = static_cast<int64_t>(d.p.size());
  std::vector<std::pair<double, double>> bins;  // (mass, value)
  bins.reserve(m / bin + 1);
  double vmax = -kInf;
  for (int64_t k0 = 0; k0 < m; k0 += bin) {
    int64_t k1 = std::min(m, k0 + bin);
    double mass = 0;
    for (int64_t k = k0; k < k1; ++k) mass += d.p[k];
    if (mass <= 0) continue;
    double v = (lambda > 0 ? (d.j_lo + k1 - 1) : (d.j_lo + k0)) * h + d.shift;
    bins.emplace_back(mass, v);
    vmax = std::max(vmax, lambda * v);
  }
  double sum = 0;  // sum mass * exp(lambda v - vmax), one exp per bin
  for (const auto& [mass, v] : bins) sum += mass * std::exp(lambda * v - vmax);
  return vmax + std::log(sum);
}

// Smallest t with P(sum Y~ >= t) <= target (sign = +1), or P(sum Y~ <= -t) <= target (sign = -1).
double chernoff_tail(const std::vector<DiscreteLoss>& ds, double h, double target, int sign) {
  // Binning moves each step's value by at most bin * h: keep the total (T bin h) below 0.05.
  int64_t total = 0;
  for (const auto& d : ds) total += d.steps;
  int64_t bin = std::max<int64_t>(1, static_cast<int64_t>(0.05 / (static_cast<double>(total) * h)));
  double best = kInf;
  for (double lambda = 1.0 / 32; lambda <= 1024; lambda *= 2) {
    double lm = 0;
    for (const auto& d : ds) lm += static_cast<double>(d.steps) * log_mgf_upper(d, h, sign * lambda, bin);
    best = std::min(best, (lm - std::log(target)) / lambda);
  }
  return best;
}

int64_t fft_size(int64_t n) {
  int64_t best = int64_t(1) << 62;
  for (int64_t p2 = 1; p2 < 2 * n; p2 *= 2)
    for (int64_t p3 = p2; p3 < 2 * n; p3 *= 3)
      for (int64_t p5 = p3; p5 < 2 * n; p5 *= 5)
        if (p5 >= n) best = std::min(best, p5);
  return best;
}

struct DirectionResult {
  double lower, estimate, upper;
  int64_t n;
  double delta_bad;
};

// The grid distribution of the composed sum, as values v_k = (k_lo + k) h + shift_total with
// masses r[k], and eps(delta*) from its privacy profile.
struct GridProfile {
  std::vector<double> s1, s2;  // suffix sums of p and p e^{-v}, over v >= 0 region
  std::vector<double> v;       // values, ascending (only the v >= -1 part is kept)

  double delta_at_index(size_t k) const {  // delta_grid(v[k]) = sum_{i > k} p_i (1 - e^{v_k - v_i})
    if (k + 1 >= v.size()) return 0.0;
    return std::max(0.0, s1[k + 1] - std::exp(v[k]) * s2[k + 1]);
  }
  double eps_for(double dstar) const {
    if (dstar <= 0) return kInf;
    // delta_grid at eps = 0 (v may start below 0): terms with v_i > 0.
    size_t k0 = std::upper_bound(v.begin(), v.end(), 0.0) - v.begin();
    double d0 = k0 < v.size() ? s1[k0] - s2[k0] : 0.0;
    if (d0 <= dstar) return 0.0;
    // smallest k >= k0 with delta_grid(v[k]) <= dstar
    size_t lo = k0, hi = v.size() - 1;
    if (delta_at_index(hi) > dstar) return kInf;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (delta_at_index(mid) <= dstar) hi = mid;
      else lo = mid + 1;
    }
    size_t k = lo;  // eps in (v[k-1], v[k]]: delta = s1[k] - e^eps s2[k]
    double left = k > k0 ? v[k - 1] : 0.0;
    if (s2[k] <= 0) return v[k];
    double e = std::log((s1[k] - dstar) / s2[k]);
    if (!std::isfinite(e)) return v[k];
    return std::min(v[k], std::max(left, e));
  }
};

DirectionResult compose_direction(const std::vector<GaussianBlock>& blocks, bool remove, double delta,
                                  const AccountantOptions& opts) {
  auto t_start = std::chrono::steady_clock::now();
  double delta_err = opts.delta_error.value_or(delta / 1000);
  double eps_err = opts.eps_error;
  int64_t total_steps = 0;
  for (const auto& b : blocks) total_steps += b.steps;
  double d_clamp = delta_err / 4, d_h = delta_err / 4, d_hi = delta_err / 4, d_lo = delta_err / 4;
  double h = eps_err * std::sqrt(2.0 / (static_cast<double>(total_steps) * std::log(1.0 / d_h)));

  std::vector<DiscreteLoss> ds;
  double clamp_total = 0, bias = 0, shift_total = 0;
  for (const auto& b : blocks) {
    PrivacyLoss L{b.q, b.sigma, remove};
    ds.push_back(discretise(L, b.steps, h, d_clamp / static_cast<double>(total_steps), opts.max_grid));
    clamp_total += static_cast<double>(b.steps) * ds.back().clamp_mass;
    bias += static_cast<double>(b.steps) * ds.back().mean_err;
    shift_total += static_cast<double>(b.steps) * ds.back().shift;
  }
  auto t_disc = std::chrono::steady_clock::now();
  double t_hi = chernoff_tail(ds, h, d_hi, +1), t_lo = chernoff_tail(ds, h, d_lo, -1);
  if (!(t_hi < 600))
    throw RuntimeError(fmt::format("PRV: the privacy loss reaches {:.3g}, past the float range", t_hi));
  // Window [w_lo, w_hi] (in grid units, before the total shift) covering the sum on G.
  int64_t k_lo = static_cast<int64_t>(std::floor((-t_lo - shift_total) / h)) - 1;
  int64_t k_hi = static_cast<int64_t>(std::ceil((t_hi - shift_total) / h)) + 1;
  int64_t need = k_hi - k_lo + 1;
  if (need > opts.max_grid)
    throw RuntimeError(fmt::format("PRV: the composition needs a grid of {} points (limit {})", need, opts.max_grid));
  int64_t n = fft_size(need);

  auto t_window = std::chrono::steady_clock::now();
  // Circular placement, FFT, powers, product, inverse FFT.
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor prod;
  for (const auto& d : ds) {
    torch::Tensor c = torch::zeros({n}, f64);
    double* cp = c.data_ptr<double>();
    for (size_t k = 0; k < d.p.size(); ++k) {
      int64_t j = d.j_lo + static_cast<int64_t>(k);
      cp[((j % n) + n) % n] += d.p[k];
    }
    torch::Tensor f = torch::fft::rfft(c);
    auto* z = f.data_ptr<c10::complex<double>>();
    double T = static_cast<double>(d.steps);
    for (int64_t i = 0; i < f.numel(); ++i) {
      std::complex<double> w(z[i].real(), z[i].imag());
      w = std::abs(w) == 0.0 ? std::complex<double>(0, 0) : std::exp(T * std::log(w));
      z[i] = c10::complex<double>(w.real(), w.imag());
    }
    prod = prod.defined() ? prod * f : f;
  }
  torch::Tensor r = torch::fft::irfft(prod, n).contiguous();
  const double* rp = r.data_ptr<double>();
  auto t_fft = std::chrono::steady_clock::now();

  // Unwrap into [k_lo, k_lo + n); measure FFT round-off as the negative mass.
  GridProfile g;
  double neg = 0;
  std::vector<double> mass;
  for (int64_t K = k_lo; K < k_lo + n; ++K) {
    double val = K * h + shift_total;
    double p = rp[((K % n) + n) % n];
    if (p < 0) {
      neg -= p;
      p = 0;
    }
    if (val >= -1.0) {
      g.v.push_back(val);
      mass.push_back(p);
    }
  }
  size_t m = g.v.size();
  g.s1.assign(m + 1, 0.0);
  g.s2.assign(m + 1, 0.0);
  for (size_t i = m; i-- > 0;) {
    g.s1[i] = g.s1[i + 1] + mass[i];
    g.s2[i] = g.s2[i + 1] + mass[i] * std::exp(-g.v[i]);
  }
  g.s1.pop_back();
  g.s2.pop_back();
  g.s1.push_back(0.0);  // sentinel so delta_at_index(last) reads zeros
  g.s2.push_back(0.0);
  g.v.push_back(g.v.empty() ? 0.0 : g.v.back() + h);

  double delta_bad = clamp_total + d_h + d_hi + d_lo + neg;
  if (delta_bad >= delta)
    throw RuntimeError(fmt::format("PRV: error terms ({:.3g}) exceed delta", delta_bad));
  double margin = eps_err + bias;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  spdlog::debug("PRV {}: h {:.3g}, cells {}, window [{:.3g}, {:.3g}], N {}, bias {:.3g}, delta_bad {:.3g}, "
                "FFT noise {:.3g}; discretise {:.1f} ms, window {:.1f} ms, fft {:.1f} ms, profile {:.1f} ms",
                remove ? "remove" : "add", h, ds.front().p.size(), -t_lo, t_hi, n, bias, delta_bad, neg,
                ms(t_start, t_disc), ms(t_disc, t_window), ms(t_window, t_fft),
                ms(t_fft, std::chrono::steady_clock::now()));
  DirectionResult res;
  res.n = n;
  res.delta_bad = delta_bad;
  res.estimate = g.eps_for(delta);
  res.upper = g.eps_for(delta - delta_bad) + margin;
  res.lower = std::max(0.0, g.eps_for(delta + delta_bad) - margin);
  return res;
}

}  // namespace

namespace {

// Results by their exact inputs (every bit of sigma, q, steps, delta and the options): a
// calibration asks for the same compositions again, and `account --spec` over many specs asks
// for the same calibration once per spec sharing a release. A pure function, so a hit returns
// what the computation would. Bounded: cleared when full.
using PrvKey = std::vector<uint64_t>;
struct PrvMemo {
  std::mutex mu;
  std::map<PrvKey, PrvEpsilon> results;
  int64_t hits = 0;
};
PrvMemo& prv_memo() {
  static PrvMemo m;
  return m;
}
uint64_t bits_of(double x) {
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
PrvKey prv_key(const std::vector<GaussianBlock>& blocks, double delta,
               const AccountantOptions& opts) {
  PrvKey k = {bits_of(delta), bits_of(opts.eps_error), opts.delta_error ? 1u : 0u,
              bits_of(opts.delta_error.value_or(0.0)), static_cast<uint64_t>(opts.max_grid)};
  for (const auto& b : blocks) {
    k.push_back(bits_of(b.sigma));
    k.push_back(bits_of(b.q));
    k.push_back(static_cast<uint64_t>(b.steps));
  }
  return k;
}

PrvEpsilon compute_prv_epsilon(const std::vector<GaussianBlock>& blocks, double delta,
                               const AccountantOptions& opts);

}  // namespace

int64_t prv_memo_hits() {
  std::lock_guard<std::mutex> lock(prv_memo().mu);
  return prv_memo().hits;
}

PrvEpsilon prv_epsilon(const std::vector<GaussianBlock>& blocks, double delta,
                       const AccountantOptions& opts) {
  const PrvKey key = prv_key(blocks, delta, opts);
  PrvMemo& m = prv_memo();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    if (auto it = m.results.find(key); it != m.results.end()) {
      ++m.hits;
      return it->second;
    }
  }
  PrvEpsilon out = compute_prv_epsilon(blocks, delta, opts);  // throws: not remembered
  std::lock_guard<std::mutex> lock(m.mu);
  if (m.results.size() >= 4096) m.results.clear();
  m.results.emplace(key, out);
  return out;
}

namespace {

PrvEpsilon compute_prv_epsilon(const std::vector<GaussianBlock>& blocks, double delta,
                               const AccountantOptions& opts) {
  DPFT_CHECK(!blocks.empty(), "PRV: no blocks to compose");
  bool all_full = std::all_of(blocks.begin(), blocks.end(), [](const GaussianBlock& b) { return b.q >= 1.0; });
  PrvEpsilon out;
  // q = 1 for every block: the two directions have the same distribution (Gaussian symmetry).
  for (bool remove : {true, false}) {
    if (!remove && all_full) break;
    DirectionResult r = compose_direction(blocks, remove, delta, opts);
    out.eps_lower = std::max(out.eps_lower, r.lower);
    out.eps_estimate = std::max(out.eps_estimate, r.estimate);
    out.eps_upper = std::max(out.eps_upper, r.upper);
    out.grid_size = std::max(out.grid_size, r.n);
    out.delta_bad = std::max(out.delta_bad, r.delta_bad);
  }
  int64_t total = 0;
  for (const auto& b : blocks) total += b.steps;
  double d_h = opts.delta_error.value_or(delta / 1000) / 4;
  out.mesh = opts.eps_error * std::sqrt(2.0 / (static_cast<double>(total) * std::log(1.0 / d_h)));
  return out;
}

class PrvAccountant : public Accountant {
 public:
  explicit PrvAccountant(AccountantOptions o) : opts_(o) {}
  std::string name() const override { return "prv"; }
  EpsilonResult epsilon(const std::vector<GaussianBlock>& blocks, double delta) const override {
    for (const auto& b : blocks) check_block(b);
    EpsilonResult r;
    if (has_non_private(blocks)) {
      r.accountant = "prv";
      r.epsilon = kInf;
      return r;
    }
    try {
      PrvEpsilon e = prv_epsilon(blocks, delta, opts_);
      r.accountant = "prv";
      r.eps_lower = e.eps_lower;
      r.eps_estimate = e.eps_estimate;
      r.eps_upper = e.eps_upper;
      r.epsilon = e.eps_upper;
      return r;
    } catch (const RuntimeError& err) {
      RdpEpsilon e = rdp_epsilon(blocks, delta);
      r.accountant = "rdp";
      r.epsilon = e.epsilon;
      r.best_order = e.order;
      r.warnings.push_back(fmt::format("{}; fell back to the RDP accountant (a looser but valid bound)",
                                       err.what()));
      return r;
    }
  }

 private:
  AccountantOptions opts_;
};

}  // namespace

std::unique_ptr<Accountant> make_prv_accountant(const AccountantOptions& o) {
  return std::make_unique<PrvAccountant>(o);
}

}  // namespace dpft::privacy
