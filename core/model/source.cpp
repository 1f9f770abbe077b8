#include "core/model/source.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft::model {

namespace fs = std::filesystem;

namespace {

bool is_checkpoint(const fs::path& d) {
  return fs::is_regular_file(d / "config.json");
}
bool is_adapter(const fs::path& d) {
  return fs::is_regular_file(d / "adapter_config.json");
}
bool is_run(const fs::path& d) {
  return fs::is_regular_file(d / "config.resolved.yaml") && fs::is_regular_file(d / "metrics.json");
}

// The base checkpoint an adapter names (adapter_config.json's base_model_name_or_path).
fs::path base_of(const fs::path& adapter) {
  const nlohmann::json j =
      nlohmann::json::parse(read_file(adapter / "adapter_config.json"), nullptr, false);
  const std::string base =
      j.is_object() && j.contains("base_model_name_or_path") &&
              j["base_model_name_or_path"].is_string()
          ? j["base_model_name_or_path"].get<std::string>()
          : "";
  DPFT_CHECK_AS(InputError, !base.empty(),
                "{}: adapter_config.json names no base_model_name_or_path; give the base "
                "checkpoint with --model BASE --adapter {}",
                adapter.string(), adapter.string());
  DPFT_CHECK_AS(InputError, is_checkpoint(base),
                "{}: its base model '{}' (adapter_config.json's base_model_name_or_path) is not "
                "a checkpoint directory here (a relative path is read from the current "
                "directory); give it with --model BASE --adapter {}",
                adapter.string(), base, adapter.string());
  return base;
}

}  // namespace

std::string ModelSource::describe() const {
  return adapter.empty() ? base.string() : base.string() + " + adapter " + adapter.string();
}

ModelSource resolve_model_source(const std::string& model, const std::string& adapter) {
  DPFT_CHECK_AS(ConfigError, !model.empty() || !adapter.empty(),
                "give --model (a checkpoint, run or adapter directory) or --adapter");
  if (!adapter.empty())
    DPFT_CHECK_AS(InputError, is_adapter(adapter),
                  "--adapter {}: no adapter_config.json (not a PEFT adapter directory)", adapter);
  if (model.empty()) return {base_of(adapter), adapter};
  const fs::path m(model);
  DPFT_CHECK_AS(InputError, fs::is_directory(m),
                "--model {}: not a directory (give a checkpoint, run or adapter directory)", model);
  ModelSource s;
  if (is_run(m)) {  // the model the run saved
    if (is_adapter(m / "adapter")) {
      s.adapter = m / "adapter";
      s.base = base_of(s.adapter);
    } else if (is_checkpoint(m / "model")) {
      s.base = m / "model";
    } else {
      throw InputError(fmt::format(
          "--model {}: this run saved no model (output.save_model false, or it has not "
          "finished: dpft run --resume {} completes it)",
          model, model));
    }
  } else if (is_adapter(m) && !is_checkpoint(m)) {
    s.adapter = m;
    s.base = base_of(m);
  } else {
    DPFT_CHECK_AS(InputError, is_checkpoint(m),
                  "--model {}: no config.json: expected a checkpoint directory, a dpft run "
                  "directory (with config.resolved.yaml) or an adapter directory (with "
                  "adapter_config.json)",
                  model);
    s.base = m;
  }
  if (!adapter.empty()) {
    DPFT_CHECK_AS(ConfigError, s.adapter.empty(),
                  "--model {} already brings adapter {}; give --adapter only with a base "
                  "checkpoint",
                  model, s.adapter.string());
    s.adapter = adapter;
  }
  return s;
}

}  // namespace dpft::model
