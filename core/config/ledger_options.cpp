#include "core/config/ledger_options.hpp"

namespace dpft::privacy {

LedgerOptions ledger_options(const PrivacySpec& p) {
  LedgerOptions lo;
  lo.accountant = p.accountant;
  lo.delta = p.delta;
  lo.target_epsilon = p.epsilon;
  lo.accountant_options.eps_error = p.eps_error;
  return lo;
}

}  // namespace dpft::privacy
