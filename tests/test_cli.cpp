// The CLI in-process: parsing, dispatch, exit codes, and a full `dpft run` with the noop method.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <thread>

#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "cli/app.hpp"
#include "core/config/spec.hpp"
#include "core/dist/world.hpp"
#include "core/privacy/keystream.hpp"
#include "core/run/runner.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/error.hpp"
#include "core/util/git_commit.hpp"
#include "core/util/system.hpp"
#include "dpft/build_info.hpp"
#include "methods/registry.hpp"
#include "test_util.hpp"

using namespace dpft;
using Catch::Matchers::Contains;

using test::cli;

TEST_CASE("the git commit stamp is the source tree's HEAD at build time", "[cli]") {
  const std::string stamp = build::git_commit();
  test::TempDir d;
  const std::string cmd = std::string("git -C '") + build::kSourceDir +
                          "' rev-parse --short=12 HEAD 2>/dev/null > " +
                          (d.path / "head.txt").string();
  if (std::system(cmd.c_str()) != 0) {  // not a git checkout (e.g. a source tarball)
    CHECK(stamp == std::string("unknown"));
    return;
  }
  std::string head = read_file(d.path / "head.txt");
  head = head.substr(0, head.find('\n'));
  REQUIRE(head.size() == 12);
  // Built from HEAD (a commit made after the build needs a rebuild: cmake --build).
  CHECK((stamp == head || stamp == head + "-dirty"));
  std::string out;
  REQUIRE(cli({"version", "--json"}, &out) == 0);
  CHECK(nlohmann::json::parse(out)["git_commit"] == stamp);
}

TEST_CASE("version prints LibTorch version, BLAS and threads", "[cli]") {
  std::string out;
  REQUIRE(cli({"version", "--json"}, &out) == 0);
  auto j = nlohmann::json::parse(out);
  CHECK_FALSE(j["libtorch"].get<std::string>().empty());
  CHECK(j["threads"].get<int>() >= 1);
  CHECK(j.contains("blas"));
  REQUIRE(cli({"version"}, &out) == 0);
  CHECK_THAT(out, Contains("LibTorch"));
  CHECK_THAT(out, Contains("BLAS"));
}

TEST_CASE("the threads option caps OpenBLAS's pool as well as LibTorch's", "[cli]") {
  const int saved = torch_threads();
  std::string out;
  const int n = saved == 1 ? 2 : 1;
  REQUIRE(cli({"--threads", std::to_string(n), "version", "--json"}, &out) == 0);
  auto j = nlohmann::json::parse(out);
  set_torch_threads(saved);
  CHECK(j["threads"].get<int>() == n);
  if (!j["openblas"].get<bool>()) {
    WARN("skipped: the loaded BLAS is not OpenBLAS");
    return;
  }
  CHECK(j["blas_threads"].get<int>() == n);  // was 2 on a 2-core VM with --threads 1
  CHECK(blas_threads() == saved);
}

TEST_CASE("the malloc policy: heap unless DPFT_MALLOC=glibc or a glibc.malloc tunable",
          "[cli][malloc]") {
  CHECK(choose_malloc_policy(nullptr, nullptr) == MallocPolicy::kHeap);
  CHECK(choose_malloc_policy("", nullptr) == MallocPolicy::kHeap);
  CHECK(choose_malloc_policy("heap", nullptr) == MallocPolicy::kHeap);
  CHECK(choose_malloc_policy("glibc", nullptr) == MallocPolicy::kGlibc);
  CHECK(choose_malloc_policy("default", nullptr) == MallocPolicy::kGlibc);  // the old name
  CHECK(choose_malloc_policy(nullptr, "glibc.pthread.rseq=0") == MallocPolicy::kHeap);
  CHECK(choose_malloc_policy("heap", "glibc.malloc.mmap_threshold=65536") == MallocPolicy::kGlibc);
  CHECK(choose_malloc_policy(nullptr, "glibc.malloc.arena_max=4") == MallocPolicy::kGlibc);
  CHECK_THROWS_AS(choose_malloc_policy("jemalloc", nullptr), ConfigError);
  // The binary applies it first thing and says which; a bad value exits 2 before anything runs.
  test::TempDir d;
  const std::string out = (d.path / "v.json").string();
  auto version = [&](const std::string& env) {
    const std::string cmd = env + " '" DPFT_BINARY "' version --json > '" + out + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    return std::make_pair(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, read_file(out));
  };
  auto [rc, text] = version("env -u DPFT_MALLOC -u GLIBC_TUNABLES");
  REQUIRE(rc == 0);
  CHECK(nlohmann::json::parse(text)["malloc"] == "heap");
  std::tie(rc, text) = version("env -u GLIBC_TUNABLES DPFT_MALLOC=glibc");
  REQUIRE(rc == 0);
  CHECK(nlohmann::json::parse(text)["malloc"] == "glibc");
  std::tie(rc, text) = version("env -u DPFT_MALLOC GLIBC_TUNABLES=glibc.malloc.arena_max=4");
  REQUIRE(rc == 0);
  CHECK(nlohmann::json::parse(text)["malloc"] == "glibc");
  std::tie(rc, text) = version("env DPFT_MALLOC=tcmalloc");
  CHECK(rc == 2);
  CHECK_THAT(text, Contains("DPFT_MALLOC='tcmalloc'"));
}

TEST_CASE("malloc child: page faults of a second 64 MB block", "[.malloc_child]") {
  // Run by second_block_faults in a fresh process; it writes the count to DPFT_TEST_FAULTS_OUT.
  const char* out = std::getenv("DPFT_TEST_FAULTS_OUT");
  REQUIRE(out != nullptr);
  constexpr size_t kBytes = size_t{64} << 20;
  long faults = 0;
  for (int round = 0; round < 2; ++round) {
    struct rusage before {
    }, after{};
    getrusage(RUSAGE_SELF, &before);
    // Volatile stores, page by page: GCC drops a memset into a block that is freed next.
    volatile char* p = static_cast<volatile char*>(std::malloc(kBytes));
    REQUIRE(p != nullptr);
    for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
    std::free(const_cast<char*>(p));
    getrusage(RUSAGE_SELF, &after);
    faults = after.ru_minflt - before.ru_minflt;
  }
  write_file_atomic(out, std::to_string(faults));
}

namespace {
// Minor page faults of the second of two allocate-touch-free rounds of a 64 MB block (above
// glibc's largest mmap threshold, 32 MB), in a fresh dpft_tests process (the hidden case above)
// whose DPFT_MALLOC is `policy`: the policy is process-wide and set at start-up.
long second_block_faults(const std::string& policy) {
  char self[4096];
  const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
  REQUIRE(len > 0);
  self[len] = 0;
  test::TempDir d;
  const std::string out = (d.path / "faults").string();
  const std::string cmd = "env -u GLIBC_TUNABLES DPFT_MALLOC=" + policy +
                          " DPFT_TEST_FAULTS_OUT='" + out + "' '" + self +
                          "' '[malloc_child]' > '" + out + ".log' 2>&1";
  const int rc = std::system(cmd.c_str());
  INFO(read_file(out + ".log"));
  REQUIRE((WIFEXITED(rc) && WEXITSTATUS(rc) == 0));
  return std::stol(read_file(out));
}
}  // namespace

TEST_CASE("under the heap policy a freed 64 MB block is reused without new page faults",
          "[cli][malloc]") {
  // glibc's own policy maps and unmaps the block each time: 16,385 faults of 4 KB pages here.
  CHECK(second_block_faults("glibc") > 10000);
  CHECK(second_block_faults("heap") < 1000);
}

namespace {
// In a forked child under the heap policy's mallopt settings (the policy is process-wide):
// resident MiB after touching a 512 MiB block, after freeing it, and after `release` ran;
// `release` gets the resident bytes so far, may add its own, and returns the child's exit status
// (0: all went as it expected).
std::vector<long> heap_block_residency(const std::function<int(std::vector<long>&)>& release) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!set_heap_mallopts()) _exit(5);
    constexpr size_t kBytes = size_t{512} << 20;
    // Volatile stores, page by page: GCC drops a memset into a block that is freed next.
    volatile char* p = static_cast<volatile char*>(std::malloc(kBytes));
    if (p == nullptr) _exit(3);
    for (size_t i = 0; i < kBytes; i += 4096) p[i] = 1;
    std::vector<long> r = {resident_bytes()};
    std::free(const_cast<char*>(p));
    r.push_back(resident_bytes());
    const int rc = release(r);
    r.push_back(resident_bytes());
    for (long& x : r) x >>= 20;
    const bool sent = write(fds[1], r.data(), r.size() * sizeof(long)) ==
                      static_cast<ssize_t>(r.size() * sizeof(long));
    _exit(sent ? rc : 4);
  }
  close(fds[1]);
  std::vector<long> r(8, -1);
  const ssize_t n = read(fds[0], r.data(), r.size() * sizeof(long));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  INFO("child exit " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  r.resize(n > 0 ? static_cast<size_t>(n) / sizeof(long) : 0);
  return r;
}
}  // namespace

TEST_CASE("the heap policy's free memory goes back to the kernel once resident memory has grown",
          "[cli][malloc]") {
  constexpr long kMiB = 1L << 20;
  CHECK_FALSE(heap_grown(300 * kMiB, 100 * kMiB));  // +200 MiB: under the 256 MiB floor
  CHECK(heap_grown(357 * kMiB, 100 * kMiB));
  CHECK_FALSE(heap_grown(1400 * kMiB, 1000 * kMiB));  // +40 %: under half of the base
  CHECK(heap_grown(1500 * kMiB, 1000 * kMiB));
  CHECK_FALSE(heap_grown(-1, 100 * kMiB));  // unknown
  if (resident_bytes() < 0) {
    WARN("skipped: no /proc/self/statm on this system");
    return;
  }
  // One look, driven by hand from the level before the block: the freed block is kept (glibc's
  // own policy unmaps it at once), the look returns it, a second look finds nothing grown.
  std::vector<long> r = heap_block_residency([](std::vector<long>& r) {
    HeapWatch watch{r[0] - (512L << 20)};
    const bool first = watch.poll();
    r.push_back(resident_bytes());
    const bool second = watch.poll();
    return first && !second ? 0 : 6;
  });
  REQUIRE(r.size() == 4);
  INFO("resident MiB: touched " << r[0] << ", freed " << r[1] << ", looked " << r[2]);
  CHECK(r[1] > r[0] - 16);   // kept after free
  CHECK(r[2] < r[1] - 400);  // returned by the look
  // The watcher thread, started with the freed block resident, returns it within seconds.
  r = heap_block_residency([](std::vector<long>& r) {
    start_heap_watcher();
    for (int i = 0; i < 100 && resident_bytes() > r[1] - (400L << 20); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return 0;
  });
  REQUIRE(r.size() == 3);
  INFO("resident MiB: touched " << r[0] << ", freed " << r[1] << ", then " << r[2]);
  CHECK(r[1] > r[0] - 16);
  CHECK(r[2] < r[1] - 400);
}

TEST_CASE("other_runnable reads /proc/loadavg", "[cli]") {
  if (!std::filesystem::exists("/proc/loadavg")) {
    WARN("skipped: no /proc/loadavg on this system");
    return;
  }
  const int others = other_runnable();
  CHECK(others >= 0);
  CHECK(others < 1000000);
}

TEST_CASE("a busy machine is told apart from an idle one", "[cli]") {
  CHECK(cores_taken(2, 2, 2));  // two jobs on two cores, this run wants both
  CHECK(cores_taken(2, 1, 2));  // one core taken
  CHECK_FALSE(cores_taken(2, 0, 2));
  CHECK_FALSE(cores_taken(1, 5, 2));   // one thread cannot wait on itself
  CHECK_FALSE(cores_taken(8, 7, 16));  // enough idle cores
  CHECK(cores_taken(16, 3, 16));
  CHECK_FALSE(cores_taken(2, -1, 2));  // unknown
}

TEST_CASE("usage errors exit 2", "[cli]") {
  CHECK(cli({}) == 2);              // no subcommand
  CHECK(cli({"frobnicate"}) == 2);  // unknown subcommand
  CHECK(cli({"run"}) == 2);         // missing spec
  CHECK(cli({"run", "x.yaml", "--bogus"}) == 2);
  CHECK(cli({"config", "dump", "--set", "privacy.delta=2"}) == 2);
  CHECK(cli({"version", "--log-level", "loud"}) == 2);
}

TEST_CASE("missing spec file exits 3", "[cli]") {
  CHECK(cli({"run", "/nonexistent/spec.yaml"}) == 3);
  CHECK(cli({"config", "validate", "/nonexistent/spec.yaml"}) == 3);
}

TEST_CASE("config dump merges defaults, file and --set", "[cli]") {
  test::TempDir d;
  auto spec = d.write("s.yaml", "name: dumped\nprivacy:\n  epsilon: 4\n");
  std::string out;
  REQUIRE(cli({"config", "dump", spec.string(), "--set", "train.steps=9"}, &out) == 0);
  YAML::Node n = YAML::Load(out);
  CHECK(n["name"].as<std::string>() == "dumped");     // file
  CHECK(n["privacy"]["epsilon"].as<double>() == 4);   // file
  CHECK(n["train"]["steps"].as<int>() == 9);          // --set
  CHECK(n["privacy"]["delta"].as<double>() == 1e-5);  // default
  REQUIRE(cli({"config", "validate", spec.string()}, &out) == 0);
  CHECK_THAT(out, Contains("ok:"));
}

TEST_CASE("run with noop writes the whole run directory", "[cli]") {
  test::TempDir d;
  auto spec = d.write("s.yaml", "name: smoke\nseed: 3\nmethod:\n  name: noop\n  steps: 3\n");
  std::string out;
  REQUIRE(
      cli({"run", spec.string(), "--out", (d.path / "runs").string(), "--set", "privacy.epsilon=2"},
          &out) == 0);
  fs::path run = fs::path(out.substr(0, out.find('\n')));
  REQUIRE(fs::exists(run));
  CHECK(run.parent_path().filename() == "smoke");

  auto metrics = nlohmann::json::parse(read_file(run / "metrics.json"));
  CHECK(metrics["schema"] == "dpft.metrics/2");
  CHECK(metrics["status"] == "ok");
  CHECK(metrics["run"]["method"] == "noop");
  CHECK(metrics["run"]["seed"] == 3);
  CHECK(metrics["method_result"]["steps_done"] == 3);
  CHECK(metrics["non_private"]["timing"]["total_s"].get<double>() >= 0);
  CHECK(!metrics.contains("timing"));
  CHECK(metrics["privacy"]["epsilon"] == 0.0);  // noop releases nothing
  CHECK(metrics["privacy"]["releases"].empty());
  CHECK(metrics["privacy"]["target_epsilon"] == 2.0);
  CHECK(metrics["privacy"]["delta"] == 1e-5);

  auto manifest = nlohmann::json::parse(read_file(run / "manifest.json"));
  CHECK(manifest["status"] == "ok");
  CHECK(manifest["exit_code"] == 0);
  CHECK_THAT(manifest["command_line"].get<std::string>(), Contains("privacy.epsilon=2"));
  CHECK(manifest.contains("libtorch_version"));
  CHECK(manifest["git_commit"] == build::git_commit());
  CHECK(manifest.contains("start_time"));
  CHECK(manifest.contains("end_time"));

  Spec resolved = load_spec((run / "config.resolved.yaml").string(), {});
  CHECK(*resolved.privacy.epsilon == 2);
  CHECK(resolved.seed == 3);

  auto events = read_jsonl(run / "metrics.jsonl");
  REQUIRE(events.size() == 5);  // start, 3 steps, end
  CHECK(events.front()["event"] == "start");
  CHECK(events[2]["step"] == 2);
  CHECK(events.back()["event"] == "end");
  CHECK(fs::exists(run / "log.txt"));
}

TEST_CASE("dry run writes nothing", "[cli]") {
  test::TempDir d;
  auto spec = d.write("s.yaml", "name: dry\n");
  std::string out;
  REQUIRE(cli({"run", spec.string(), "--dry-run", "--out", (d.path / "runs").string()}, &out) == 0);
  CHECK_THAT(out, Contains("dry run"));
  CHECK_FALSE(fs::exists(d.path / "runs"));
}

TEST_CASE("a spec for a GPU is refused where no GPU can be used, not run on the CPU", "[cli]") {
  test::TempDir d;
  auto spec = d.write("s.yaml", "name: gpu\ndevice: cuda\n");
  const std::string runs = (d.path / "runs").string();
  auto refusal = [&](std::vector<std::string> sets) {
    try {
      check_executable(load_spec(spec.string(), sets));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(cli({"run", spec.string(), "--set", "device=cpu", "--set", "model.dtype=float16", "--out",
             runs}) == 2);  // no float16 kernels on the CPU
  CHECK_THAT(refusal({"device=cpu", "model.dtype=float16"}),
             Contains("float16 needs a GPU") && Contains("bfloat16"));
  CHECK(refusal({"device=cpu"}).empty());
  CHECK(refusal({"device=cpu", "model.dtype=bfloat16"}).empty());
  CHECK_THAT(refusal({"device=cuda:99"}), Contains("cuda:99"));
  if (cuda_available()) {  // a CUDA build on a GPU machine: device: cuda runs
    CHECK(refusal({}).empty());
    return;
  }
  CHECK(cli({"run", spec.string(), "--out", runs}) == 2);
  CHECK(cli({"run", spec.string(), "--dry-run", "--out", runs}) == 2);
  CHECK_FALSE(fs::exists(runs));                           // refused before anything was written
  CHECK(cli({"config", "validate", spec.string()}) == 0);  // valid; only this machine can't run it
  CHECK(cli({"run", spec.string(), "--set", "device=cpu", "--out", runs}) == 0);
  CHECK_THAT(refusal({}), Contains("no GPU can be used here") && Contains("--set device=cpu") &&
                              Contains("scripts/build_cuda.sh"));
}

TEST_CASE("a run an older dpft started with device: cuda resumes on the CPU", "[cli]") {
  // Older builds accepted device: cuda and ran on the CPU; such an interrupted run continues
  // there (with a warning) instead of being stuck behind the new refusal.
  test::TempDir d;
  auto spec = d.write("s.yaml", "name: old\nmethod: {name: noop, steps: 2}\n");
  std::string out;
  REQUIRE(cli({"run", spec.string(), "--out", (d.path / "runs").string()}, &out) == 0);
  fs::path run = fs::path(out.substr(0, out.find('\n')));
  std::string cfg = read_file(run / "config.resolved.yaml");
  REQUIRE(cfg.find("device: cpu") != std::string::npos);
  cfg.replace(cfg.find("device: cpu"), 11, "device: cuda");
  write_file_atomic(run / "config.resolved.yaml", cfg);
  auto m = nlohmann::json::parse(read_file(run / "metrics.json"));
  m["status"] = "interrupted";
  write_file_atomic(run / "metrics.json", m.dump());
  auto man = nlohmann::json::parse(read_file(run / "manifest.json"));
  man.erase("config_sha256");  // older builds kept no hash of the config
  write_file_atomic(run / "manifest.json", man.dump());
  // A finished run has removed its noise key; an interrupted one keeps it.
  CHECK_FALSE(fs::exists(run / "noise.key"));
  privacy::write_run_key(run / "noise.key", privacy::RunKey::generate());
  CHECK(cli({"run", "--resume", run.string()}) == 0);
  CHECK(nlohmann::json::parse(read_file(run / "metrics.json"))["status"] == "ok");
}

TEST_CASE("methods lists the registry", "[cli]") {
  std::string out;
  REQUIRE(cli({"methods"}, &out) == 0);
  CHECK_THAT(out, Contains("noop"));
}

namespace {
// Sets environment variables for one scope and restores what was there.
class EnvScope {
 public:
  EnvScope(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const char* name : kNames) {
      const char* v = std::getenv(name);
      saved_.emplace_back(name, v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& [k, v] : vars) ::setenv(k, v, 1);
  }
  ~EnvScope() {
    for (const auto& [k, v] : saved_)
      if (v)
        ::setenv(k.c_str(), v->c_str(), 1);
      else
        ::unsetenv(k.c_str());
  }

 private:
  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "SLURM_PROCID",
                                           "SLURM_STEP_NUM_TASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_STEP_NODELIST",
                                           "SLURM_JOB_NODELIST",
                                           "SLURM_NTASKS",
                                           "DPFT_DIST_TIMEOUT",
                                           "DPFT_NPROC_CHILD"};
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};
}  // namespace

TEST_CASE("data parallel: the world from torchrun's and Slurm's variables", "[cli][dist]") {
  {
    EnvScope e({});
    dist::WorldOptions o = dist::options_from_env();
    CHECK(o.size == 1);
    CHECK(o.source == "none");
  }
  {
    EnvScope e({{"RANK", "3"},
                {"WORLD_SIZE", "4"},
                {"LOCAL_RANK", "1"},
                {"LOCAL_WORLD_SIZE", "2"},
                {"MASTER_ADDR", "10.0.0.7"},
                {"MASTER_PORT", "29611"},
                {"DPFT_DIST_TIMEOUT", "90"}});
    dist::WorldOptions o = dist::options_from_env();
    CHECK(o.rank == 3);
    CHECK(o.size == 4);
    CHECK(o.local_rank == 1);
    CHECK(o.local_size == 2);
    CHECK(o.master_addr == "10.0.0.7");
    CHECK(o.master_port == 29611);
    CHECK(o.timeout_s == 90);
    CHECK(o.source == "torchrun");
  }
  {  // srun with 8 tasks, 4 per node
    EnvScope e({{"SLURM_PROCID", "5"},
                {"SLURM_STEP_NUM_TASKS", "8"},
                {"SLURM_LOCALID", "1"},
                {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
                {"SLURM_JOB_NODELIST", "gpu[007-008]"}});
    dist::WorldOptions o = dist::options_from_env();
    CHECK(o.rank == 5);
    CHECK(o.size == 8);
    CHECK(o.local_rank == 1);
    CHECK(o.local_size == 4);
    CHECK(o.master_addr == "gpu007");
    CHECK(o.master_port == 29500);
    CHECK(o.source == "slurm");
  }
  {  // a batch script (sbatch, no srun): one process, whatever SLURM_NTASKS says
    EnvScope e({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}});
    CHECK(dist::options_from_env().size == 1);
  }
  {
    EnvScope e({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    CHECK_THROWS_AS(dist::options_from_env(), ConfigError);  // rank outside the world
  }
  {
    EnvScope e({{"RANK", "x"}, {"WORLD_SIZE", "2"}});
    CHECK_THROWS_WITH(dist::options_from_env(), Contains("RANK=x is not a non-negative integer"));
  }
  CHECK(dist::first_slurm_host("node[07-09,12],gpu3") == "node07");
  CHECK(dist::first_slurm_host("a1,b2") == "a1");
  CHECK(dist::first_slurm_host("solo") == "solo");
  CHECK(dist::first_slurm_host("n[3,5]") == "n3");
  // One rank: every collective is a no-op and a shard is the whole batch.
  std::vector<int64_t> rows{4, 8, 15};
  CHECK(dist::shard(rows) == rows);
  std::vector<torch::Tensor> t{torch::ones({2})};
  dist::all_reduce_sum(t, "test");
  CHECK(t[0].sum().item<float>() == 2.0f);
}
