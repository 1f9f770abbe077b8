// The privacy ledger's settings from a spec's privacy block (accountant, delta, target epsilon,
// the PRV accountant's eps_error): the one place a spec becomes LedgerOptions, for runs,
// sigma calibration and `dpft account --spec` alike.
#pragma once
#include "core/config/spec.hpp"
#include "core/privacy/ledger.hpp"

namespace dpft::privacy {

LedgerOptions ledger_options(const PrivacySpec& p);

}  // namespace dpft::privacy
