// `dpft generate (--model DIR|RUN_DIR|ADAPTER_DIR [--adapter DIR] | --adapter DIR)
// (--prompt TEXT | --prompts FILE) [--chat] ...` (model::resolve_model_source)
// Prints one generation per prompt, or writes JSONL with --out.
// --prompts FILE: one prompt per line (plain text), or JSONL with a "prompt" field.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <iostream>

#include "cli/app.hpp"
#include "core/generate/generate.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/source.hpp"
#include "core/tokenizer/chat.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"

namespace dpft {

namespace {

std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("--prompts: cannot read '{}'", path));
  std::vector<std::string> out;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    if (line[0] == '{') {
      try {
        out.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
      } catch (const nlohmann::json::exception& e) {
        throw InputError(fmt::format("{}:{}: expected a JSON object with a \"prompt\" string: {}", path, lineno, e.what()));
      }
    } else {
      out.push_back(line);
    }
  }
  if (out.empty()) throw InputError(fmt::format("--prompts: '{}' has no prompts", path));
  return out;
}

// The prompts as token ids: a seq2seq model's source (<s> prompt </s>, as BART's sources are
// trained), a user turn in the chat format (--chat), or the plain encoding.
std::vector<std::vector<int64_t>> encode_prompts(const tok::Tokenizer& tk,
                                                 const std::vector<std::string>& prompts,
                                                 bool seq2seq, bool chat) {
  std::vector<std::vector<int64_t>> ids;
  for (const auto& p : prompts) {
    std::vector<int64_t> row;
    if (seq2seq) {
      if (chat) throw ConfigError("--chat is for decoder-only chat models, not bart");
      if (tk.bos_id()) row.push_back(*tk.bos_id());
      for (auto t : tk.encode(p)) row.push_back(t);
      if (tk.eos_id()) row.push_back(*tk.eos_id());
    } else if (chat) {
      tok::ChatPrompt cp = tok::render_chat(tk, {{"user", p}}, /*add_generation_prompt=*/true);
      for (auto t : tok::encode_chat(tk, cp).ids) row.push_back(t);
    } else {
      tok::EncodeOptions eo;
      eo.add_special = tk.add_bos();
      for (auto t : tk.encode(p, eo)) row.push_back(t);
    }
    if (row.empty()) throw ConfigError("a prompt encodes to no tokens");
    ids.push_back(std::move(row));
  }
  return ids;
}

}  // namespace

void register_generate(CLI::App& app, CliContext& ctx) {
  struct Opts {
    std::string model, adapter, prompt, prompts, out;
    bool chat = false, sample = false;
    generate::GenerationOptions g;
    generate::BeamOptions beam;
    Opts() { beam.num_beams = 1; }  // greedy / sampling unless --num-beams
  };
  auto o = std::make_shared<Opts>();
  o->g.max_new_tokens = 64;
  CLI::App* sub = app.add_subcommand("generate", "generate text from a checkpoint (KV-cached, batched)");
  sub->add_option("--model", o->model,
                  "a checkpoint, a run directory (its saved model) or an adapter directory (on "
                  "the base its adapter_config.json names)");
  sub->add_option("--adapter", o->adapter,
                  "a PEFT adapter directory (alone: on the base its adapter_config.json names)");
  auto* p1 = sub->add_option("--prompt", o->prompt, "one prompt");
  auto* p2 = sub->add_option("--prompts", o->prompts, "file: one prompt per line, or JSONL with \"prompt\"");
  p1->excludes(p2);
  sub->add_flag("--chat", o->chat, "wrap each prompt as a user turn in the tokenizer's chat format");
  sub->add_option("--max-new-tokens", o->g.max_new_tokens, "tokens to generate")->capture_default_str();
  sub->add_flag("--sample", o->sample, "sample (default: greedy)");
  sub->add_option("--temperature", o->g.temperature, "sampling temperature")->capture_default_str();
  sub->add_option("--top-k", o->g.top_k, "keep the k most likely tokens (0 = off)")->capture_default_str();
  sub->add_option("--top-p", o->g.top_p, "nucleus mass (1 = off)")->capture_default_str();
  sub->add_option("--repetition-penalty", o->g.repetition_penalty, ">= 1")->capture_default_str();
  sub->add_option("--stop", o->g.stop_strings, "stop string (repeatable)");
  sub->add_option("--seed", o->g.seed, "sampling seed")->capture_default_str();
  sub->add_option("--num-beams", o->beam.num_beams,
                  "beam search with this many beams (1: greedy / sampling; at most 1000; "
                  "docs/nlg.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  sub->add_option("--length-penalty", o->beam.length_penalty,
                  "beam search: score = sum log p / length^this")
      ->capture_default_str();
  sub->add_option("--no-repeat-ngram-size", o->beam.no_repeat_ngram_size,
                  "never repeat an n-gram of the new tokens (0 = off)")
      ->capture_default_str();
  sub->add_flag("--early-stopping", o->beam.early_stopping,
                "beam search: stop once num-beams hypotheses finished");
  sub->add_option("--out", o->out, "write JSONL {prompt, text, tokens, finish_reason} here");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      if (o->prompt.empty() && o->prompts.empty()) throw ConfigError("give --prompt TEXT or --prompts FILE");
      std::vector<std::string> prompts = o->prompts.empty() ? std::vector<std::string>{o->prompt} : read_prompts(o->prompts);
      const model::ModelSource src = model::resolve_model_source(o->model, o->adapter);
      model::CausalLM m = model::load_checkpoint(src.base);
      if (!src.adapter.empty()) model::load_adapter(m, src.adapter);
      tok::Tokenizer tk = tok::load_tokenizer(src.base);
      generate::GenerationOptions g = o->g;
      g.do_sample = o->sample;
      g.no_repeat_ngram_size = o->beam.no_repeat_ngram_size;
      const bool s2s = m->config().is_seq2seq();  // the prompt is the encoder's source
      if (tk.eos_id()) g.stop_ids.push_back(*tk.eos_id());
      if (tk.pad_id()) g.pad_id = *tk.pad_id();
      const std::vector<std::vector<int64_t>> ids = encode_prompts(tk, prompts, s2s, o->chat);
      auto decode = [&tk](const std::vector<int64_t>& v) {
        return tk.decode(std::vector<tok::TokenId>(v.begin(), v.end()), /*skip_special=*/true);
      };
      std::vector<generate::Generation> gens;
      if (o->beam.num_beams > 1) {
        if (o->sample || !g.stop_strings.empty() || g.repetition_penalty != 1.0)
          throw ConfigError(
              "--num-beams > 1 decodes by beam search: drop --sample, --stop and "
              "--repetition-penalty");
        generate::BeamOptions b = o->beam;
        b.max_new_tokens = g.max_new_tokens;
        b.stop_ids = g.stop_ids;
        b.pad_id = g.pad_id;
        gens = generate::beam_search(*m, ids, b, decode);
      } else {
        gens = generate::generate(*m, ids, g, decode);
      }
      std::string jsonl;
      for (size_t i = 0; i < gens.size(); ++i) {
        nlohmann::json j = {{"prompt", prompts[i]}, {"text", gens[i].text}, {"tokens", gens[i].tokens},
                            {"finish_reason", gens[i].finish_reason}};
        if (o->beam.num_beams > 1) j["score"] = gens[i].score;
        if (o->out.empty()) std::cout << (gens.size() > 1 ? fmt::format("[{}] ", i) : "") << gens[i].text << "\n";
        else jsonl += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      }
      if (!o->out.empty()) write_file_atomic(o->out, jsonl);
      return 0;
    };
  });
}

}  // namespace dpft
