// The spec spellings of the projection modes (core/privacy/modes.hpp), for the projection and
// PE-SGD tests.
#pragma once
#include <string>

#include "core/privacy/modes.hpp"
#include "core/util/enum_names.hpp"

namespace dpft::test_modes {

inline privacy::ColumnScaling scaling(const std::string& s) {
  return enum_value(s, privacy::kColumnScalingNames, "sensitivity");
}
inline privacy::NoisePlacement place(const std::string& s) {
  return enum_value(s, privacy::kNoisePlacementNames, "noise_placement");
}

}  // namespace dpft::test_modes
