#include "data/classification.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft::data {

namespace {
bool placeholder_labels(const std::vector<std::string>& labels) {
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] != fmt::format("LABEL_{}", i)) return false;
  return true;
}
}  // namespace

std::vector<std::string> resolve_labels(const std::vector<std::string>& given,
                                        const std::vector<std::string>& model_labels) {
  std::vector<std::string> out = given;
  if (out.empty() && !placeholder_labels(model_labels)) out = model_labels;
  DPFT_CHECK_AS(ConfigError, !out.empty(),
                "data.labels: not given, and the model's labels are placeholders ({}); name the "
                "classes in class-id order, e.g. data.labels: [negative, positive] (dpft does not "
                "take the label set from the private training file)",
                join(model_labels, ", "));
  std::set<std::string> distinct(out.begin(), out.end());
  DPFT_CHECK_AS(ConfigError, distinct.size() == out.size(), "data.labels names a label twice: {}",
                join(out, ", "));
  DPFT_CHECK_AS(ConfigError, model_labels.empty() || out.size() == model_labels.size(),
                "data.labels has {} labels ({}) but the model's classifier has {} ({}); name "
                "that many, or initialise the model with yours (dpft model init --labels)",
                out.size(), join(out, ", "), model_labels.size(), join(model_labels, ", "));
  return out;
}

lm::LmDataset build_classification_dataset(const std::vector<lm::Example>& examples,
                                           const tok::EncoderTokenizer& tok,
                                           const std::vector<std::string>& labels,
                                           size_t max_length, const std::string& what) {
  DPFT_CHECK_AS(ConfigError, max_length >= 3,
                "data.max_length = {} leaves no room for a sentence and the special tokens; use "
                "at least 3",
                max_length);
  std::map<std::string, int64_t> id;
  for (size_t i = 0; i < labels.size(); ++i) id[labels[i]] = static_cast<int64_t>(i);
  lm::LmDataset ds;
  ds.objective = lm::Objective::kClassification;
  ds.items.reserve(examples.size());
  for (const auto& e : examples) {
    auto it = id.find(e.label);
    if (it == id.end())
      throw InputError(fmt::format(
          "{}: row {} has {}; a classification set needs one of the labels [{}] on every row "
          "(check the label column and data.labels, or map the file's labels to these with the "
          "set's label_map, e.g. label_map: {{negative: '0', positive: '1'}})",
          what, e.index + 1, e.label.empty() ? "no label" : fmt::format("label '{}'", e.label),
          join(labels, ", ")));
    tok::PairEncoding p = e.text_pair
                              ? tok.encode(e.text, std::string_view(*e.text_pair), max_length)
                              : tok.encode(e.text, std::nullopt, max_length);
    lm::TokenizedExample t;
    t.index = e.index;
    t.ids.assign(p.ids.begin(), p.ids.end());
    t.scored.assign(p.ids.size(), 0);
    if (e.text_pair) t.type_ids.assign(p.type_ids.begin(), p.type_ids.end());
    t.label = e.label;
    t.class_id = it->second;
    ds.items.push_back(std::move(t));
  }
  return ds;
}

}  // namespace dpft::data
