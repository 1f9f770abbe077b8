#include "core/privacy/units.hpp"

#include <map>
#include <unordered_map>

#include "core/util/error.hpp"

namespace dpft::privacy {

Units group_rows(const std::vector<std::string>& key_of_row, PrivacyUnit kind, int64_t max_rows,
                 const std::string& what) {
  DPFT_CHECK_AS(ConfigError, max_rows >= 1,
                "privacy.max_examples_per_user: {} is out of range; give at least 1", max_rows);
  DPFT_CHECK(kind != PrivacyUnit::kExample, "group_rows: example-level units are the rows");
  const char* unit = name_of(kind);
  Units u;
  u.kind = kind;
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < key_of_row.size(); ++i) {
    const std::string& name = key_of_row[i];
    DPFT_CHECK(!name.empty(), "{}: training row {} has no {}", what, i, unit);
    auto [it, fresh] = index.emplace(name, u.rows.size());
    if (fresh) u.rows.emplace_back();
    std::vector<int64_t>& mine = u.rows[it->second];
    if (static_cast<int64_t>(mine.size()) < max_rows)
      mine.push_back(static_cast<int64_t>(i));
    else
      ++u.rows_left_out;
  }
  DPFT_CHECK_AS(InputError, static_cast<int64_t>(u.rows.size()) >= kMinUsers,
                "{}: {} distinct {}(s) in {} training rows; a {}-level run needs at least {} "
                "(with fewer, no sampling rate hides one {}): check the data, or use "
                "privacy.unit: example",
                what, u.rows.size(), unit, key_of_row.size(), unit, kMinUsers, unit);
  return u;
}

std::vector<int64_t> unit_of_rows(const Units& units, int64_t n_rows) {
  std::vector<int64_t> out(static_cast<size_t>(n_rows), -1);
  if (units.kind == PrivacyUnit::kExample) {
    for (int64_t i = 0; i < n_rows; ++i) out[static_cast<size_t>(i)] = i;
    return out;
  }
  for (size_t u = 0; u < units.rows.size(); ++u)
    for (int64_t r : units.rows[u]) {
      DPFT_CHECK(r >= 0 && r < n_rows, "unit {} holds row {} of a set of {}", u, r, n_rows);
      out[static_cast<size_t>(r)] = static_cast<int64_t>(u);
    }
  return out;
}

std::vector<int64_t> unit_bins(const Units& units, const std::vector<int64_t>& bin_of_row) {
  if (units.kind == PrivacyUnit::kExample) return bin_of_row;
  std::vector<int64_t> out;
  out.reserve(units.rows.size());
  for (size_t u = 0; u < units.rows.size(); ++u) {
    std::map<int64_t, int64_t> n;  // bin -> the unit's rows in it, ascending bins
    for (int64_t r : units.rows[u]) {
      DPFT_CHECK(r >= 0 && static_cast<size_t>(r) < bin_of_row.size(),
                 "unit {} holds row {} of {} binned rows", u, r, bin_of_row.size());
      ++n[bin_of_row[static_cast<size_t>(r)]];
    }
    DPFT_CHECK(!n.empty(), "unit {} holds no rows", u);
    auto best = n.begin();
    for (auto it = n.begin(); it != n.end(); ++it)
      if (it->second > best->second) best = it;  // strictly more: ties keep the lower bin
    out.push_back(best->first);
  }
  return out;
}

}  // namespace dpft::privacy
