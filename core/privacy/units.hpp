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
  // kUser, kDocument: rows[u] = the rows (positions in the training set) of unit u, ascending;
  // units in the order of their first row. Empty for kExample.
  std::vector<std::vector<int64_t>> rows;
  int64_t rows_left_out = 0;  // rows past a unit's max_rows, not trained on
  // The number of units N; `dataset_rows` is the training set's size (unit = row).
  int64_t count(int64_t dataset_rows) const {
    return kind == PrivacyUnit::kExample ? dataset_rows : static_cast<int64_t>(rows.size());
  }
};

// Fewest users (or documents) a run at that unit accepts: below it no sampling rate gives a
// useful guarantee.
inline constexpr int64_t kMinUsers = 10;

// Units of kind `kind` (kUser or kDocument) from each training row's unit key (key_of_row[i],
// non-empty: its user, or its document), keeping at most max_rows (>= 1) rows of each, the
// first ones. InputError (exit 3) for fewer than kMinUsers units, naming `what` (the data
// option).
Units group_rows(const std::vector<std::string>& key_of_row, PrivacyUnit kind, int64_t max_rows,
                 const std::string& what);

// The unit of each of the training set's n_rows rows: the row itself at example level; at user
// level the user's index in units.rows, or -1 for a row past its user's max_rows (left out).
std::vector<int64_t> unit_of_rows(const Units& units, int64_t n_rows);

// One bin per unit from each training row's bin (bin_of_row[i] >= 0): at example level the
// rows' own bins; at user level the bin most of the user's kept rows fall in (ties: the lowest
// bin), so that each user is counted in exactly one bin and the counts keep L2 sensitivity 1.
std::vector<int64_t> unit_bins(const Units& units, const std::vector<int64_t>& bin_of_row);

}  // namespace dpft::privacy
