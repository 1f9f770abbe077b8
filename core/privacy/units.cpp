#include "core/privacy/units.hpp"

#include <unordered_map>

#include "core/util/error.hpp"

namespace dpft::privacy {

Units group_by_user(const std::vector<std::string>& user_of_row, int64_t max_rows,
                    const std::string& what) {
  DPFT_CHECK_AS(ConfigError, max_rows >= 1,
                "privacy.max_examples_per_user: {} is out of range; give at least 1", max_rows);
  Units u;
  u.kind = PrivacyUnit::kUser;
  std::unordered_map<std::string, size_t> index;
  for (size_t i = 0; i < user_of_row.size(); ++i) {
    const std::string& name = user_of_row[i];
    DPFT_CHECK(!name.empty(), "{}: training row {} has no user", what, i);
    auto [it, fresh] = index.emplace(name, u.rows.size());
    if (fresh) u.rows.emplace_back();
    std::vector<int64_t>& mine = u.rows[it->second];
    if (static_cast<int64_t>(mine.size()) < max_rows)
      mine.push_back(static_cast<int64_t>(i));
    else
      ++u.rows_left_out;
  }
  DPFT_CHECK_AS(InputError, static_cast<int64_t>(u.rows.size()) >= kMinUsers,
                "{}: {} distinct user(s) in {} training rows; a user-level run needs at least {} "
                "(with fewer, no sampling rate hides one user): check user_column, or use "
                "privacy.unit: example",
                what, u.rows.size(), user_of_row.size(), kMinUsers);
  return u;
}

}  // namespace dpft::privacy
