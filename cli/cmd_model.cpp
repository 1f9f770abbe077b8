// `dpft model <subcommand>`: checkpoint tools. Each subcommand is one
// register_model_X(CLI::App* model, CliContext&) function (here or in its own cli/cmd_model_X.cpp)
// plus one line in register_model below.
//   dpft model inspect PATH [--json]   tensors, dtypes, shapes, parameter count, metadata of a
//                                      .safetensors file, a checkpoint dir or a PyTorch zip
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/model/inspect.hpp"

namespace dpft {

void register_model_inspect(CLI::App* model, CliContext& ctx) {
  struct Opts {
    std::string path;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = model->add_subcommand(
      "inspect",
      "list the tensors (name, dtype, shape), parameter count and metadata of a "
      ".safetensors file, a checkpoint directory or a PyTorch zip (torch.save)");
  sub->add_option("path", o->path, "file or checkpoint directory")->required();
  sub->add_flag("--json", o->json, "one JSON object");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      model::CheckpointSummary s = model::inspect_checkpoint(o->path);
      if (o->json)
        std::cout << model::to_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                  << "\n";
      else
        std::cout << model::to_text(s);
      return 0;
    };
  });
}

void register_model_lm(CLI::App* model, CliContext& ctx);  // cli/cmd_model_lm.cpp: init, info, logits

void register_model(CLI::App& app, CliContext& ctx) {
  CLI::App* model = app.add_subcommand("model", "model checkpoint tools");
  model->require_subcommand(1);
  register_model_inspect(model, ctx);
  register_model_lm(model, ctx);
}

}  // namespace dpft
