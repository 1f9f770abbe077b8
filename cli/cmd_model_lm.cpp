// `dpft model init | rehead | info | logits`: make, re-head, describe and probe checkpoints.
//   init   --arch gpt2|llama|qwen2|bert|roberta|bart --preset P --tokenizer DIR --out DIR [--seed
//   N]
//          [--dtype D] [--head none|classification|mlm|causal] [--labels a,b,...]
//   rehead --from DIR --head H [--labels a,b] --out DIR [--seed N]: the body kept, a new head
//   info   DIR [--peft lora|full|none] [--targets a,b] [--r N] [--json]
//   logits --model DIR [--adapter DIR] (--text T | --ids 1,2,3) [--all-positions] --json
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/model/checkpoint.hpp"
#include "core/model/config.hpp"
#include "core/model/peft_kind.hpp"
#include "core/model/presets.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/source.hpp"
#include "core/tokenizer/encoder_tokenizer.hpp"
#include "core/tokenizer/load.hpp"
#include "core/tokenizer/wordpiece.hpp"
#include "core/train/model_init.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/strings.hpp"

namespace dpft {

namespace {

std::vector<int64_t> parse_ids(const std::string& s) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    try {
      size_t used = 0;
      ids.push_back(std::stoll(item, &used));
      if (used != item.size()) throw std::invalid_argument(item);
    } catch (const std::exception&) {
      throw ConfigError(fmt::format("--ids: '{}' is not an integer (expected e.g. --ids 1,2,3)", item));
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

void register_init(CLI::App* model, CliContext& ctx) {
  auto o = std::make_shared<ModelInitOptions>();
  CLI::App* sub = model->add_subcommand("init", "write a random-init HF-format checkpoint (config, weights, tokenizer)");
  sub->add_option("--arch", o->arch,
                  "gpt2 | llama | qwen2 | qwen3 | mistral | gemma | gemma2 | phi3 | bert | "
                  "roberta | bart")
      ->required();
  sub->add_option("--preset", o->preset,
                  "tiny | mini | small | gpt2-124m | qwen2.5-3b | bert-base | roberta-base | "
                  "minilm-l6 | bart-base (docs/models.md)")
      ->required();
  sub->add_option("--head", o->head,
                  "encoders: none | classification | mlm | causal (a causal-mask LM)")
      ->capture_default_str();
  sub->add_option("--labels", o->labels, "classification label names in id order (default 2)")
      ->delimiter(',');
  sub->add_option("--tokenizer", o->tokenizer, "tokenizer directory (its vocabulary sets vocab_size)")->required();
  sub->add_option("--out", o->out, "output directory")->required();
  sub->add_option("--seed", o->seed, "initialisation seed")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "stored dtype: float32 | float16 | bfloat16")->capture_default_str();
  sub->add_option("--tiktoken-family", o->family, "llama3 | qwen2 | qwen1 (tiktoken rank files)");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      const ModelInitResult r = init_model(*o);
      std::cout << fmt::format("wrote {} ({} {}, {} parameters, vocab {}, {} tokenizer files)\n",
                               o->out, o->arch, o->preset, r.parameters, r.vocab_size,
                               r.tokenizer_files);
      return 0;
    };
  });
}

// dpft model rehead: a pretrained encoder with a new head (e.g. models/tiny-roberta's masked-LM
// checkpoint as a sequence classifier): the body is copied, the new head is seeded-random.
void register_rehead(CLI::App* model, CliContext& ctx) {
  auto o = std::make_shared<ReheadOptions>();
  CLI::App* sub = model->add_subcommand(
      "rehead",
      "an encoder checkpoint with another head: body copied, new head randomly initialised "
      "(as HF from_pretrained with another ...For... class)");
  sub->add_option("--from", o->from, "encoder checkpoint directory (bert / roberta)")->required();
  sub->add_option("--head", o->head, "none | classification | mlm | causal")->required();
  sub->add_option("--labels", o->labels, "classification label names in id order (default 2)")
      ->delimiter(',');
  sub->add_option("--out", o->out, "output directory")->required();
  sub->add_option("--seed", o->seed, "initialisation seed of the new head")->capture_default_str();
  sub->add_option("--dtype", o->dtype, "stored dtype: float32 | float16 | bfloat16")
      ->capture_default_str();
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      std::error_code ec;
      DPFT_CHECK_AS(
          ConfigError,
          !fs::exists(o->out, ec) || (fs::is_directory(o->out, ec) && fs::is_empty(o->out, ec)),
          "--out {} exists and is not an empty directory; rehead never overwrites a "
          "checkpoint: choose a new path",
          o->out);
      const ReheadResult r = rehead_model(*o);
      std::cout << fmt::format(
          "wrote {}: {} parameters copied from {}; new (seeded init): {}; left out: {}; {} "
          "tokenizer files\n",
          o->out, r.copied, o->from, r.fresh.empty() ? "none" : join(r.fresh, ", "),
          r.dropped.empty() ? "none" : join(r.dropped, ", "), r.tokenizer_files);
      return 0;
    };
  });
}

// Parameter counts from the safetensors headers alone (no weights loaded), so that real-size
// checkpoints can be described cheaply. LoRA on a (rows, cols) matrix adds r * (rows + cols).
void register_info(CLI::App* model, CliContext& ctx) {
  struct Opts {
    std::string dir, peft = "lora";
    std::vector<std::string> targets;
    int64_t r = 8, reduction = 48;
    bool json = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = model->add_subcommand("info", "architecture and parameter counts (total, trainable under a PEFT config)");
  sub->add_option("dir", o->dir, "checkpoint directory")->required();
  sub->add_option("--peft", o->peft, "lora | adapter | full | none")->capture_default_str();
  sub->add_option("--reduction-factor", o->reduction,
                  "adapter: bottleneck = hidden size / this (encoders)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--targets", o->targets, "module names (default: q_proj,v_proj; gpt2: c_attn)")->delimiter(',');
  sub->add_option("--r", o->r, "LoRA rank")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_flag("--json", o->json, "one JSON object");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      model::ModelConfig cfg = model::load_model_config(o->dir);
      model::TensorStore store = model::TensorStore::open_dir(o->dir);
      std::vector<std::string> targets = o->targets;
      if (targets.empty()) targets = model::auto_targets(cfg.model_type, model::PeftKind::kLora);
      if (o->peft != "lora" && o->peft != "adapter" && o->peft != "full" && o->peft != "none")
        throw ConfigError(fmt::format("--peft '{}': use lora, adapter, full or none", o->peft));
      DPFT_CHECK_AS(ConfigError, o->peft != "adapter" || cfg.is_encoder(),
                    "--peft adapter: bottleneck adapters are built for encoders (bert, roberta); "
                    "{} is a {} model",
                    o->dir, cfg.model_type);
      int64_t total = 0, trainable = 0, matched = 0;
      for (const auto& name : store.names()) {
        const auto& info = store.info(name);
        int64_t n = 1;
        for (int64_t d : info.shape) n *= d;
        total += n;
        std::string module = name.substr(0, name.rfind('.'));
        bool hit = o->peft != "none" && targets.size() == 1 && targets[0] == "all";
        for (const auto& t : targets) hit = hit || model::module_matches(module, t);
        bool embedding = module.find("wte") != std::string::npos || module.find("wpe") != std::string::npos ||
                         module.find("embed_tokens") != std::string::npos;
        if (!hit || o->peft == "none" || o->peft == "adapter") continue;
        if (o->peft == "full") {
          trainable += n;
          ++matched;
        } else if (info.shape.size() == 2 && !embedding && name.size() > 7 && name.substr(name.size() - 7) == ".weight") {
          trainable += o->r * (info.shape[0] + info.shape[1]);
          ++matched;
        }
      }
      if (o->peft == "adapter") {  // per layer, 2 adapters: LN (2d), down (m d + m), up (d m + d)
        const int64_t d = cfg.hidden_size, m = model::adapter_width(d, o->reduction);
        trainable = cfg.num_layers * 2 * (2 * d + 2 * d * m + m + d);
        targets = {"every layer's attention and FFN outputs"};
      } else if (o->peft != "none" && matched == 0)
        throw ConfigError(fmt::format("--targets {} match no {} module of this model", join(targets, ","),
                                      o->peft == "lora" ? "linear" : ""));
      nlohmann::json j = {{"model_type", cfg.model_type}, {"hidden_size", cfg.hidden_size},
                          {"num_layers", cfg.num_layers}, {"num_heads", cfg.num_heads},
                          {"num_kv_heads", cfg.num_kv_heads}, {"vocab_size", cfg.vocab_size},
                          {"max_position", cfg.max_position}, {"tie_word_embeddings", cfg.tie_word_embeddings},
                          {"parameters", total}, {"peft", o->peft}, {"targets", targets},
                          {"trainable_parameters", trainable}};
      if (o->peft == "lora") j["lora_r"] = o->r;
      if (o->peft == "adapter") j["reduction_factor"] = o->reduction;
      if (o->json) {
        std::cout << j.dump(2) << "\n";
        return 0;
      }
      std::cout << fmt::format("{}: {} layers, d {}, {} heads ({} kv), vocab {}, {} positions\n", cfg.model_type,
                               cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size,
                               cfg.max_position)
                << fmt::format("parameters: {} total; {} trainable with peft {} on [{}]{}\n", total, trainable, o->peft,
                               join(targets, ", "), o->peft == "lora" ? fmt::format(" (r {})", o->r) : "");
      return 0;
    };
  });
}

void register_logits(CLI::App* model, CliContext& ctx) {
  struct Opts {
    std::string dir, adapter, text, ids;
    bool all = false, json = false, special = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = model->add_subcommand("logits", "input ids and fp32 logits of a checkpoint (last position by default)");
  sub->add_option("--model", o->dir,
                  "a checkpoint, a run directory (its saved model) or an adapter directory");
  sub->add_option("--adapter", o->adapter, "a PEFT adapter directory");
  auto* text = sub->add_option(
      "--text", o->text,
      "text (tokenized with the checkpoint's tokenizer: no special tokens for a decoder, an "
      "encoder's [CLS] ... [SEP] / <s> ... </s> for an encoder)");
  auto* ids = sub->add_option("--ids", o->ids, "comma-separated token ids");
  text->excludes(ids);
  sub->add_flag("--all-positions", o->all, "logits of every position");
  sub->add_flag("--special", o->special, "match special-token text in --text");
  sub->add_flag("--json", o->json, "JSON output (the only format)");
  sub->callback([o, &ctx] {
    ctx.action = [o] {
      if (o->text.empty() && o->ids.empty()) throw ConfigError("give --text TEXT or --ids 1,2,3");
      const model::ModelSource src = model::resolve_model_source(o->dir, o->adapter);
      model::CausalLM m = model::load_checkpoint(src.base);
      if (!src.adapter.empty()) model::load_adapter(m, src.adapter);
      m->eval();
      std::vector<int64_t> input;
      if (!o->ids.empty()) {
        input = parse_ids(o->ids);
      } else if (m->config().is_encoder()) {  // its own tokenizer, with [CLS] / [SEP] as embed
        const tok::PairEncoding p = tok::EncoderTokenizer::load(src.base).encode(
            o->text, std::nullopt, static_cast<size_t>(m->config().usable_positions()));
        input.assign(p.ids.begin(), p.ids.end());
      } else {
        tok::EncodeOptions eo;
        eo.allow_special = o->special;
        for (auto t : tok::load_tokenizer(src.base).encode(o->text, eo)) input.push_back(t);
      }
      if (input.empty()) throw ConfigError("the input has no tokens");
      for (int64_t t : input)
        if (t < 0 || t >= m->config().vocab_size)
          throw ConfigError(fmt::format("token id {} is outside the vocabulary [0, {})", t, m->config().vocab_size));
      torch::NoGradGuard ng;
      torch::Tensor lg = m->forward(torch::tensor(input, torch::kInt64).unsqueeze(0), torch::Tensor())[0].to(torch::kFloat32);
      nlohmann::json j = {{"input_ids", input}};
      auto row = [](const torch::Tensor& r) {
        std::vector<float> v(r.data_ptr<float>(), r.data_ptr<float>() + r.numel());
        return v;
      };
      if (o->all) {
        nlohmann::json rows = nlohmann::json::array();
        for (int64_t t = 0; t < lg.size(0); ++t) rows.push_back(row(lg[t].contiguous()));
        j["logits"] = rows;
      } else {
        j["position"] = lg.size(0) - 1;
        j["logits"] = row(lg[lg.size(0) - 1].contiguous());
      }
      std::cout << j.dump() << "\n";
      return 0;
    };
  });
}

}  // namespace

void register_model_lm(CLI::App* model, CliContext& ctx) {
  register_init(model, ctx);
  register_rehead(model, ctx);
  register_info(model, ctx);
  register_logits(model, ctx);
}

}  // namespace dpft
