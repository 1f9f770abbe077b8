#include "core/util/system.hpp"

#include <fstream>

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <dlfcn.h>
#include <link.h>
#include <malloc.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <unistd.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <limits>
#include <thread>

#include "core/util/error.hpp"

namespace dpft {

std::string torch_version() { return TORCH_VERSION; }
int torch_threads() { return at::get_num_threads(); }
// OpenBLAS keeps its own pool, sized at load time from OPENBLAS_NUM_THREADS or OMP_NUM_THREADS,
// else every core; at::set_num_threads does not touch it. Beside a busy core its spinning threads
// made a 64 x 50,257 x 64 product ~40x slower (docs/BENCHMARKS.md), so --threads caps both.
void set_torch_threads(int n) {
  at::set_num_threads(n);
  set_blas_threads(n);
}
int default_thread_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}
bool cuda_available() { return torch::cuda::is_available(); }
int cuda_device_count() { return static_cast<int>(torch::cuda::device_count()); }

namespace {
int collect_blas(struct dl_phdr_info* info, size_t, void* data) {
  auto* found = static_cast<std::string*>(data);
  std::string name = info->dlpi_name ? info->dlpi_name : "";
  auto base = std::filesystem::path(name).filename().string();
  if (base.rfind("libblas.so", 0) == 0 || (found->empty() && base.rfind("libopenblas", 0) == 0)) {
    std::error_code ec;
    auto real = std::filesystem::canonical(name, ec);
    *found = ec ? name : real.string();
  }
  return 0;
}
}  // namespace

BlasInfo blas_info() {
  BlasInfo b;
  dl_iterate_phdr(collect_blas, &b.library);
  using ConfigFn = const char* (*)();
  if (auto fn = reinterpret_cast<ConfigFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) b.config = fn();
  // The generic libblas.so.3 must itself be OpenBLAS's; a loaded libopenblas alone (LAPACK) is
  // not enough, since sgemm would still resolve to reference BLAS.
  b.openblas = b.library.find("openblas") != std::string::npos;
  return b;
}

void warn_if_slow_blas() {
  BlasInfo b = blas_info();
  // No generic libblas.so loaded: a LibTorch with its BLAS built in (PyTorch wheels link MKL
  // statically) is fast; only say so when its build config names no optimised BLAS either.
  if (b.library.empty()) {
    const std::string cfg = at::show_config();
    if (cfg.find("BLAS_INFO=mkl") != std::string::npos ||
        cfg.find("BLAS_INFO=open") != std::string::npos)
      return;
  }
  if (!b.openblas)
    spdlog::warn("LibTorch's BLAS is '{}', not OpenBLAS: matrix products will run ~20x slower. "
                 "Install libopenblas0-pthread (scripts/setup.sh does) and select it with "
                 "`update-alternatives --config libblas.so.3-x86_64-linux-gnu`.",
                 b.library.empty() ? "unknown" : b.library);
}

int other_runnable() {
  // /proc/loadavg's fourth field is "runnable/total" scheduling entities, this process (single-
  // threaded at start-up) included. The one-minute average would also count a run that has just
  // finished (a sweep's previous run), so three snapshots 20 ms apart, the smallest kept.
  int least = -1;
  for (int i = 0; i < 3; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in("/proc/loadavg");
    double one = 0, five = 0, fifteen = 0;
    std::string running;
    if (!(in >> one >> five >> fifteen >> running)) return -1;
    const int r = std::atoi(running.substr(0, running.find('/')).c_str());
    least = least < 0 ? r : std::min(least, r);
  }
  return std::max(0, least - 1);
}

bool cores_taken(int threads, int others, int cores) {
  return threads > 1 && others >= 0 && others > cores - threads;
}

void warn_if_busy(int threads) {
  if (threads <= 1) return;
  const int cores = default_thread_count();
  const int others = other_runnable();
  if (!cores_taken(threads, others, cores)) return;
  spdlog::warn(
      "the machine is busy ({} other runnable threads on {} cores) and this process runs {} "
      "threads: spinning OpenMP and OpenBLAS threads then wait on preempted ones, and small "
      "matrix products slow down many times (docs/BENCHMARKS.md, 'The BART generator's DP "
      "step'). Pass --threads with the number of idle cores.",
      others, cores, threads);
}

int blas_threads() {
  using GetFn = int (*)();
  auto fn = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  return fn ? fn() : 0;
}

void set_blas_threads(int n) {
  using SetFn = void (*)(int);
  if (auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) fn(n);
}

namespace {
const char* g_malloc_policy = "unset";
}  // namespace

MallocPolicy choose_malloc_policy(const char* dpft_malloc, const char* glibc_tunables) {
  const std::string choice = dpft_malloc ? dpft_malloc : "";
  if (choice == "glibc" || choice == "default") return MallocPolicy::kGlibc;
  DPFT_CHECK_AS(ConfigError, choice.empty() || choice == "heap",
                "DPFT_MALLOC='{}' is not a malloc policy: use 'heap' (the default: freed memory "
                "is kept for reuse and returned once resident memory has grown by half) or "
                "'glibc' (glibc's own behaviour; 'default' is its old name)",
                choice);
  if (glibc_tunables && std::string(glibc_tunables).find("glibc.malloc.") != std::string::npos)
    return MallocPolicy::kGlibc;
  return MallocPolicy::kHeap;
}

long resident_bytes() {
  std::ifstream in("/proc/self/statm");
  long size = 0, resident = -1;
  if (!(in >> size >> resident)) return -1;
  return resident * sysconf(_SC_PAGESIZE);
}

bool heap_grown(long resident, long base) {
  constexpr long kMinGrowth = 256L << 20;
  return resident >= 0 && base >= 0 && resident - base >= std::max(kMinGrowth, base / 2);
}

bool HeapWatch::poll() {
  if (!heap_grown(resident_bytes(), base)) return false;
#ifdef __GLIBC__
  malloc_trim(0);
#endif
  base = resident_bytes();
  return true;
}

bool set_heap_mallopts() {
#ifdef __GLIBC__
  // Order matters: M_TRIM_THRESHOLD also turns off glibc's dynamic threshold adjustment.
  return mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max()) == 1 &&
         mallopt(M_MMAP_MAX, 0) == 1;
#else
  return false;
#endif
}

void start_heap_watcher() {
  // Once per process, a forked child included (threads are not inherited).
  static pid_t started_in = 0;
  if (started_in == getpid()) return;
  started_in = getpid();
  // Detached: it holds nothing but malloc's own lock, for the length of a malloc_trim.
  std::thread([] {
    HeapWatch watch{0};
    while (true) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      watch.poll();
    }
  }).detach();
}

MallocPolicy apply_malloc_policy() {
  MallocPolicy p = choose_malloc_policy(std::getenv("DPFT_MALLOC"), std::getenv("GLIBC_TUNABLES"));
  if (p == MallocPolicy::kHeap) {
    if (set_heap_mallopts())
      start_heap_watcher();
    else
      p = MallocPolicy::kGlibc;
  }
  g_malloc_policy = p == MallocPolicy::kHeap ? "heap" : "glibc";
  return p;
}

std::string malloc_policy_name() {
  return g_malloc_policy;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

double peak_rss_mb() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;  // Linux: KiB
}

double available_memory_mb() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib / 1024.0;
  return 0;
}

namespace {
// The current time in `format` (strftime), UTC or local.
std::string format_now(const char* format, bool utc) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  if (utc) gmtime_r(&t, &tm);
  else localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), format, &tm);
  return buf;
}
}  // namespace

std::string iso_time_now() {
  return format_now("%Y-%m-%dT%H:%M:%SZ", true);
}

std::string local_stamp_now() {
  return format_now("%Y%m%d-%H%M%S", false);
}

}  // namespace dpft
