// The privacy ledger (merging, budget refusal, non-private = inf, JSON round trip) and the
// `dpft account` command (results, every bad-input class, --spec plans).
#include <catch2/catch.hpp>

#include <cmath>

#include "cli/app.hpp"
#include "core/privacy/ledger.hpp"
#include "core/util/error.hpp"
#include "test_util.hpp"

using namespace dpft;
using namespace dpft::privacy;
using Catch::Matchers::Contains;

TEST_CASE("ledger merges consecutive identical releases and computes eps with its accountant", "[ledger]") {
  LedgerOptions o;
  o.accountant = AccountantKind::kRdp;
  o.delta = 1e-5;
  PrivacyLedger l(o);
  CHECK(l.spent().epsilon == 0.0);
  for (int i = 0; i < 10; ++i) l.record({"train", 1.0, 0.01, 1});
  l.record({"histogram", 5.0, 1.0, 1});
  REQUIRE(l.releases().size() == 2);
  CHECK(l.releases()[0].count == 10);
  CHECK(l.releases()[0].mechanism() == "subsampled_gaussian");
  CHECK(l.releases()[1].mechanism() == "gaussian");
  double want = make_accountant("rdp")->epsilon({{1.0, 0.01, 10}, {5.0, 1.0, 1}}, 1e-5).epsilon;
  CHECK(l.spent().epsilon == Approx(want).epsilon(1e-12));
}

TEST_CASE("ledger refuses a plan over budget before any release", "[ledger]") {
  LedgerOptions o;
  o.accountant = AccountantKind::kPrv;
  o.delta = 1e-5;
  o.target_epsilon = 1.0;
  PrivacyLedger l(o);
  CHECK_NOTHROW(l.check_plan({{"train", 2.9, 0.2, 10}}));   // sigma calibrated for eps 1 is ~2.85
  CHECK_THROWS_WITH(l.check_plan({{"train", 1.0, 0.2, 10}}), Contains("more than the target privacy.epsilon = 1"));
  CHECK(l.releases().empty());
}

TEST_CASE("non-private releases: eps is inf, serialised as \"inf\"", "[ledger]") {
  LedgerOptions o;
  o.delta = 1e-5;
  o.target_epsilon = std::numeric_limits<double>::infinity();
  PrivacyLedger l(o);
  l.record({"train", 0.0, 0.1, 5});
  CHECK(std::isinf(l.spent().epsilon));
  auto j = l.to_json();
  CHECK(j["epsilon"] == "inf");
  CHECK(j["releases"][0]["mechanism"] == "non_private");
}

TEST_CASE("ledger JSON round-trips", "[ledger]") {
  LedgerOptions o;
  o.accountant = AccountantKind::kRdp;
  o.delta = 3e-6;
  o.target_epsilon = 4.0;
  PrivacyLedger l(o);
  l.record({"stage1", 1.2, 0.05, 100});
  l.record({"stage2", 0.9, 0.02, 30});
  PrivacyLedger back = PrivacyLedger::from_json(nlohmann::json::parse(l.to_json().dump()));
  CHECK(back.to_json() == l.to_json());
  CHECK_THROWS_AS(PrivacyLedger::from_json({{"accountant", "rdp"}}), InputError);
}

using test::cli;

TEST_CASE("dpft account: sigma for eps, eps for sigma, solving for steps and q", "[ledger][cli]") {
  std::string out;
  REQUIRE(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "0.2", "--steps", "10", "--json"}, &out) == 0);
  auto j = nlohmann::json::parse(out);
  double sigma = j["noise_multiplier"];
  CHECK(j["epsilon"].get<double>() <= 1.0);
  CHECK(j["eps_lower"].get<double>() <= j["eps_estimate"].get<double>());
  // eps for that sigma agrees
  REQUIRE(cli({"account", "--sigma", std::to_string(sigma), "--delta", "1e-5", "--q", "0.2", "--steps", "10", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out)["epsilon"].get<double>() <= 1.0 + 1e-9);
  // dataset/batch sizes and epochs
  REQUIRE(cli({"account", "--sigma", "1", "--delta", "1e-5", "--dataset-size", "1000", "--batch-size", "10",
               "--epochs", "2", "--json", "--accountant", "rdp"}, &out) == 0);
  j = nlohmann::json::parse(out);
  CHECK(j["q"] == 0.01);
  CHECK(j["steps"] == 200);
  REQUIRE(cli({"account", "--eps", "2", "--sigma", "1", "--delta", "1e-5", "--q", "0.01", "--json", "--accountant", "rdp"}, &out) == 0);
  CHECK(nlohmann::json::parse(out)["max_steps"].get<int64_t>() > 100);
  REQUIRE(cli({"account", "--sigma", "1", "--delta", "1e-5", "--q", "1", "--steps", "10", "--accountant", "gaussian"}, &out) == 0);
  CHECK_THAT(out, Contains("epsilon"));
}

TEST_CASE("dpft account: bad input exits 2 naming the flag", "[ledger][cli]") {
  CHECK(cli({"account", "--eps", "0", "--delta", "1e-5", "--q", "0.2", "--steps", "10"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--delta", "1", "--q", "0.2", "--steps", "10"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "1.5", "--steps", "10"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "0", "--steps", "10"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "0.2", "--steps", "0"}) == 2);
  CHECK(cli({"account", "--sigma", "0", "--delta", "1e-5", "--q", "0.2", "--steps", "10"}) == 2);
  CHECK(cli({"account", "--sigma", "-1", "--delta", "1e-5", "--q", "0.2", "--steps", "10"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "0.2", "--dataset-size", "100", "--batch-size", "5", "--steps", "3"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "0.2", "--steps", "3", "--epochs", "1"}) == 2);
  CHECK(cli({"account", "--eps", "1", "--q", "0.2", "--steps", "3"}) == 2);  // no delta
  CHECK(cli({"account", "--eps", "1", "--delta", "1e-5", "--q", "0.2", "--steps", "3", "--accountant", "pld"}) == 2);
  CHECK(cli({"account", "--sigma", "1", "--delta", "1e-5", "--q", "0.2", "--steps", "3", "--accountant", "gaussian"}) == 2);
}

TEST_CASE("dpft account --spec reports a run's plan", "[ledger][cli]") {
  test::TempDir d;
  auto spec = d.write("s.yaml", "privacy:\n  epsilon: 1\nmethod:\n  name: noop\n");
  std::string out;
  REQUIRE(cli({"account", "--spec", spec.string(), "--json"}, &out) == 0);
  auto j = nlohmann::json::parse(out);
  CHECK(j["epsilon"] == 0.0);
  CHECK(j["releases"].empty());
  CHECK(j["method"] == "noop");
}
