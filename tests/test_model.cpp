// Transformer invariants on tiny random models: padding invariance (left and right), KV-cache
// equivalence, LoRA identity at B = 0 and merge/unmerge round trips, weight export/import,
// per-token loss against a direct computation. Logit parity with an independent Python
// implementation lives in test_model_parity.cpp.
#include <catch2/catch.hpp>

#include "core/model/checkpoint.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/model/transformer.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/log.hpp"
#include "model_test_util.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::model;

namespace {

ModelConfig tiny_model_config(const std::string& type) {
  return test::tiny_config(type);
}

torch::Tensor ids_of(std::vector<int64_t> v) {
  return torch::tensor(v, torch::kInt64).unsqueeze(0);
}

}  // namespace

TEST_CASE("padding: a sequence's logits do not depend on left or right padding", "[model]") {
  for (const std::string& type : test::decoder_types()) {
    INFO(type);
    CausalLM m = make_causal_lm(tiny_model_config(type), 1);
    m->eval();
    torch::NoGradGuard ng;
    torch::Tensor a = ids_of({5, 17, 3, 42, 8});
    torch::Tensor alone = m->forward(a, torch::Tensor());
    // batch: row 0 = a left-padded by 3, row 1 = a longer sequence
    torch::Tensor left =
        torch::tensor({{0, 0, 0, 5, 17, 3, 42, 8}, {1, 2, 3, 4, 5, 6, 7, 9}}, torch::kInt64);
    torch::Tensor lmask =
        torch::tensor({{0, 0, 0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}}, torch::kInt64);
    torch::Tensor out = m->forward(left, lmask);
    CHECK(torch::allclose(out[0].slice(0, 3, 8), alone[0], 1e-5, 1e-5));
    torch::Tensor right =
        torch::tensor({{5, 17, 3, 42, 8, 0, 0, 0}, {1, 2, 3, 4, 5, 6, 7, 9}}, torch::kInt64);
    torch::Tensor rmask =
        torch::tensor({{1, 1, 1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}}, torch::kInt64);
    torch::Tensor out2 = m->forward(right, rmask);
    CHECK(torch::allclose(out2[0].slice(0, 0, 5), alone[0], 1e-5, 1e-5));
    CHECK(torch::allclose(out2[1], out[1], 1e-5, 1e-5));
    CHECK_FALSE(torch::any(torch::isnan(out)).item<bool>());
  }
}

TEST_CASE("KV cache: incremental logits equal the full forward", "[model]") {
  for (const std::string& type : test::decoder_types()) {
    INFO(type);
    CausalLM m = make_causal_lm(tiny_model_config(type), 2);
    m->eval();
    torch::NoGradGuard ng;
    torch::Tensor ids =
        torch::tensor({{0, 0, 7, 8, 9, 10, 11, 12}, {1, 2, 3, 4, 5, 6, 7, 8}}, torch::kInt64);
    torch::Tensor mask =
        torch::tensor({{0, 0, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}}, torch::kInt64);
    torch::Tensor full = m->forward(ids, mask);
    KVCache cache;
    torch::Tensor pre = m->forward(ids.slice(1, 0, 5), mask.slice(1, 0, 5), &cache);
    // real (unpadded) positions only: padded query rows attend to nothing meaningful
    CHECK(torch::allclose(pre[0].slice(0, 2, 5), full[0].slice(0, 2, 5), 1e-5, 1e-5));
    CHECK(torch::allclose(pre[1], full[1].slice(0, 0, 5), 1e-5, 1e-5));
    for (int64_t t = 5; t < 8; ++t) {
      torch::Tensor step = m->forward(ids.slice(1, t, t + 1), mask.slice(1, 0, t + 1), &cache);
      CHECK(torch::allclose(step[0][0], full[0][t], 1e-4, 1e-5));
      CHECK(torch::allclose(step[1][0], full[1][t], 1e-4, 1e-5));
    }
    CHECK(cache.length() == 8);
  }
}

TEST_CASE("LoRA: B = 0 leaves logits unchanged; merge and unmerge round-trip", "[model]") {
  for (const std::string& type : test::decoder_types()) {
    INFO(type);
    CausalLM m = make_causal_lm(tiny_model_config(type), 3);
    m->eval();
    torch::NoGradGuard ng;
    torch::Tensor ids = ids_of({3, 1, 4, 1, 5, 9, 2, 6});
    torch::Tensor base = m->forward(ids, torch::Tensor());
    std::vector<torch::Tensor> w0;
    for (auto& [name, lin] : m->linears()) {
      lin->add_lora(4, 8.0, 0.0);
      w0.push_back(lin->weight.clone());
    }
    CHECK(torch::equal(m->forward(ids, torch::Tensor()), base));
    for (auto& [name, lin] : m->linears()) lin->lora_B.normal_(0, 0.1);
    torch::Tensor adapted = m->forward(ids, torch::Tensor());
    CHECK_FALSE(torch::allclose(adapted, base, 1e-4, 1e-4));
    for (auto& [name, lin] : m->linears()) lin->merge_lora();
    CHECK(torch::allclose(m->forward(ids, torch::Tensor()), adapted, 1e-5, 1e-5));
    size_t i = 0;
    for (auto& [name, lin] : m->linears()) {
      lin->unmerge_lora();
      CHECK(torch::allclose(lin->weight, w0[i++], 1e-6, 1e-6));
    }
    CHECK(torch::allclose(m->forward(ids, torch::Tensor()), adapted, 1e-5, 1e-5));
  }
}

TEST_CASE("weights export and load back exactly; bad shapes and missing tensors are input errors",
          "[model]") {
  for (const std::string& type : test::decoder_types()) {
    INFO(type);
    CausalLM a = make_causal_lm(tiny_model_config(type), 4), b = make_causal_lm(tiny_model_config(type), 5);
    auto w = export_weights(a);
    std::map<std::string, torch::Tensor> store(w.begin(), w.end());
    if (type == "gpt2") {  // Conv1D layout: (in, out)
      CHECK(store.at("transformer.h.0.attn.c_attn.weight").sizes() == torch::IntArrayRef({32, 96}));
      CHECK(store.count("lm_head.weight") == 0);  // tied
    } else if (type == "phi3") {  // fused: q, k, v rows (32 + 16 + 16); gate, up rows (2 x 48)
      CHECK(store.at("model.layers.0.self_attn.qkv_proj.weight").sizes() ==
            torch::IntArrayRef({64, 32}));
      CHECK(store.at("model.layers.1.mlp.gate_up_proj.weight").sizes() ==
            torch::IntArrayRef({96, 32}));
      CHECK(store.count("model.layers.0.self_attn.k_proj.weight") == 0);
    } else {
      CHECK(store.at("model.layers.0.self_attn.k_proj.weight").sizes() ==
            torch::IntArrayRef({16, 32}));
      // Gemma-2's four norms per layer.
      CHECK(store.count("model.layers.1.post_feedforward_layernorm.weight") ==
            (type == "gemma2" ? 1u : 0u));
      CHECK(store.count("model.layers.0.self_attn.q_proj.bias") == (type == "qwen2" ? 1u : 0u));
      // Qwen3's per-head query / key norms, weights (head_dim), as HF names them.
      CHECK(store.count("model.layers.1.self_attn.k_norm.weight") == (type == "qwen3" ? 1u : 0u));
      if (type == "qwen3")
        CHECK(store.at("model.layers.0.self_attn.q_norm.weight").sizes() ==
              torch::IntArrayRef({8}));
    }
    auto get = [&](const std::string& n) { return store.count(n) ? store.at(n) : torch::Tensor(); };
    load_weights(b, get, "test");
    torch::NoGradGuard ng;
    torch::Tensor ids = ids_of({1, 2, 3});
    CHECK(torch::equal(a->forward(ids, torch::Tensor()), b->forward(ids, torch::Tensor())));
    std::string first = w.front().first;
    auto missing = [&](const std::string& n) { return n == first ? torch::Tensor() : get(n); };
    CHECK_THROWS_AS(load_weights(b, missing, "test"), InputError);
    auto bad = [&](const std::string& n) { return n == first ? torch::zeros({3, 3}) : get(n); };
    CHECK_THROWS_WITH(load_weights(b, bad, "ckpt"), Catch::Contains("has shape (3, 3)"));
  }
}

TEST_CASE("GPT-2 names load without the transformer. prefix", "[model]") {
  CausalLM a = make_causal_lm(tiny_model_config("gpt2"), 6), b = make_causal_lm(tiny_model_config("gpt2"), 7);
  std::map<std::string, torch::Tensor> store;
  for (auto& [n, t] : export_weights(a))
    store[n.rfind("transformer.", 0) == 0 ? n.substr(12) : n] = t;
  load_weights(
      b, [&](const std::string& n) { return store.count(n) ? store.at(n) : torch::Tensor(); }, "t");
  torch::NoGradGuard ng;
  CHECK(torch::equal(a->forward(ids_of({4, 5}), torch::Tensor()),
                     b->forward(ids_of({4, 5}), torch::Tensor())));
}

// The obvious formulation per_token_loss replaced (it materialises log_softmax): the reference
// for the fused, chunked next-token NLL's values and gradients.
static torch::Tensor reference_token_loss(const torch::Tensor& logits,
                                          const torch::Tensor& labels) {
  const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
  torch::Tensor lg = logits.slice(1, 0, T - 1).reshape({B * (T - 1), V});
  torch::Tensor tgt = labels.slice(1, 1, T).reshape({B * (T - 1)});
  torch::Tensor mask = tgt != -100;
  torch::Tensor safe = torch::where(mask, tgt, torch::zeros_like(tgt));
  torch::Tensor nll = -torch::log_softmax(lg, -1).gather(1, safe.unsqueeze(1)).squeeze(1);
  return (nll * mask.to(nll.scalar_type())).view({B, T - 1});
}

TEST_CASE("per-token loss and its gradient equal log_softmax + gather (chunks, dtypes, ignored)",
          "[model]") {
  // V = 2^19: chunks of 16 rows, so the 3 x 8 = 24 positions span two chunks.
  for (int64_t V : {int64_t{13}, int64_t{1} << 19}) {
    for (auto dtype : {torch::kFloat32, torch::kFloat64}) {
      torch::manual_seed(V);
      const int64_t B = 3, T = 8;
      torch::Tensor base = (3 * torch::randn({B, T, V})).to(dtype);
      torch::Tensor labels = torch::randint(0, V, {B, T}, torch::kInt64);
      labels.index_put_({0, 3}, -100);
      labels.index_put_({2, torch::indexing::Slice(5, T)}, -100);  // right padding
      torch::Tensor w = torch::rand({B, T - 1});                   // upstream weights
      torch::Tensor a = base.clone().requires_grad_(true), b = base.clone().requires_grad_(true);
      auto [loss, mask] = per_token_loss(a, labels);
      torch::Tensor want = reference_token_loss(b.to(torch::kFloat64), labels);
      CHECK(loss.scalar_type() == torch::kFloat32);
      // float32 arithmetic over V terms: relative to the loss (about log V + 9 here)
      CHECK((loss.to(torch::kFloat64) - want).abs().max().item<double>() <
            1e-5 * want.abs().max().item<double>());
      CHECK(mask.sum().item<int64_t>() == B * (T - 1) - 1 - 3);  // targets [0][3], [2][5..7]
      CHECK(loss[2][5].item<double>() == 0.0);  // position 5 scores labels[2][6] = -100
      (loss * w).sum().backward();
      (want * w.to(torch::kFloat64)).sum().backward();
      CHECK(a.grad().scalar_type() == dtype);
      double scale = b.grad().abs().max().item<double>();
      CHECK(
          (a.grad().to(torch::kFloat64) - b.grad().to(torch::kFloat64)).abs().max().item<double>() <
          1e-5 * scale);
      // The last position and ignored targets get no gradient at all.
      CHECK(a.grad().select(1, T - 1).abs().max().item<double>() == 0.0);
      CHECK(a.grad()[0][2].abs().max().item<double>() == 0.0);
    }
  }
}

TEST_CASE("scored_positions gathers each row's scored positions, left-aligned", "[model]") {
  // Row 0: prompt of 2 then 3 scored tokens; row 1: all scored, one pad; row 2: nothing scored.
  torch::Tensor labels = torch::tensor(
      {{-100, -100, 7, 8, 9}, {4, 5, 6, 3, -100}, {-100, -100, -100, -100, -100}}, torch::kInt64);
  auto [index, targets] = scored_positions(labels);
  REQUIRE(index.sizes() == torch::IntArrayRef({3, 3}));  // row 1 scores positions 0..2
  CHECK(torch::equal(index, torch::tensor({{1, 2, 3}, {0, 1, 2}, {0, 0, 0}}, torch::kInt64)));
  CHECK(torch::equal(targets,
                     torch::tensor({{7, 8, 9}, {5, 6, 3}, {-100, -100, -100}}, torch::kInt64)));
  // Nothing scored anywhere: one slot per row, ignored.
  auto [i0, t0] = scored_positions(torch::full({2, 4}, -100, torch::kInt64));
  CHECK(i0.sizes() == torch::IntArrayRef({2, 1}));
  CHECK((t0 == -100).all().item<bool>());
}

TEST_CASE("next_token_scores equals the full forward's per-sample loss, values and gradients",
          "[model]") {
  for (const std::string type : {"gpt2", "llama", "gemma2", "phi3"}) {
    CAPTURE(type);
    ModelConfig c = test::tiny_config(type);
    CausalLM a = make_causal_lm(c, 4), b = make_causal_lm(c, 4);
    // Right-padded rows of lengths 7, 5, 2, 1 with prompts of 3, 0, 1, 0 unscored tokens.
    torch::manual_seed(8);
    const int64_t B = 4, T = 7;
    torch::Tensor ids = torch::randint(1, c.vocab_size, {B, T}, torch::kInt64);
    torch::Tensor mask = torch::zeros({B, T}, torch::kInt64);
    const std::vector<int64_t> lens = {7, 5, 2, 1}, prompts = {3, 0, 1, 0};
    torch::Tensor labels = ids.clone();
    for (int64_t i = 0; i < B; ++i) {
      mask[i].slice(0, 0, lens[i]).fill_(1);
      labels[i].slice(0, lens[i]).fill_(-100);
      labels[i].slice(0, 0, prompts[i]).fill_(-100);
    }
    auto [want, want_tokens] = per_sample_loss(b->forward(ids, mask), labels);
    NextTokenScores got = next_token_scores(*a, ids, mask, labels, true);
    CHECK(torch::equal(got.tokens, want_tokens));
    CHECK(torch::equal(got.tokens, torch::tensor({4, 4, 1, 0}, torch::kInt64)));
    CHECK((got.loss - want).abs().max().item<double>() < 1e-5 * want.abs().max().item<double>());
    CHECK(got.loss[3].item<double>() == 0.0);  // length 1: nothing to predict
    // Hits: argmax of the full forward's logits at the scored positions, counted by hand.
    {
      torch::NoGradGuard ng;
      torch::Tensor full = b->forward(ids, mask).argmax(-1);  // (B, T)
      for (int64_t i = 0; i < B; ++i) {
        int64_t hits = 0;
        for (int64_t t = 0; t + 1 < T; ++t)
          if (labels[i][t + 1].item<int64_t>() != -100)
            hits += full[i][t].item<int64_t>() == labels[i][t + 1].item<int64_t>();
        CHECK(got.correct[i].item<int64_t>() == hits);
      }
    }
    // Gradients of every parameter (the tied head and embedding included) under a weighting.
    torch::Tensor w = torch::tensor({0.5f, -1.5f, 2.0f, 1.0f});
    (got.loss * w).sum().backward();
    (want * w).sum().backward();
    auto pa = a->named_parameters(), pb = b->named_parameters();
    for (const auto& kv : pa) {
      CAPTURE(kv.key());
      const torch::Tensor ga = kv.value().grad(), gb = pb[kv.key()].grad();
      REQUIRE(gb.defined());
      REQUIRE(ga.defined());
      CHECK((ga - gb).abs().max().item<double>() <= 1e-5 * gb.abs().max().item<double>() + 1e-9);
    }
  }
}

TEST_CASE("per-token loss equals a direct cross-entropy", "[model]") {
  torch::manual_seed(0);
  torch::Tensor logits = torch::randn({2, 4, 7});
  torch::Tensor labels = torch::tensor({{1, 2, 3, 4}, {5, 6, -100, 0}}, torch::kInt64);
  auto [loss, mask] = per_token_loss(logits, labels);
  REQUIRE(loss.sizes() == torch::IntArrayRef({2, 3}));
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 3; ++t) {
      int64_t y = labels[b][t + 1].item<int64_t>();
      if (y == -100) {
        CHECK(mask[b][t].item<bool>() == false);
        CHECK(loss[b][t].item<float>() == 0.0f);
        continue;
      }
      auto row = logits[b][t];
      double want = -(row[y] - torch::logsumexp(row, 0)).item<double>();
      CHECK(loss[b][t].item<double>() == Approx(want).epsilon(1e-5));
    }
}

TEST_CASE("config validation names the problem", "[model]") {
  ModelConfig c = tiny_model_config("llama");
  c.num_kv_heads = 3;
  CHECK_THROWS_WITH(c.validate("cfg"), Catch::Contains("not a multiple"));
  nlohmann::json j = {{"model_type", "mamba"}};
  CHECK_THROWS_WITH(parse_model_config(j, "x/config.json"),
                    Catch::Contains("unsupported model_type 'mamba'"));
  nlohmann::json g = {{"model_type", "gpt2"}, {"n_embd", 30}, {"n_head", 4}};
  CHECK_THROWS_AS(parse_model_config(g, "g"), InputError);
  auto round = parse_model_config(model_config_to_json(tiny_model_config("llama")), "rt");
  CHECK(round.rope_scaling.has_value());
  CHECK(round.num_kv_heads == 2);
  CHECK(round.tie_word_embeddings == false);
  // Qwen3-0.6B's config.json (the keys dpft reads): head_dim 128 is not hidden / heads, the
  // per-head q/k norms come with the model type, no q/k/v biases.
  nlohmann::json q3 = {{"architectures", {"Qwen3ForCausalLM"}},
                       {"model_type", "qwen3"},
                       {"vocab_size", 151936},
                       {"hidden_size", 1024},
                       {"num_hidden_layers", 28},
                       {"num_attention_heads", 16},
                       {"num_key_value_heads", 8},
                       {"head_dim", 128},
                       {"intermediate_size", 3072},
                       {"max_position_embeddings", 40960},
                       {"rms_norm_eps", 1e-6},
                       {"rope_theta", 1000000},
                       {"attention_bias", false},
                       {"tie_word_embeddings", true},
                       {"hidden_act", "silu"}};
  ModelConfig qc = parse_model_config(q3, "qwen3/config.json");
  CHECK(qc.qk_norm);
  CHECK_FALSE(qc.attention_bias);
  CHECK(qc.head_dim == 128);
  CHECK(qc.num_kv_heads == 8);
  const nlohmann::json back = model_config_to_json(qc);
  CHECK(back["architectures"][0] == "Qwen3ForCausalLM");
  CHECK(parse_model_config(back, "rt").qk_norm);
  CHECK_FALSE(parse_model_config(model_config_to_json(tiny_model_config("qwen2")), "rt").qk_norm);
  // transformers >= 5: rope_parameters in place of rope_theta / rope_scaling.
  nlohmann::json v5 = q3;
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "default"}};
  ModelConfig c5 = parse_model_config(v5, "v5");
  CHECK(c5.rope_theta == 5e5);
  CHECK_FALSE(c5.rope_scaling.has_value());
  v5["rope_parameters"] = {{"rope_theta", 5e5},       {"rope_type", "llama3"},
                           {"factor", 32.0},          {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  c5 = parse_model_config(v5, "v5");
  REQUIRE(c5.rope_scaling.has_value());
  CHECK(c5.rope_scaling->factor == 32.0);
  v5["rope_parameters"] = {{"rope_theta", 5e5}, {"rope_type", "yarn"}, {"factor", 4.0}};
  CHECK_THROWS_WITH(parse_model_config(v5, "v5"), Catch::Contains("rope_type type 'yarn'"));
}

TEST_CASE("Llama-family configs: real Mistral and Gemma files, round trips, bad options named",
          "[model]") {
  SECTION("every family's config round-trips through config.json") {
    for (const std::string& type : test::decoder_types()) {
      INFO(type);
      const ModelConfig c = tiny_model_config(type);
      const ModelConfig r = parse_model_config(model_config_to_json(c), "rt");
      CHECK(r.model_type == c.model_type);
      CHECK(r.activation == c.activation);
      CHECK(r.sliding_window == c.sliding_window);
      CHECK(r.local_layers == (c.model_type == "gemma2" ? c.local_layers : std::vector<bool>{}));
      CHECK(r.norm_plus_one == c.norm_plus_one);
      CHECK(r.scale_embedding == c.scale_embedding);
      CHECK(r.sandwich_norms == c.sandwich_norms);
      CHECK(r.query_scale == c.query_scale);
      CHECK(r.attn_softcap == c.attn_softcap);
      CHECK(r.final_softcap == c.final_softcap);
      CHECK(r.fused_projections == c.fused_projections);
      CHECK(r.tie_word_embeddings == c.tie_word_embeddings);
      CHECK(r.rope_scaling.has_value() == c.rope_scaling.has_value());
      if (c.rope_scaling) {
        CHECK(r.rope_scaling->type == c.rope_scaling->type);
        CHECK(r.rope_scaling->short_factor == c.rope_scaling->short_factor);
        CHECK(r.rope_scaling->long_factor == c.rope_scaling->long_factor);
        CHECK(r.rope_scaling->original_max_position_embeddings ==
              c.rope_scaling->original_max_position_embeddings);
        CHECK(r.rope_scaling->factor == Approx(c.rope_scaling->factor));
      }
    }
  }
  SECTION("the real Mistral-7B-Instruct-v0.3 and Gemma-2B-it config.json files") {
    SHARED_DATA_OR_SKIP(d, "model_configs");
    const ModelConfig m = parse_model_config(
        nlohmann::json::parse(read_file(d / "mistral_7b_instruct_v0.3.json")), "m");
    CHECK(m.model_type == "mistral");
    CHECK(m.num_kv_heads == 8);
    CHECK(m.head_dim == 128);
    CHECK(m.rope_theta == 1e6);
    CHECK_FALSE(m.sliding_window);  // "sliding_window": null
    CHECK_FALSE(m.tie_word_embeddings);
    CHECK_FALSE(m.attention_bias);
    const ModelConfig g =
        parse_model_config(nlohmann::json::parse(read_file(d / "gemma_2b_it.json")), "g");
    CHECK(g.model_type == "gemma");
    CHECK(g.head_dim == 256);
    CHECK(g.num_kv_heads == 1);                  // multi-query
    CHECK(g.activation == "gelu_pytorch_tanh");  // its hidden_act "gelu" is not Gemma's GeGLU
    CHECK(g.norm_plus_one);
    CHECK(g.scale_embedding);
    CHECK(g.tie_word_embeddings);  // GemmaConfig's default; the file does not say
    CHECK(g.vocab_size == 256000);
  }
  SECTION("families' defaults and keys") {
    ModelConfig m = parse_model_config({{"model_type", "mistral"}}, "m");
    CHECK(m.sliding_window == 4096);  // MistralConfig's default when the key is absent
    ModelConfig g2 = parse_model_config({{"model_type", "gemma2"}, {"num_hidden_layers", 4}}, "g2");
    CHECK(g2.local_layers == std::vector<bool>{true, false, true, false});
    CHECK(g2.attn_softcap == 50.0);
    CHECK(g2.final_softcap == 30.0);
    CHECK(g2.query_scale == 256.0);
    g2 = parse_model_config({{"model_type", "gemma2"},
                             {"num_hidden_layers", 2},
                             {"final_logit_softcapping", nullptr},
                             {"layer_types", {"full_attention", "sliding_attention"}}},
                            "g2");
    CHECK(g2.final_softcap == 0.0);
    CHECK(g2.local_layers == std::vector<bool>{false, true});
    // Llama's attention_bias covers o_proj; mlp_bias the MLP; Qwen2 has no o_proj bias.
    ModelConfig l = parse_model_config(
        {{"model_type", "llama"}, {"attention_bias", true}, {"mlp_bias", true}}, "l");
    CHECK((l.attention_bias && l.o_bias && l.mlp_bias));
    ModelConfig q = parse_model_config({{"model_type", "qwen2"}}, "q");
    CHECK((q.attention_bias && !q.o_bias));
    ModelConfig p = parse_model_config({{"model_type", "phi3"},
                                        {"hidden_size", 64},
                                        {"num_attention_heads", 4},
                                        {"max_position_embeddings", 512},
                                        {"original_max_position_embeddings", 128},
                                        {"rope_scaling",
                                         {{"type", "su"},
                                          {"short_factor", {1, 1, 1, 1, 1, 1, 1, 1}},
                                          {"long_factor", {1, 2, 3, 4, 5, 6, 7, 8}}}}},
                                       "p");
    REQUIRE(p.rope_scaling);
    CHECK(p.rope_scaling->type == RopeType::kLongRope);
    CHECK(p.rope_scaling->original_max_position_embeddings == 128);
    CHECK(p.rope_scaling->factor == 4.0);
    CHECK(p.fused_projections);
  }
  SECTION("options the family does not have, or out of range, are named") {
    auto error = [](nlohmann::json j) {
      try {
        parse_model_config(j, "x/config.json");
      } catch (const InputError& e) {
        return std::string(e.what());
      }
      return std::string("no error");
    };
    CHECK_THAT(error({{"model_type", "phi3"}, {"rope_scaling", {{"type", "dynamic"}}}}),
               Catch::Contains("rope_scaling type 'dynamic' is not supported for phi3") &&
                   Catch::Contains("longrope"));
    CHECK_THAT(error({{"model_type", "mistral"}, {"rope_scaling", {{"type", "longrope"}}}}),
               Catch::Contains("'longrope' is not supported for mistral"));
    CHECK_THAT(error({{"model_type", "phi3"},
                      {"hidden_size", 64},
                      {"num_attention_heads", 4},
                      {"rope_scaling",
                       {{"type", "longrope"}, {"short_factor", {1, 1}}, {"long_factor", {1, 1}}}}}),
               Catch::Contains("short_factor has 2 entries; longrope needs head_dim / 2 = 8"));
    CHECK_THAT(error({{"model_type", "phi3"}, {"rope_scaling", {{"type", "longrope"}}}}),
               Catch::Contains("needs the list 'short_factor'"));
    CHECK_THAT(error({{"model_type", "mistral"}, {"sliding_window", 0}}),
               Catch::Contains("sliding_window 0 must be >= 1"));
    CHECK_THAT(error({{"model_type", "gemma2"}, {"layer_types", {"local"}}}),
               Catch::Contains("layer_types entry 'local'"));
    CHECK_THAT(error({{"model_type", "gemma2"},
                      {"num_hidden_layers", 3},
                      {"layer_types", {"full_attention"}}}),
               Catch::Contains("layer_types names 1 layers but num_hidden_layers is 3"));
    CHECK_THAT(error({{"model_type", "phi3"}, {"partial_rotary_factor", 0.5}}),
               Catch::Contains("partial_rotary_factor"));
    CHECK_THAT(error({{"model_type", "gemma"}, {"hidden_activation", "swish"}}),
               Catch::Contains("unsupported activation 'swish'"));
    CHECK_THAT(error({{"model_type", "gemma2"}, {"attn_logit_softcapping", "50"}}),
               Catch::Contains("'attn_logit_softcapping' must be a number or null"));
  }
}

TEST_CASE("a checkpoint's tensors that no parameter reads are named in a warning", "[model]") {
  test::TempDir d;
  CausalLM m = make_causal_lm(tiny_model_config("llama"), 3);
  save_checkpoint(m, d.path / "ckpt");
  // The same weights with an extra bias (a config that switched attention_bias off) and a
  // rotary buffer HF computes itself.
  auto w = export_weights(m);
  w.emplace_back("model.layers.0.self_attn.o_proj.bias", torch::zeros({32}));
  w.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", torch::zeros({4}));
  save_safetensors(d.path / "ckpt" / "model.safetensors", w, {});
  const WarningCapture capture;
  load_checkpoint(d.path / "ckpt");
  const std::vector<std::string> warned = captured_warnings();
  REQUIRE(warned.size() == 1);
  CHECK_THAT(warned[0], Catch::Contains("1 stored tensor(s) not used by dpft's llama model: "
                                        "model.layers.0.self_attn.o_proj.bias"));
  CHECK_THAT(warned[0], !Catch::Contains("inv_freq"));
}

TEST_CASE("PEFT: LoRA targets, frozen base, full and none; bad targets are config errors",
          "[model][peft]") {
  CausalLM m = make_causal_lm(tiny_model_config("llama"), 8);
  PeftOptions o;
  o.targets = {"q_proj", "v_proj"};
  apply_peft(m, o, 1);
  auto tr = trainable_parameters(m);
  REQUIRE(tr.size() == 2 * 2 * 2);  // 2 layers x 2 modules x (A, B)
  CHECK(tr[0].first == "model.layers.0.self_attn.q_proj.lora_A");
  CHECK(count_parameters(m, true) ==
        2 * (8 * 32 + 32 * 8 + 8 * 32 + 16 * 8));  // r = 8: q (A, B) + v (A, B)
  CHECK(module_matches("model.layers.0.self_attn.q_proj", "q_proj"));
  CHECK_FALSE(module_matches("model.layers.0.self_attn.qq_proj", "q_proj"));
  CHECK(module_matches("model.layers.0.self_attn.q_proj", "self_attn.q_proj"));

  CausalLM g = make_causal_lm(tiny_model_config("gpt2"), 9);
  PeftOptions bad;
  bad.targets = {"q_proj"};
  CHECK_THROWS_WITH(
      apply_peft(g, bad),
      Catch::Contains("matches no linear module of this gpt2 model") && Catch::Contains("c_attn"));
  PeftOptions full;
  full.kind = model::PeftKind::kFull;
  full.targets = {"ln_f"};
  apply_peft(g, full);
  CHECK(trainable_parameters(g).size() == 2);  // ln_f weight, bias
  full.targets = {"all"};
  apply_peft(g, full);
  CHECK(count_parameters(g, true) == count_parameters(g, false));
  PeftOptions none;
  none.kind = model::PeftKind::kNone;
  apply_peft(g, none);
  CHECK(count_parameters(g, true) == 0);
}
