// The spec's training modes as enums, each with one name table for parsing (Fields::get_enum),
// printing and errors (core/util/enum_names.hpp): train.optimizer, train.schedule, data.loss_on,
// data.chat_format, model.dtype and output.save_dtype.
// No torch: core/train's optimizer and schedule take them as they are.
#pragma once
#include <array>

#include "core/util/enum_names.hpp"

namespace dpft {

enum class OptimizerKind { kSgd, kAdamW };  // train.optimizer
inline constexpr std::array<EnumName<OptimizerKind>, 2> kOptimizerNames = {
    {{OptimizerKind::kSgd, "sgd"}, {OptimizerKind::kAdamW, "adamw"}}};
inline const char* name_of(OptimizerKind o) {
  return enum_name(o, kOptimizerNames);
}

// train.schedule: the learning rate's decay after warmup (core/train/schedule.hpp).
enum class Schedule { kConstant, kLinear, kCosine };
inline constexpr std::array<EnumName<Schedule>, 3> kScheduleNames = {
    {{Schedule::kConstant, "constant"},
     {Schedule::kLinear, "linear"},
     {Schedule::kCosine, "cosine"}}};
inline const char* name_of(Schedule s) {
  return enum_name(s, kScheduleNames);
}

// data.loss_on: which tokens the loss scores (response: a prompt/response pair's response only).
// data.loss_on: every id (all), the response of prompt/response pairs (response), or the
// assistant turns of chats (assistant: a pair's response is its one assistant turn).
enum class LossOn { kAll, kResponse, kAssistant };
inline constexpr std::array<EnumName<LossOn>, 3> kLossOnNames = {
    {{LossOn::kAll, "all"}, {LossOn::kResponse, "response"}, {LossOn::kAssistant, "assistant"}}};
inline const char* name_of(LossOn l) {
  return enum_name(l, kLossOnNames);
}

// model.dtype (the weights' type in training; half types need a GPU) and output.save_dtype (a
// saved full model's); core/train/setup.hpp's torch_dtype maps it.
enum class FloatType { kFloat32, kBFloat16, kFloat16 };
inline constexpr std::array<EnumName<FloatType>, 3> kFloatTypeNames = {
    {{FloatType::kFloat32, "float32"},
     {FloatType::kBFloat16, "bfloat16"},
     {FloatType::kFloat16, "float16"}}};
inline const char* name_of(FloatType t) {
  return enum_name(t, kFloatTypeNames);
}

// data.chat_format: how prompt/response pairs are rendered: none (plain text), auto (the
// tokenizer's own chat format), or a named format (core/tokenizer/chat.hpp's spelling;
// data::fixed_chat_format maps it).
enum class ChatFormatChoice {
  kNone,
  kAuto,
  kPlain,
  kChatML,
  kQwen25,
  kLlama3,
  kLlama2,
  kMistral,
  kGemma,
  kPhi3
};
inline constexpr std::array<EnumName<ChatFormatChoice>, 10> kChatFormatChoiceNames = {
    {{ChatFormatChoice::kNone, "none"},
     {ChatFormatChoice::kAuto, "auto"},
     {ChatFormatChoice::kPlain, "plain"},
     {ChatFormatChoice::kChatML, "chatml"},
     {ChatFormatChoice::kQwen25, "qwen2.5"},
     {ChatFormatChoice::kLlama3, "llama3"},
     {ChatFormatChoice::kLlama2, "llama2"},
     {ChatFormatChoice::kMistral, "mistral"},
     {ChatFormatChoice::kGemma, "gemma"},
     {ChatFormatChoice::kPhi3, "phi3"}}};
inline const char* name_of(ChatFormatChoice c) {
  return enum_name(c, kChatFormatChoiceNames);
}

}  // namespace dpft
