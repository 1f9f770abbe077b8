// From the outcome of a one-run privacy audit to an epsilon lower bound: Steinke, Nasr and
// Jagielski 2023, "Privacy Auditing with One (1) Training Run" (arXiv 2305.08846).
//
// The audit inserts each of m canaries independently with probability 1/2, trains once, scores
// every canary, and guesses "included" for the k+ highest scores and "excluded" for the k-
// lowest (r = k+ + k- guesses); v of them are right. If the training algorithm is
// (epsilon, delta)-DP, then for every v (the paper's Theorem 5.2 in the guessing form it uses
// for its experiments):
//     P[W >= v] <= f(v) + 2 m delta max_{i = 1..m} (f(v - i) - f(v)) / i,
//     f(x) = P[Binomial(r, e^eps / (1 + e^eps)) >= x],
// with W the number of correct guesses (for delta = 0 W is stochastically dominated by the
// binomial). So with confidence 1 - beta, every epsilon whose right-hand side is < beta at the
// observed v is refuted, and the bound reported is the supremum of the refuted epsilons (the
// right-hand side grows with epsilon). This is a statistical lower bound: with probability at
// most beta it exceeds the true epsilon of a correct implementation.
#pragma once
#include <cstdint>
#include <vector>

namespace dpft::privacy {

struct AuditCounts {
  int64_t m = 0;        // canaries
  int64_t guesses = 0;  // r = k+ + k- (<= m)
  int64_t correct = 0;  // v (<= r)
};

// The right-hand side above, min(1, f(v) + 2 m delta alpha), for one epsilon >= 0.
// InvalidArgument-style checks: throws ConfigError on m < 1, r > m, v > r, negative values,
// delta outside [0, 1).
double audit_p_value(const AuditCounts& c, double epsilon, double delta);

// The largest epsilon refuted at confidence 1 - beta (0 when none is): found by bracketing and
// bisection to an absolute width of `tol`, returning the bracket's lower end (refuted), so the
// result never overstates the bound. beta in (0, 1).
double audit_epsilon_lower_bound(const AuditCounts& c, double delta, double beta,
                                 double tol = 1e-7);

// Guesses from scores: the k_plus highest scores guessed included (+1), the k_minus lowest
// guessed excluded (-1), the rest 0; ties broken by index (lower index first among equals).
// scores: [m]. Throws ConfigError when k_plus + k_minus > m.
std::vector<int> audit_guesses(const std::vector<double>& scores, int64_t k_plus, int64_t k_minus);

}  // namespace dpft::privacy
