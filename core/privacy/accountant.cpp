#include "core/privacy/accountant.hpp"

#include <fmt/format.h>

#include <cmath>

#include "core/util/error.hpp"

namespace dpft::privacy {

std::unique_ptr<Accountant> make_gaussian_accountant();                       // gaussian.cpp
std::unique_ptr<Accountant> make_rdp_accountant();                            // rdp.cpp
std::unique_ptr<Accountant> make_prv_accountant(const AccountantOptions& o);  // prv.cpp

std::unique_ptr<Accountant> make_accountant(AccountantKind kind, const AccountantOptions& opts) {
  if (!(opts.eps_error > 0 && opts.eps_error < 1))
    throw ConfigError(fmt::format("eps_error: {} is out of range; allowed (0, 1)", opts.eps_error));
  switch (kind) {
    case AccountantKind::kPrv:
      return make_prv_accountant(opts);
    case AccountantKind::kRdp:
      return make_rdp_accountant();
    case AccountantKind::kGaussian:
      return make_gaussian_accountant();
  }
  throw std::logic_error("make_accountant: an accountant kind without a case");
}

std::unique_ptr<Accountant> make_accountant(const std::string& name,
                                            const AccountantOptions& opts) {
  for (const auto& e : kAccountantNames)
    if (name == e.name) return make_accountant(e.value, opts);
  throw ConfigError(fmt::format("unknown accountant '{}'; use prv, rdp or gaussian", name));
}

void check_block(const GaussianBlock& b, const std::string& what) {
  if (!(b.sigma >= 0) || std::isinf(b.sigma))
    throw ConfigError(fmt::format("{}: noise multiplier {} must be a finite number >= 0", what, b.sigma));
  if (!(b.q > 0 && b.q <= 1))
    throw ConfigError(fmt::format("{}: sampling rate {} is out of range; allowed (0, 1]", what, b.q));
  if (b.steps < 1) throw ConfigError(fmt::format("{}: steps {} must be >= 1", what, b.steps));
  if (b.steps > kMaxSteps)
    throw ConfigError(fmt::format("{}: {} steps is beyond what the accountants support (at most "
                                  "{}); use fewer steps",
                                  what, b.steps, kMaxSteps));
}

bool has_non_private(const std::vector<GaussianBlock>& blocks) {
  for (const auto& b : blocks)
    if (b.sigma == 0) return true;
  return false;
}

}  // namespace dpft::privacy
