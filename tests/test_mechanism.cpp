// The release mechanisms (core/privacy/mechanism.hpp): each adds exactly the calibrated noise,
// records exactly one planned release before drawing, refuses releases the plan does not hold,
// and never lets a stream or a ledger be rewound.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include <cmath>

#include "core/privacy/mechanism.hpp"
#include "core/util/error.hpp"
#include "mechanism_util.hpp"

using namespace dpft;
using dpft::test::reference_stream;
using dpft::test::test_mechanisms;
using torch::Tensor;

namespace {

double max_abs(const Tensor& a, const Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("GaussianSum adds N(0, (sigma S)^2) from its stream and records one release first",
          "[privacy][mechanism]") {
  const privacy::Release step{"train", 1.5, 0.01, 3};
  auto M = test_mechanisms(7, {step});
  privacy::GaussianSum& g = M->gaussian_sum("noise", step);
  std::vector<Tensor> sum = {torch::ones({4, 5}), torch::zeros({7}, torch::kFloat64)};
  const double norm = g.release(sum, 0.8);
  auto ref = reference_stream(7, "noise");
  const Tensor z0 = ref->normal({4, 5}, 1.5 * 0.8, torch::kFloat32);
  const Tensor z1 = ref->normal({7}, 1.5 * 0.8, torch::kFloat64);
  CHECK(max_abs(sum[0], 1 + z0) == 0);
  CHECK(max_abs(sum[1], z1) == 0);
  CHECK(sum[1].scalar_type() == torch::kFloat64);
  CHECK(norm == Approx(std::sqrt(z0.to(torch::kFloat64).pow(2).sum().item<double>() +
                                 z1.pow(2).sum().item<double>())));
  REQUIRE(M->ledger().releases().size() == 1);
  CHECK(M->ledger().releases()[0].count == 1);
  CHECK(M->ledger().releases()[0].noise_multiplier == 1.5);
  CHECK(M->ledger().releases()[0].sampling_rate == 0.01);
  CHECK(M->recorded(step) == 1);
  // Not drawn here (a data-parallel rank other than 0): recorded, the sum unchanged.
  std::vector<Tensor> other = {torch::ones({3})};
  CHECK(g.release(other, 0.8, /*draw=*/false) == 0);
  CHECK(max_abs(other[0], torch::ones({3})) == 0);
  CHECK(M->recorded(step) == 2);
  // The third and last planned release; a fourth is refused and recorded nowhere.
  g.count_remote();
  CHECK(M->recorded(step) == 3);
  std::vector<Tensor> more = {torch::zeros({2})};
  CHECK_THROWS_WITH(g.release(more, 0.8), Catch::Contains("number 4 of a plan of 3"));
  CHECK(max_abs(more[0], torch::zeros({2})) == 0);
  CHECK(M->recorded(step) == 3);
}

TEST_CASE("mechanisms refuse what the plan does not hold, and bad statistics before recording",
          "[privacy][mechanism]") {
  const privacy::Release step{"train", 1.0, 0.1, 0};
  auto M = test_mechanisms(1, {step});
  // Another label, sigma or q than the plan's: no mechanism is handed out.
  CHECK_THROWS_WITH(M->gaussian_sum("noise", {"other", 1.0, 0.1, 1}),
                    Catch::Contains("not one the run planned"));
  CHECK_THROWS_WITH(M->gaussian_sum("noise", {"train", 0.5, 0.1, 1}),
                    Catch::Contains("not one the run planned"));
  CHECK_THROWS_WITH(M->gaussian_sum("noise", {"train", 1.0, 0.2, 1}),
                    Catch::Contains("not one the run planned"));
  CHECK_THROWS(M->non_private(step));  // sigma 1 is not a non-private release
  privacy::GaussianSum& g = M->gaussian_sum("noise", step);
  std::vector<Tensor> bf16 = {torch::zeros({3}, torch::kBFloat16)};
  CHECK_THROWS_WITH(g.release(bf16, 1.0), Catch::Contains("not float32 or float64"));
  std::vector<Tensor> f = {torch::zeros({3})};
  CHECK_THROWS_WITH(g.release(f, std::nan("")), Catch::Contains("sensitivity"));
  CHECK_THROWS_WITH(g.release(f, 0.0), Catch::Contains("sensitivity"));
  CHECK(M->ledger().releases().empty());
  // The same stream and release: the same mechanism; the stream with another draw mode: refused.
  CHECK(&M->gaussian_sum("noise", step) == &g);
  CHECK_THROWS(M->gaussian_sum("noise", step, privacy::NoiseDraw::kAuto));
}

TEST_CASE("two mechanisms on one stream draw consecutive noise, never the same twice",
          "[privacy][mechanism]") {
  const privacy::Release s1{"stage 1", 2.0, 0.1, 0}, s2{"stage 2", 0.5, 0.1, 0};
  auto M = test_mechanisms(3, {s1, s2});
  privacy::GaussianSum& a = M->gaussian_sum("noise", s1);
  privacy::GaussianSum& b = M->gaussian_sum("noise", s2);
  std::vector<Tensor> x = {torch::zeros({50})}, y = {torch::zeros({50})};
  a.release(x, 1.0);
  b.release(y, 1.0);
  auto ref = reference_stream(3, "noise");
  CHECK(max_abs(x[0], ref->normal({50}, 2.0)) == 0);
  CHECK(max_abs(y[0], ref->normal({50}, 0.5)) == 0);
  CHECK(M->recorded(s1) == 1);
  CHECK(M->recorded(s2) == 1);
  // A stream's state is restored only before it drew in this process.
  CHECK_THROWS_WITH(b.set_state(a.state()), Catch::Contains("repeat its noise"));
}

TEST_CASE("release_blocks: block i gets sigma sqrt(k) b_i, one release at sigma",
          "[privacy][mechanism]") {
  const privacy::Release step{"train", 1.2, 0.05, 0};
  auto M = test_mechanisms(5, {step});
  std::vector<Tensor> blocks = {torch::zeros({6}), torch::zeros({9})};
  const auto norms = M->gaussian_sum("noise", step).release_blocks(blocks, {1.0, 0.2});
  auto ref = reference_stream(5, "noise");
  const Tensor z0 = ref->normal({6}, 1.2 * std::sqrt(2.0) * 1.0);
  const Tensor z1 = ref->normal({9}, 1.2 * std::sqrt(2.0) * 0.2);
  CHECK(max_abs(blocks[0], z0) == 0);
  CHECK(max_abs(blocks[1], z1) == 0);
  CHECK(norms[0] == Approx(z0.norm().item<double>()));
  CHECK(norms[1] == Approx(z1.norm().item<double>()));
  CHECK(M->recorded(step) == 1);
}

TEST_CASE("restore_ledger: only into an empty ledger, counted against the plan",
          "[privacy][mechanism]") {
  const privacy::Release step{"train", 1.0, 0.1, 4};
  auto M = test_mechanisms(1, {step});
  std::vector<Tensor> f = {torch::zeros({2})};
  privacy::GaussianSum& g = M->gaussian_sum("noise", step);
  g.release(f, 1.0);
  g.release(f, 1.0);
  const nlohmann::json saved = M->ledger().to_json();
  // Into a ledger that already holds releases: refused (a restore never erases one).
  CHECK_THROWS_WITH(M->restore_ledger(saved), Catch::Contains("never replaces"));
  auto fresh = test_mechanisms(1, {step});
  fresh->restore_ledger(saved);
  CHECK(fresh->recorded(step) == 2);
  // The plan still bounds the total: 2 restored + 2 more, then a fifth is refused.
  privacy::GaussianSum& h = fresh->gaussian_sum("noise", step);
  h.release(f, 1.0);
  h.release(f, 1.0);
  CHECK_THROWS(h.release(f, 1.0));
  // A checkpoint claiming more releases than the plan holds, or unplanned ones: refused.
  auto small = test_mechanisms(1, {{"train", 1.0, 0.1, 1}});
  CHECK_THROWS(small->restore_ledger(saved));
  auto other = test_mechanisms(1, {{"stage 2", 1.0, 0.1, 9}});
  CHECK_THROWS_WITH(other->restore_ledger(saved), Catch::Contains("not one the run planned"));
}

TEST_CASE(
    "inherited releases: in the ledger before anything of the run's own; a restore keeps them",
    "[privacy][mechanism]") {
  const privacy::Release src{"source: dp-sft stage 1", 2.0, 0.5, 3}, step{"train", 1.0, 0.1, 4};
  auto M = test_mechanisms(1, {src, step}, {}, {src});
  REQUIRE(M->ledger().releases().size() == 1);
  CHECK(M->recorded(src) == 3);
  const double eps_inherited = M->ledger().spent().epsilon;
  CHECK(eps_inherited > 0);
  std::vector<Tensor> f = {torch::zeros({2})};
  privacy::GaussianSum& g = M->gaussian_sum("noise", step);
  g.release(f, 1.0);
  CHECK(M->ledger().spent().epsilon > eps_inherited);
  const nlohmann::json saved = M->ledger().to_json();
  // Resumed: the checkpoint's ledger (inherited + 1 step) replaces the inherited alone, once.
  auto resumed = test_mechanisms(1, {src, step}, {}, {src});
  resumed->restore_ledger(saved);
  CHECK(resumed->recorded(src) == 3);
  CHECK(resumed->recorded(step) == 1);
  CHECK(resumed->ledger().to_json() == saved);
  // A ledger holding a release of the run's own: refused as before.
  CHECK_THROWS_WITH(M->restore_ledger(saved), Catch::Contains("never replaces"));
  // A checkpoint without the inherited releases (another run's): refused.
  auto plain = test_mechanisms(1, {step});
  plain->gaussian_sum("noise", step).release(f, 1.0);
  auto other = test_mechanisms(1, {src, step}, {}, {src});
  CHECK_THROWS_WITH(other->restore_ledger(plain->ledger().to_json()),
                    Catch::Contains("lacks the inherited release"));
  // An inherited release must be planned, whole.
  CHECK_THROWS(test_mechanisms(1, {step}, {}, {src}));
  CHECK_THROWS(test_mechanisms(1, {{"source: dp-sft stage 1", 2.0, 0.5, 2}, step}, {}, {src}));
}

TEST_CASE("NonPrivate records sigma-0 releases (epsilon inf), draws nothing",
          "[privacy][mechanism]") {
  const privacy::Release step{"train", 0.0, 0.2, 2};
  auto M = test_mechanisms(1, {step});
  privacy::NonPrivate& np = M->non_private(step);
  np.release();
  np.release();
  CHECK_THROWS(np.release());
  REQUIRE(M->ledger().releases().size() == 1);
  CHECK(M->ledger().releases()[0].mechanism() == "non_private");
  CHECK(std::isinf(M->ledger().spent().epsilon));
}
