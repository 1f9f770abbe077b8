// The privacy units of a private training set (privacy.unit; core/privacy/modes.hpp): which
// rows one neighbour's worth of data holds. At example level unit i is row i; at user level a
// unit is one user's rows, at most `max_rows` of them, the first in the order given (file
// order: chosen without looking at their content), so that one user moves a clipped sum by at
// most C however many rows it has. N in the accountant, the Poisson sampling and the
// sensitivity then all count units.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/privacy/modes.hpp"

namespace dpft::privacy {

struct Units {
  PrivacyUnit kind = PrivacyUnit::kExample;
  // kUser: rows[u] = the rows (positions in the training set) of unit u, ascending; units in
  // the order of their first row. Empty for kExample.
  std::vector<std::vector<int64_t>> rows;
  int64_t rows_left_out = 0;  // kUser: rows past a user's max_rows, not trained on
  // The number of units N; `dataset_rows` is the training set's size (unit = row).
  int64_t count(int64_t dataset_rows) const {
    return kind == PrivacyUnit::kExample ? dataset_rows : static_cast<int64_t>(rows.size());
  }
};

// Fewest users a user-level run accepts: below it no sampling rate gives a useful guarantee.
inline constexpr int64_t kMinUsers = 10;

// Units of kind kUser from each training row's user (user_of_row[i], non-empty), keeping at most
// max_rows (>= 1) rows of each, the first ones. InputError (exit 3) for fewer than kMinUsers
// users, naming `what` (the data option).
Units group_by_user(const std::vector<std::string>& user_of_row, int64_t max_rows,
                    const std::string& what);

}  // namespace dpft::privacy
