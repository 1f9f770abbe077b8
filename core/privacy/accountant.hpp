// Privacy accountants for (Poisson-subsampled) Gaussian mechanisms, behind one interface.
//
// A DP release is a block {sigma, q, steps}: `steps` compositions of the Gaussian mechanism
// with noise multiplier sigma (noise std = sigma * sensitivity) applied to a Poisson subsample
// drawn at rate q (q = 1: the full data). Adjacency is add/remove-one. Heterogeneous runs are
// lists of blocks composed together.
//
// Accountants (docs/privacy.md):
//   gaussian  exact, q = 1 only (Balle & Wang 2018, Thm 8): T Gaussians with sigma compose to one
//             with mu = sqrt(T)/sigma; delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu).
//   rdp       Renyi DP of the subsampled Gaussian (Mironov, Talwar, Zhang 2019, Sec. 3.3), converted
//             with Balle et al. 2020 (Thm 21): eps = min_a R(a) - (log delta + log a)/(a-1) + log((a-1)/a).
//   prv       numerical composition of privacy-loss random variables (Gopi, Lee, Wutschitz 2021):
//             a certified upper bound eps_upper, plus eps_estimate and eps_lower (core/privacy/prv.hpp).
// Every result is an upper bound on the true epsilon (or exact); never an optimistic number.
#pragma once
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/privacy/modes.hpp"

namespace dpft::privacy {

inline constexpr double kInf = std::numeric_limits<double>::infinity();


struct GaussianBlock {
  double sigma = 1.0;     // noise multiplier (> 0; 0 means a non-private release)
  double q = 1.0;         // Poisson sampling rate, (0, 1]
  int64_t steps = 1;      // compositions, >= 1
};

struct AccountantOptions {
  double eps_error = 0.01;                 // PRV: epsilon discretisation error
  std::optional<double> delta_error;       // PRV: delta error; default delta / 1000
  int64_t max_grid = int64_t(1) << 25;     // PRV: larger grids fall back to RDP (with a warning)
};

struct EpsilonResult {
  double epsilon = 0;                  // the certified value dpft uses (PRV: eps_upper)
  std::string accountant;              // the accountant that produced it (after any fallback)
  std::optional<double> eps_lower, eps_estimate, eps_upper;  // PRV only
  std::optional<double> best_order;    // RDP only
  std::vector<std::string> warnings;   // fallbacks, orders at the edge of the grid, ...
};

class Accountant {
 public:
  virtual ~Accountant() = default;
  virtual std::string name() const = 0;
  // Smallest certified epsilon with the mechanism (blocks) being (epsilon, delta)-DP.
  virtual EpsilonResult epsilon(const std::vector<GaussianBlock>& blocks, double delta) const = 0;
};

// `inner` with `fixed` composed before the blocks of every question: a run's inherited releases
// (core/run/provenance.hpp) counted in every calibration of its own noise.
class ComposedAccountant : public Accountant {
 public:
  ComposedAccountant(const Accountant& inner, std::vector<GaussianBlock> fixed)
      : inner_(inner), fixed_(std::move(fixed)) {}
  std::string name() const override { return inner_.name(); }
  EpsilonResult epsilon(const std::vector<GaussianBlock>& blocks, double delta) const override {
    std::vector<GaussianBlock> all = fixed_;
    all.insert(all.end(), blocks.begin(), blocks.end());
    return inner_.epsilon(all, delta);
  }

 private:
  const Accountant& inner_;
  std::vector<GaussianBlock> fixed_;
};

std::unique_ptr<Accountant> make_accountant(AccountantKind kind,
                                            const AccountantOptions& opts = {});
// name: prv | rdp | gaussian (kAccountantNames). Throws ConfigError for an unknown name.
std::unique_ptr<Accountant> make_accountant(const std::string& name, const AccountantOptions& opts = {});

// The most compositions an accountant is asked to bound: beyond it PRV's grid cannot be built
// and RDP's answer is meaningless; a run or a question past it is a mistake (steps: 1e15).
inline constexpr int64_t kMaxSteps = 100000000;

// Validates a block (sigma >= 0, q in (0, 1], 1 <= steps <= kMaxSteps); throws ConfigError
// naming `what`.
void check_block(const GaussianBlock& b, const std::string& what = "privacy accounting");
// True if any block releases without noise (sigma == 0): epsilon is then infinite.
bool has_non_private(const std::vector<GaussianBlock>& blocks);

// --- Analytic Gaussian (exact), q = 1.
// delta(eps) for a Gaussian mechanism with mu = sensitivity / noise std (composition: mu^2 adds).
double gaussian_delta(double mu, double eps);
// Smallest eps >= 0 with gaussian_delta(mu, eps) <= delta.
double gaussian_epsilon(double mu, double delta);

// --- RDP of the Poisson-subsampled Gaussian (one step), order alpha > 1.
double rdp_subsampled_gaussian(double q, double sigma, double alpha);
const std::vector<double>& default_rdp_orders();
struct RdpEpsilon {
  double epsilon;
  double order;
  bool at_edge;  // best order is the first or last of the grid
};
// An RDP curve: eps[i] at orders[i] (> 1).
struct RdpCurve {
  std::vector<double> orders;
  std::vector<double> eps;
};
// The composition of `blocks` at each order (inf at every order for a non-private block).
RdpCurve rdp_curve(const std::vector<GaussianBlock>& blocks,
                   const std::vector<double>& orders = default_rdp_orders());
// The (eps, delta) of a curve: Balle et al. 2020's conversion minimised over its orders.
RdpEpsilon curve_epsilon(const RdpCurve& curve, double delta);
// curve_epsilon(rdp_curve(blocks, orders), delta).
RdpEpsilon rdp_epsilon(const std::vector<GaussianBlock>& blocks, double delta,
                       const std::vector<double>& orders = default_rdp_orders());

}  // namespace dpft::privacy
