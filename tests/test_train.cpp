// Optimizers (against torch::optim::SGD / AdamW, state round trips, bad checkpoint state) and
// learning-rate schedules (hand-computed values).
#include <catch2/catch.hpp>

#include <cmath>

#include "core/train/optimizer.hpp"
#include "core/train/schedule.hpp"
#include "core/util/error.hpp"

using namespace dpft;
using namespace dpft::train;
using Catch::Matchers::Contains;

namespace {

std::vector<torch::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({3, 4}), torch::randn({5}), torch::randn({2, 2, 3}), torch::randn({1})};
}

std::vector<torch::Tensor> clones(const std::vector<torch::Tensor>& v) {
  std::vector<torch::Tensor> out;
  for (const auto& t : v) out.push_back(t.detach().clone());
  return out;
}

// Random gradients for step k; parameter `skip` (if >= 0) gets none.
std::vector<torch::Tensor> make_grads(const std::vector<torch::Tensor>& ps, int k, int skip) {
  torch::manual_seed(1000 + k);
  std::vector<torch::Tensor> g;
  for (size_t i = 0; i < ps.size(); ++i)
    g.push_back(static_cast<int>(i) == skip ? torch::Tensor() : torch::randn(ps[i].sizes()));
  return g;
}

// max |a - b| <= rel * max |b|, per tensor.
void check_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                 double rel) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    double diff = (a[i] - b[i]).abs().max().item<double>();
    double scale = b[i].abs().max().item<double>();
    INFO("param " << i << ": max diff " << diff << ", scale " << scale);
    CHECK(diff <= rel * scale);
  }
}

// Runs our optimizer and a torch::optim one side by side for 5 steps with changing lr;
// parameter 1 has no gradient in step 2.
template <typename TorchOpt, typename TorchOptions>
void compare_with_torch(const OptimizerOptions& ours_opts, TorchOptions torch_opts) {
  std::vector<torch::Tensor> a = make_params(7), b = clones(a);
  for (auto& t : b) t.set_requires_grad(true);
  Optimizer ours(a, ours_opts);
  TorchOpt ref(b, torch_opts);
  const double lrs[] = {0.1, 0.05, 0.02, 0.08, 0.01};
  for (int k = 0; k < 5; ++k) {
    auto g = make_grads(a, k, k == 2 ? 1 : -1);
    ours.step(g, lrs[k]);
    for (size_t i = 0; i < b.size(); ++i)
      b[i].mutable_grad() = g[i].defined() ? g[i].clone() : torch::Tensor();
    ref.param_groups()[0].options().set_lr(lrs[k]);
    ref.step();
  }
  CHECK(ours.steps_taken() == 5);
  std::vector<torch::Tensor> bd;
  for (auto& t : b) bd.push_back(t.detach());
  check_close(a, bd, 1e-6);
}

}  // namespace

TEST_CASE("SGD matches torch::optim::SGD (momentum, weight decay, skipped grads)", "[train]") {
  OptimizerOptions o;
  o.kind = dpft::OptimizerKind::kSgd;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  compare_with_torch<torch::optim::SGD>(
      o, torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
  o.momentum = 0;
  o.weight_decay = 0;
  compare_with_torch<torch::optim::SGD>(o, torch::optim::SGDOptions(0.1));
}

TEST_CASE("AdamW matches torch::optim::AdamW (decoupled decay, bias correction)", "[train]") {
  OptimizerOptions o;
  o.kind = dpft::OptimizerKind::kAdamW;
  o.weight_decay = 0.1;
  o.beta1 = 0.8;
  o.beta2 = 0.99;
  o.eps = 1e-6;
  compare_with_torch<torch::optim::AdamW>(
      o, torch::optim::AdamWOptions(0.1).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1));
  o.weight_decay = 0;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  compare_with_torch<torch::optim::AdamW>(o, torch::optim::AdamWOptions(0.1).weight_decay(0));
}

TEST_CASE("AdamW's first step is lr * g / (|g| + eps) after the decoupled decay", "[train]") {
  // Closed form: m1 = (1-b1) g, v1 = (1-b2) g^2, bias-corrected m = g, sqrt(v) = |g|.
  torch::Tensor p = torch::tensor({1.0, -2.0, 0.5}, torch::kFloat64);
  torch::Tensor g = torch::tensor({0.3, -4.0, 1e-9}, torch::kFloat64);
  OptimizerOptions o;
  o.weight_decay = 0.5;
  o.eps = 1e-8;
  Optimizer opt({p}, o);
  opt.step({g}, 0.01);
  double p0[] = {1.0, -2.0, 0.5}, g0[] = {0.3, -4.0, 1e-9};
  for (int i = 0; i < 3; ++i) {
    double want = p0[i] * (1 - 0.01 * 0.5) - 0.01 * g0[i] / (std::fabs(g0[i]) + 1e-8);
    CHECK(p[i].item<double>() == Approx(want).epsilon(1e-12));
  }
}

TEST_CASE("optimizer state round trip continues identically", "[train]") {
  for (dpft::OptimizerKind kind : {dpft::OptimizerKind::kSgd, dpft::OptimizerKind::kAdamW}) {
    INFO(dpft::name_of(kind));
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    std::vector<torch::Tensor> a = make_params(3);
    Optimizer A(a, o);
    for (int k = 0; k < 3; ++k) A.step(make_grads(a, k, k == 0 ? 2 : -1), 0.05);
    auto st = A.state();
    REQUIRE(st[0].first == "step");
    CHECK(st[0].second.item<int64_t>() == 3);
    for (const auto& [name, t] : st) {
      CHECK(t.device().is_cpu());
      CHECK(t.is_contiguous());
    }
    if (kind == dpft::OptimizerKind::kAdamW) {
      CHECK(st.size() == 1 + 3 * 4);
      bool found = false;
      for (const auto& [name, t] : st)
        if (name == "step.2") found = t.item<int64_t>() == 2;  // skipped in step 0
      CHECK(found);
    } else {
      CHECK(st.size() == 1 + 4);
    }
    std::vector<torch::Tensor> b = clones(a);
    Optimizer B(b, o);
    B.load_state(st);
    CHECK(B.steps_taken() == 3);
    for (int k = 3; k < 6; ++k) {
      auto g = make_grads(a, k, -1);
      A.step(g, 0.03);
      B.step(g, 0.03);
    }
    for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
    // The saved state is a copy: later steps do not change it.
    CHECK(st[0].second.item<int64_t>() == 3);
  }
}

TEST_CASE("mixed precision: a bfloat16 parameter steps on a float32 master copy", "[train][bf16]") {
  for (dpft::OptimizerKind kind : {dpft::OptimizerKind::kSgd, dpft::OptimizerKind::kAdamW}) {
    INFO(dpft::name_of(kind));
    OptimizerOptions o;
    o.kind = kind;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    // The same values in bfloat16 (the model) and in float32 (the reference optimizer).
    std::vector<torch::Tensor> lo, ref;
    for (const auto& t : make_params(5)) {
      lo.push_back(t.to(torch::kBFloat16));
      ref.push_back(lo.back().to(torch::kFloat32));
    }
    const std::vector<torch::Tensor> start = clones(lo);
    Optimizer A(lo, o), R(ref, o);
    for (size_t i = 0; i < lo.size(); ++i) {
      CHECK(A.masters()[i].scalar_type() == torch::kFloat32);
      CHECK(!A.masters()[i].is_same(lo[i]));
      CHECK(R.masters()[i].is_same(ref[i]));  // float32: its own master, no copy
    }
    // Steps far below bfloat16's resolution (|p| ~ 1, spacing 2^-7; lr * g ~ 1e-4): a bfloat16
    // optimizer would round every one away; the master accumulates them exactly as float32 does.
    for (int k = 0; k < 40; ++k) {
      auto g = make_grads(lo, k, k == 3 ? 0 : -1);
      for (auto& t : g)
        if (t.defined()) t = t.to(torch::kBFloat16);  // gradients in any floating dtype
      A.step(g, 1e-4);
      R.step(g, 1e-4);
    }
    for (size_t i = 0; i < lo.size(); ++i) {
      CHECK(torch::equal(A.masters()[i], ref[i]));              // bit for bit
      CHECK(torch::equal(lo[i], ref[i].to(torch::kBFloat16)));  // the model holds it rounded
      CHECK(lo[i].scalar_type() == torch::kBFloat16);
    }
    for (const auto& [name, t] : A.state())
      if (t.is_floating_point()) CHECK(t.scalar_type() == torch::kFloat32);
    CHECK(!torch::equal(lo[0], start[0]));  // the accumulated steps did reach the model
    // Changes made to the parameters elsewhere are taken into the masters, and back.
    torch::NoGradGuard ng;
    lo[1].fill_(0.5);
    A.params_to_masters();
    CHECK(A.masters()[1].eq(0.5).all().item<bool>());
    A.masters()[2].fill_(0.25);
    A.masters_to_params();
    CHECK(lo[2].eq(0.25).all().item<bool>());
  }
}

TEST_CASE("optimizer rejects bad options and mismatched checkpoint state", "[train]") {
  OptimizerOptions bad;  // an unknown train.optimizer is the spec parser's (test_config)
  bad.kind = dpft::OptimizerKind::kSgd;
  bad.momentum = 1.0;
  CHECK_THROWS_AS(Optimizer({torch::zeros({2})}, bad), ConfigError);

  OptimizerOptions o;  // adamw
  std::vector<torch::Tensor> a = make_params(1);
  Optimizer A(a, o);
  A.step(make_grads(a, 0, -1), 0.1);
  auto st = A.state();
  Optimizer B(clones(a), o);
  auto with = [&](auto edit) {
    auto s = st;
    edit(s);
    return s;
  };
  CHECK_THROWS_WITH(B.load_state(with([](auto& s) {
    s[2].second = torch::zeros({4, 3});
  })),
                    Contains("has shape (4, 3), but parameter 0 has shape (3, 4)"));
  CHECK_THROWS_AS(B.load_state(with([](auto& s) { s[2].first = "exp_avg.9"; })), InputError);
  CHECK_THROWS_WITH(B.load_state(with([](auto& s) { s[2].first = "momentum.0"; })),
                    Contains("unknown entry 'momentum.0'"));
  CHECK_THROWS_WITH(B.load_state(with([](auto& s) { s.erase(s.begin()); })),
                    Contains("lacks its 'step'"));
  CHECK_THROWS_WITH(B.load_state(with([](auto& s) { s.pop_back(); })), Contains("incomplete"));
  // A failed load leaves the optimizer as it was.
  CHECK(B.steps_taken() == 0);
  OptimizerOptions sgd;
  sgd.kind = dpft::OptimizerKind::kSgd;
  sgd.momentum = 0.5;
  Optimizer C(clones(a), sgd);
  CHECK_THROWS_AS(C.load_state(st), InputError);
  CHECK_THROWS_AS(A.step({torch::zeros({3, 4})}, 0.1), RuntimeError);  // wrong count
}

TEST_CASE("schedules: warmup then constant, linear or cosine decay (hand-computed)", "[train]") {
  ScheduleOptions o;
  o.lr = 0.1;
  o.total_steps = 10;
  o.warmup_ratio = 0.2;  // W = 2
  CHECK(warmup_steps(o) == 2);
  o.kind = dpft::Schedule::kConstant;
  CHECK(lr_at(o, 0) == Approx(0.05));
  CHECK(lr_at(o, 1) == Approx(0.1));
  CHECK(lr_at(o, 9) == Approx(0.1));
  o.kind = dpft::Schedule::kLinear;
  CHECK(lr_at(o, 0) == Approx(0.05));
  CHECK(lr_at(o, 2) == Approx(0.1));     // (10 - 2) / 8
  CHECK(lr_at(o, 6) == Approx(0.05));    // 4 / 8
  CHECK(lr_at(o, 9) == Approx(0.0125));  // 1 / 8
  o.kind = dpft::Schedule::kCosine;
  CHECK(lr_at(o, 1) == Approx(0.1));
  CHECK(lr_at(o, 2) == Approx(0.1));
  CHECK(lr_at(o, 6) == Approx(0.05));                      // progress 1/2
  CHECK(lr_at(o, 9) == Approx(0.1 * 0.0380602337443566));  // (1 + cos(7 pi / 8)) / 2
  // No warmup: step 0 is at the peak; linear from T = 4: 1, 3/4, 1/2, 1/4.
  o.warmup_ratio = 0;
  o.total_steps = 4;
  o.kind = dpft::Schedule::kLinear;
  CHECK(lr_at(o, 0) == Approx(0.1));
  CHECK(lr_at(o, 3) == Approx(0.025));
  // ceil(ratio * T), robust to 0.1 * 30 = 3.0000000000000004.
  o.warmup_ratio = 0.1;
  o.total_steps = 30;
  CHECK(warmup_steps(o) == 3);
  o.warmup_ratio = 0.11;
  CHECK(warmup_steps(o) == 4);  // 3.3 -> 4
  o.warmup_ratio = 1.0;
  o.total_steps = 5;
  CHECK(lr_at(o, 4) == Approx(0.1));
  CHECK(lr_at(o, 0) == Approx(0.02));
}

TEST_CASE("schedules reject bad options", "[train]") {
  ScheduleOptions o;  // an unknown train.schedule is the spec parser's (test_config)
  o.kind = dpft::Schedule::kLinear;
  o.warmup_ratio = 1.5;
  CHECK_THROWS_AS(lr_at(o, 0), ConfigError);
  o.warmup_ratio = 0;
  o.total_steps = 0;
  CHECK_THROWS_AS(lr_at(o, 0), ConfigError);
  o.total_steps = 3;
  CHECK_THROWS_AS(lr_at(o, 3), RuntimeError);
}
