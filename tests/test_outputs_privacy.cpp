// What a run's outputs reveal: output.non_private_stats, the non_private block, eval sets that
// hold training rows, and `dpft export` (core/run/export.hpp; docs/privacy.md).
#include <catch2/catch.hpp>

#include <set>
#include <sstream>

#include "core/run/export.hpp"
#include "core/util/sha256.hpp"
#include "run_fixture.hpp"

using namespace dpft;
using test::Fixture;

namespace {

std::vector<nlohmann::json> events(const std::string& dir, const std::string& kind) {
  std::vector<nlohmann::json> out;
  for (const auto& e : read_jsonl(fs::path(dir) / "metrics.jsonl"))
    if (e.value("event", "") == kind) out.push_back(e);
  return out;
}

std::set<std::string> files_under(const fs::path& root) {
  std::set<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out.insert(fs::relative(e.path(), root).generic_string());
  return out;
}

const std::vector<std::string> kDp = {"--set", "method.name=dp-sgd", "--set",
                                      "privacy.epsilon=8"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// `dpft ARGS...` as a separate process without --quiet (so the progress lines reach log.txt);
// returns the run directory it printed.
std::string run_binary(const std::vector<std::string>& args, const fs::path& stdout_file) {
  std::string cmd = "'" DPFT_BINARY "'";
  for (const std::string& a : args) {
    std::string q;
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    cmd += " '" + q + "'";
  }
  cmd += " > '" + stdout_file.string() + "' 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string printed = read_file(stdout_file);
  printed = printed.substr(0, printed.find_last_not_of('\n') + 1);
  return printed.substr(printed.find_last_of('\n') + 1);
}

}  // namespace

TEST_CASE("non-private statistics go to the non_private block, and nowhere with the switch off",
          "[train-engine][outputs]") {
  Fixture f;
  test::make_fixture(f);
  std::string out = (f.tmp.path / "runs").string(), on_dir, off_dir;
  auto on = test::run_metrics(f, out, kDp, &on_dir);
  off_dir = run_binary(test::run_args(f, out, with(kDp, {"--set", "output.non_private_stats=false"})),
                       f.tmp.path / "stdout.txt");
  auto off = nlohmann::json::parse(read_file(fs::path(off_dir) / "metrics.json"));
  // On: per-step statistics only inside non_private, never at the top level.
  for (const char* k : {"history", "timing", "memory", "diagnostics"}) {
    CAPTURE(k);
    CHECK(!on.contains(k));
    CHECK(!off.contains(k));
  }
  REQUIRE(on["non_private"]["history"].size() == 6);
  int64_t batch_total = 0;
  for (const auto& h : on["non_private"]["history"]) batch_total += h["batch_size"].get<int64_t>();
  CHECK(batch_total > 0);
  CHECK(on["non_private"]["timing"]["total_s"].get<double>() > 0);
  CHECK(on["non_private"]["memory"]["peak_rss_mb"].get<double>() > 0);
  auto on_steps = events(on_dir, "step");
  REQUIRE(on_steps.size() == 6);
  CHECK(on_steps[0]["non_private"].contains("loss"));
  CHECK(on_steps[0]["non_private"].contains("batch_size"));
  // Off: no statistic of the private batches anywhere: metrics.json, metrics.jsonl, log.txt.
  CHECK(!off.contains("non_private"));
  auto off_steps = events(off_dir, "step");
  REQUIRE(off_steps.size() == 6);
  for (const auto& e : off_steps) {
    std::set<std::string> keys;
    for (const auto& [k, v] : e.items()) keys.insert(k);
    CHECK(keys == std::set<std::string>{"event", "time", "step", "lr"});
  }
  const std::string log = read_file(fs::path(off_dir) / "log.txt");
  CHECK(log.find("train 6/6") != std::string::npos);  // the progress line, without statistics
  CHECK(log.find("|B|") == std::string::npos);
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {  // "loss" only in eval lines (held-out data)
    CAPTURE(line);
    CHECK((line.find("loss") == std::string::npos || line.find("eval") != std::string::npos));
    CHECK(line.find("tokens") == std::string::npos);
  }
  // The statistics never feed back: the same model and the same DP outputs either way.
  CHECK(on["eval"] == off["eval"]);
  CHECK(on["privacy"] == off["privacy"]);
  CHECK(read_file(fs::path(on_dir) / "adapter" / "adapter_model.safetensors") ==
        read_file(fs::path(off_dir) / "adapter" / "adapter_model.safetensors"));
  // Diagnostics measure the true private gradients: refused with the switch off.
  CHECK(test::cli(test::run_args(f, out,
                                 with(kDp, {"--set", "output.non_private_stats=false", "--set",
                                            "method.diagnostics=true"}))) == 2);
}

TEST_CASE("an eval set holding training rows is reported as non-private", "[train-engine][outputs]") {
  Fixture f;
  test::make_fixture(f);
  std::string out = (f.tmp.path / "runs").string(), dir;
  // The eval set is the whole training file: the 24 training rows are among its 400.
  const std::vector<std::string> same = {"--set", "data.eval.path=" + f.train, "--set",
                                         "data.eval.num_samples=0", "--set",
                                         "eval.max_samples=400"};
  auto m = test::run_metrics(f, out, with(kDp, same), &dir);
  CHECK(m["eval"].is_null());
  CHECK(m["non_private"]["eval"]["overlap_with_train"] == 24);
  CHECK(m["non_private"]["eval"]["final"]["loss"].get<double>() > 0);
  for (const auto& e : events(dir, "eval")) {
    CHECK(!e.contains("loss"));
    CHECK(e["non_private"].contains("loss"));
  }
  // Held-out rows only: a DP output again.
  auto held = test::run_metrics(
      f, out, with(kDp, with(same, {"--set", "data.eval.exclude_train=true"})));
  CHECK(held["eval"]["final"]["samples"] == 376);
  CHECK(!held["non_private"].contains("eval"));
  // With non-private statistics off, such an eval set is refused before anything runs.
  CHECK(test::cli(test::run_args(
            f, out, with(kDp, with(same, {"--set", "output.non_private_stats=false"})))) == 2);
}

TEST_CASE("dpft export copies only the DP outputs and names what it left out",
          "[train-engine][outputs]") {
  Fixture f;
  test::make_fixture(f);
  std::string out = (f.tmp.path / "runs").string(), dir;
  // Keyed noise (the fixture seeds it; a seeded run is refused: tests/noise_replay_test.sh).
  auto m = test::run_metrics(f, out, with(kDp, {"--set", "privacy.noise_seed=null"}), &dir);
  CHECK(m["privacy"]["noise"]["mode"] == "keyed");
  CHECK_FALSE(fs::exists(fs::path(dir) / "noise.key"));  // removed when the run finished
  write_file_atomic(fs::path(dir) / "notes.txt", "a file dpft does not know\n");
  const fs::path ex = f.tmp.path / "export";
  REQUIRE(test::cli({"export", dir, "--out", ex.string()}) == 0);
  CHECK(files_under(ex) == std::set<std::string>{"adapter/adapter_config.json",
                                                 "adapter/adapter_model.safetensors",
                                                 "adapter/provenance.json", "config.resolved.yaml",
                                                 "export_manifest.json", "ledger.json",
                                                 "manifest.json", "metrics.json"});
  // The adapter byte for byte; metrics.json without its non_private block and its warnings
  // (they count private rows), nothing else lost.
  CHECK(read_file(ex / "adapter" / "adapter_model.safetensors") ==
        read_file(fs::path(dir) / "adapter" / "adapter_model.safetensors"));
  auto em = nlohmann::json::parse(read_file(ex / "metrics.json"));
  nlohmann::json expect = m;
  expect.erase("non_private");
  CHECK(m.contains("warnings"));  // 24 examples: fewer than 50
  expect.erase("warnings");
  CHECK(em == scrub_export_json(expect));
  CHECK(em["run"]["dataset"] == "<local>/train.csv");  // no absolute local path
  CHECK(em["privacy"] == m["privacy"]);
  // No file of the export names the machine's layout or times the private work.
  const std::string src = fs::canonical(DPFT_SOURCE_DIR).string(), tmp = f.tmp.path.string();
  for (const char* name : {"metrics.json", "manifest.json", "config.resolved.yaml", "ledger.json",
                           "adapter/adapter_config.json", "adapter/provenance.json"}) {
    CAPTURE(name);
    const std::string text = read_file(ex / name);
    CHECK(text.find(src) == std::string::npos);
    CHECK(text.find(tmp) == std::string::npos);
    CHECK(text.find("start_time") == std::string::npos);
    CHECK(text.find("end_time") == std::string::npos);
  }
  CHECK(read_file(fs::path(dir) / "manifest.json").find("start_time") != std::string::npos);
  CHECK(read_file(fs::path(dir) / "config.resolved.yaml").find(tmp) != std::string::npos);
  CHECK(nlohmann::json::parse(read_file(ex / "ledger.json")) == m["privacy"]);
  auto man = nlohmann::json::parse(read_file(ex / "export_manifest.json"));
  CHECK(man["schema"] == "dpft.export/1");
  CHECK(man["privacy"]["epsilon"] == m["privacy"]["epsilon"]);
  CHECK(man["privacy"]["noise"]["mode"] == "keyed");
  CHECK(man["shareable"] == true);
  std::set<std::string> left;
  for (const auto& e : man["left_out"]) left.insert(e["path"].get<std::string>());
  for (const char* k : {"log.txt", "metrics.jsonl", "per_sample.jsonl", "privacy_lock.json",
                        "metrics.json#non_private", "metrics.json#warnings", "notes.txt"}) {
    CAPTURE(k);
    CHECK(left.count(k) == 1);
  }
  for (const auto& e : man["left_out"])
    if (e["path"] == "notes.txt") CHECK(e["class"] == "unclassified");
  // The adapter's provenance travels with it: the run, its data's keyed fingerprint, its
  // releases.
  const auto prov = nlohmann::json::parse(read_file(ex / "adapter" / "provenance.json"));
  const auto ledger_releases = nlohmann::json::parse(read_file(ex / "ledger.json"))["releases"];
  REQUIRE(prov["releases"].size() == ledger_releases.size());
  for (size_t i = 0; i < ledger_releases.size(); ++i)
    for (const char* k : {"label", "noise_multiplier", "sampling_rate", "count"})
      CHECK(prov["releases"][i][k] == ledger_releases[i][k]);
  CHECK(prov["private"] == true);
  CHECK(prov["data"]["files"][0]["name"] == "train.csv");
  CHECK(prov["data"]["files"][0]["fingerprint"].get<std::string>().size() == 64);
  CHECK_FALSE(prov["data"]["files"][0].contains("bytes"));  // a record's length, all but one known
  // No exported file names the private data by their SHA-256: knowing every record but one, its
  // receiver could hash each candidate file and learn the missing record.
  const std::string train_sha = sha256_file_hex(f.train);
  CHECK(prov["data"]["files"][0]["fingerprint"] != train_sha);
  for (const auto& e : fs::recursive_directory_iterator(ex))
    if (e.is_regular_file()) {
      CAPTURE(e.path().string());
      CHECK(read_file(e.path()).find(train_sha) == std::string::npos);
    }
  CHECK(read_file(fs::path(dir) / "privacy_lock.json").find(train_sha) != std::string::npos);
  REQUIRE(man["included"].size() == 7);
  for (const auto& e : man["included"]) {
    const fs::path p = ex / e["path"].get<std::string>();
    CAPTURE(p.string());
    CHECK(e["sha256"] == sha256_file_hex(p));
    CHECK(e["bytes"] == fs::file_size(p));
  }
  // An existing non-empty destination is refused and left alone; an empty one is used.
  CHECK(test::cli({"export", dir, "--out", ex.string()}) == 2);
  CHECK(fs::exists(ex / "export_manifest.json"));
  fs::create_directories(f.tmp.path / "empty");
  CHECK(test::cli({"export", dir, "--out", (f.tmp.path / "empty").string()}) == 0);
  // Nothing DP to share: a non-private method, epsilon inf, an unfinished run, not a run.
  std::string sgd_dir, inf_dir, stopped_dir;
  test::run_metrics(f, out, {"--set", "method.name=sgd"}, &sgd_dir);
  test::run_metrics(f, out, {"--set", "method.name=dp-sgd", "--set", "privacy.epsilon=.inf"},
                    &inf_dir);
  test::run_metrics(f, out, with(kDp, {"--stop-after", "2"}), &stopped_dir);
  int i = 0;
  for (const std::string& d : {sgd_dir, inf_dir, stopped_dir}) {
    CAPTURE(d);
    const fs::path dest = f.tmp.path / fmt::format("refused{}", i++);
    CHECK(test::cli({"export", d, "--out", dest.string()}) == 2);
    CHECK(!fs::exists(dest));
  }
  CHECK(test::cli({"export", f.tmp.path.string(), "--out", (f.tmp.path / "x").string()}) == 3);
  for (const auto& e : fs::directory_iterator(f.tmp.path))  // no temporary left behind
    CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);
}

TEST_CASE("export scrubbing: absolute paths become <local>/name, timing keys go", "[outputs]") {
  CHECK(scrub_path("/home/me/data/train.csv") == "<local>/train.csv");
  CHECK(scrub_path("/home/me/models/tiny/") == "<local>/tiny");
  CHECK(scrub_path("dpft run /x/s.yaml --set data.train.path=/home/u/t.csv --out '/r/o'") ==
        "dpft run <local>/s.yaml --set data.train.path=<local>/t.csv --out '<local>/o'");
  for (const char* kept : {"../shared/data/x.csv", "models/tiny-gpt2", "1/2", "http://h/x", "/",
                           "a / b", "embedded-default"}) {
    CAPTURE(kept);
    CHECK(scrub_path(kept) == kept);
  }
  const nlohmann::json in = {
      {"pe",
       {{"history", {{{"iteration", 1}, {"seconds", 0.2}}}},
        {"generation", {{"seconds_this_invocation", 1.0}, {"samples", 3}}}}},
      {"synthetic", {{"file", "/tmp/run/synthetic/synthetic.jsonl"}, {"tokens_per_s", 9.0}}},
      {"timing", {{"total_s", 3.0}}},
      {"start_time", "t"},
      {"steps", 4}};
  const nlohmann::json want = {
      {"pe", {{"history", {{{"iteration", 1}}}}, {"generation", {{"samples", 3}}}}},
      {"synthetic", {{"file", "<local>/synthetic.jsonl"}}},
      {"timing", nlohmann::json::object()},
      {"steps", 4}};
  CHECK(scrub_export_json(in) == want);
  CHECK(scrub_export_json(in, /*timing=*/false)["pe"]["history"][0].contains("seconds"));
}
