// model.peft.kind: what a fine-tuning run trains (core/model/peft.hpp applies it), and its spec
// spellings.
#pragma once
#include <array>

#include "core/util/enum_names.hpp"

namespace dpft::model {

enum class PeftKind {
  kLora,     // LoRA factors on the targeted linears (and modules_to_save)
  kAdapter,  // Houlsby bottleneck adapters (encoders; and modules_to_save)
  kFull,     // the targeted modules' parameters ("all": every parameter)
  kNone,     // nothing (evaluation only)
};
inline constexpr std::array<EnumName<PeftKind>, 4> kPeftKindNames = {
    {{PeftKind::kLora, "lora"},
     {PeftKind::kAdapter, "adapter"},
     {PeftKind::kFull, "full"},
     {PeftKind::kNone, "none"}}};
inline const char* name_of(PeftKind k) {
  return enum_name(k, kPeftKindNames);
}
// lora and adapter save an adapter directory (PEFT layout); full and none the whole model.
inline bool saves_adapter(PeftKind k) {
  return k == PeftKind::kLora || k == PeftKind::kAdapter;
}

}  // namespace dpft::model
