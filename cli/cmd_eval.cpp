// `dpft eval --model DIR|RUN_DIR|ADAPTER_DIR [--adapter DIR] --data FILE [--text-column C]
// [--label-column L] [--prompt-column P] [--text-pair-column T] [--task lm|classification|
// seq2seq] [--labels a,b] [--max-length N] [--max-samples N] [--batch N] [--out FILE]`: a
// trained model's evaluation on a data file, the eval block a run writes (methods/evaluate.hpp).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "methods/evaluate.hpp"

namespace dpft {

void register_eval(CLI::App& app, CliContext& ctx) {
  struct Options {
    EvalRequest r;
    std::string task, out;
  };
  auto o = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand(
      "eval", "evaluate a checkpoint, a run's trained model or an adapter on a data file");
  sub->add_option("--model", o->r.model,
                  "a checkpoint, a run directory (its saved model) or an adapter directory (on "
                  "the base its adapter_config.json names)");
  sub->add_option("--adapter", o->r.adapter, "a PEFT adapter directory to load on --model");
  sub->add_option("--data", o->r.data.path, "CSV / TSV / JSONL / text file")->required();
  sub->add_option("--text-column", o->r.data.text_column, "the text (or response) column")
      ->capture_default_str();
  sub->add_option("--label-column", o->r.data.label_column,
                  "labels: a classifier's classes, or a language model's by label likelihood");
  sub->add_option("--prompt-column", o->r.data.prompt_column,
                  "prompts (pairs: the response is scored; seq2seq: the source)");
  sub->add_option("--text-pair-column", o->r.data.text_pair_column,
                  "the second sentence of a pair (classification)");
  sub->add_option("--task", o->task,
                  "lm | classification | seq2seq (default: from the model: a classifier's head, "
                  "an encoder-decoder, else lm)");
  sub->add_option("--labels", o->r.labels,
                  "classification: the class names in id order (default: the model's)")
      ->delimiter(',');
  sub->add_option("--max-length", o->r.max_length, "tokens per example")
      ->capture_default_str()
      ->check(CLI::Range(2, 1 << 20));
  sub->add_option("--max-samples", o->r.max_samples, "evaluate the first N examples (0 = all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--batch", o->r.batch, "examples per forward")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--out", o->out, "write the JSON here (default: stdout)");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      EvalRequest r = o->r;
      if (!o->task.empty()) r.task = enum_value(o->task, kTaskNames, "--task");
      const nlohmann::json j = evaluate_model(r);
      if (o->out.empty())
        std::cout << j.dump(2) << "\n";
      else
        write_json_atomic(o->out, j);
      return 0;
    };
  });
}

}  // namespace dpft
