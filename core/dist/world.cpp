#include "core/dist/world.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include "core/util/error.hpp"
#include "core/util/signals.hpp"

#ifdef DPFT_HAVE_GLOO
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO
#endif
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif

namespace dpft::dist {

namespace {

struct World {
  WorldOptions opts;
#ifdef DPFT_HAVE_GLOO
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
#endif
};

World& the_world() {
  static World w;
  return w;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  DPFT_CHECK_AS(ConfigError, end && *end == '\0' && x >= 0 && x < (1L << 30),
                "environment variable {}={} is not a non-negative integer (data-parallel "
                "launch; see docs/training.md, \"Data parallel\")",
                name, v);
  return static_cast<int>(x);
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

#ifdef DPFT_HAVE_GLOO
std::string first_line(const std::string& s) {
  const size_t n = s.find('\n');
  return n == std::string::npos ? s : s.substr(0, n);
}

void wait_for(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  const World& w = the_world();
  try {
    work->wait(std::chrono::milliseconds(static_cast<int64_t>(w.opts.timeout_s * 1000)));
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format(
        "data parallel: rank {} of {}: {} failed ({}); another rank failed, was killed or did "
        "not answer within {} s (see its log). Continue the run with dpft run --resume RUN_DIR",
        w.opts.rank, w.opts.size, what, first_line(e.what()), w.opts.timeout_s));
  }
}

// Host copies of ts, flattened into one buffer per dtype run (one collective for the list).
torch::Tensor pack(const std::vector<torch::Tensor>& ts) {
  if (ts.size() == 1 && ts[0].device().is_cpu() && ts[0].is_contiguous() && !ts[0].requires_grad())
    return ts[0].view(-1);  // reduced in place; unpack's copy is then a no-op on the same data
  std::vector<torch::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.detach().to(torch::kCPU).reshape(-1));
  return flat.empty() ? torch::zeros({0}) : torch::cat(flat);
}

void unpack(const torch::Tensor& buf, std::vector<torch::Tensor>& ts) {
  int64_t off = 0;
  torch::NoGradGuard ng;
  for (auto& t : ts) {
    const int64_t n = t.numel();
    torch::Tensor src = buf.narrow(0, off, n).view(t.sizes());
    if (!src.is_same(t) && src.data_ptr() != t.data_ptr()) t.copy_(src);
    off += n;
  }
}

// ts in consecutive groups of at most 64 MB (a larger tensor alone): the host copies a
// collective makes stay bounded whatever the model's size. Handles: unpack writes through.
std::vector<std::vector<torch::Tensor>> buckets(const std::vector<torch::Tensor>& ts) {
  constexpr int64_t kBucketBytes = int64_t{64} << 20;
  std::vector<std::vector<torch::Tensor>> out(1);
  int64_t bytes = 0;
  for (const auto& t : ts) {
    const int64_t b = t.numel() * static_cast<int64_t>(t.element_size());
    if (!out.back().empty() && bytes + b > kBucketBytes) out.emplace_back(), bytes = 0;
    out.back().push_back(t);
    bytes += b;
  }
  return out;
}

bool same_dtype(const std::vector<torch::Tensor>& ts) {
  for (const auto& t : ts)
    if (t.scalar_type() != ts.front().scalar_type()) return false;
  return true;
}
#endif

int free_local_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  DPFT_CHECK_AS(RuntimeError, fd >= 0, "--nproc: cannot open a socket: {}", std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  DPFT_CHECK_AS(RuntimeError, ok, "--nproc: cannot find a free local port: {}",
                std::strerror(errno));
  return ntohs(a.sin_port);
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    if (nodelist[end] == '[') ++depth;
    if (nodelist[end] == ']') --depth;
    if (nodelist[end] == ',' && depth == 0) break;
  }
  const std::string first = nodelist.substr(0, end);
  const size_t lb = first.find('[');
  if (lb == std::string::npos) return first;
  // prefix[a-b,c]: the first number of the range list, its zero padding kept.
  size_t stop = first.find_first_of("-,]", lb + 1);
  DPFT_CHECK_AS(ConfigError, stop != std::string::npos && stop > lb + 1,
                "SLURM_JOB_NODELIST={}: cannot read its first host; set MASTER_ADDR", nodelist);
  return first.substr(0, lb) + first.substr(lb + 1, stop - lb - 1);
}

WorldOptions options_from_env() {
  WorldOptions o;
  o.timeout_s = std::getenv("DPFT_DIST_TIMEOUT")
                    ? static_cast<double>(env_int("DPFT_DIST_TIMEOUT", 1800))
                    : o.timeout_s;
  DPFT_CHECK_AS(ConfigError, o.timeout_s >= 1, "DPFT_DIST_TIMEOUT must be at least 1 second");
  if (std::getenv("WORLD_SIZE") || std::getenv("RANK")) {
    // Both or neither: a world without ranks would make every process rank 0 (each adding noise).
    DPFT_CHECK_AS(ConfigError, std::getenv("WORLD_SIZE") && std::getenv("RANK"),
                  "data parallel: {} is set but {} is not; a launcher sets both (torchrun, or "
                  "dpft run --nproc)",
                  std::getenv("RANK") ? "RANK" : "WORLD_SIZE",
                  std::getenv("RANK") ? "WORLD_SIZE" : "RANK");
    o.size = env_int("WORLD_SIZE", 1);
    o.rank = env_int("RANK", 0);
    o.local_rank = env_int("LOCAL_RANK", o.rank);
    o.local_size = env_int("LOCAL_WORLD_SIZE", o.size);
    o.source = std::getenv("DPFT_NPROC_CHILD") ? "nproc" : "torchrun";
  } else if (env_int("SLURM_STEP_NUM_TASKS", 1) > 1) {  // inside srun with several tasks
    o.size = env_int("SLURM_STEP_NUM_TASKS", 1);
    o.rank = env_int("SLURM_PROCID", 0);
    o.local_rank = env_int("SLURM_LOCALID", 0);
    // "4" or "4(x2)" or "4,2": the tasks on this node are at most the first count.
    const std::string per_node = env_str("SLURM_STEP_TASKS_PER_NODE", "1");
    o.local_size = std::max(1, std::atoi(per_node.c_str()));
    o.source = "slurm";
    const std::string nodes = env_str("SLURM_STEP_NODELIST", env_str("SLURM_JOB_NODELIST", ""));
    o.master_addr = env_str("MASTER_ADDR", nodes.empty() ? "127.0.0.1" : first_slurm_host(nodes));
  } else {
    return o;
  }
  if (o.source != "slurm") o.master_addr = env_str("MASTER_ADDR", "127.0.0.1");
  o.master_port = env_int("MASTER_PORT", 29500);
  DPFT_CHECK_AS(ConfigError, o.size >= 1 && o.rank < o.size,
                "data parallel: rank {} is outside a world of {} ranks (check RANK / WORLD_SIZE "
                "or SLURM_PROCID / SLURM_STEP_NUM_TASKS)",
                o.rank, o.size);
  DPFT_CHECK_AS(ConfigError, o.master_port > 0 && o.master_port < 65536,
                "MASTER_PORT={} is not a TCP port", o.master_port);
  return o;
}

void init(const WorldOptions& o) {
  World& w = the_world();
  DPFT_CHECK(w.opts.size == 1, "dist::init called twice");
  if (o.size <= 1) {
    w.opts = o;
    return;
  }
#ifdef DPFT_HAVE_GLOO
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    so.numWorkers = static_cast<size_t>(o.size);
    so.waitWorkers = true;
    so.timeout = timeout;
    // Keys under the launch's id: ranks of another launch that reached this port by accident
    // find none of their keys and time out, instead of joining this world.
    w.store = c10::make_intrusive<c10d::PrefixStore>(
        env_str("DPFT_LAUNCH_ID", "dpft"), c10::make_intrusive<c10d::TCPStore>(o.master_addr, so));
    auto po = c10d::ProcessGroupGloo::Options::create(timeout);
    const std::string ifname = env_str("GLOO_SOCKET_IFNAME", "");
    const bool loopback = o.master_addr.rfind("127.", 0) == 0 || o.master_addr == "localhost";
    po->devices.push_back(!ifname.empty() ? c10d::ProcessGroupGloo::createDeviceForInterface(ifname)
                          : loopback ? c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1")
                                     : c10d::ProcessGroupGloo::createDefaultDevice());
    w.pg = c10::make_intrusive<c10d::ProcessGroupGloo>(w.store, o.rank, o.size, po);
  } catch (const std::exception& e) {
    throw RuntimeError(fmt::format(
        "data parallel: rank {} of {} could not join the world at {}:{} ({}): {}; check "
        "MASTER_ADDR / MASTER_PORT, that every rank started, and GLOO_SOCKET_IFNAME on "
        "multi-node jobs",
        o.rank, o.size, o.master_addr, o.master_port, o.source, first_line(e.what())));
  }
  w.opts = o;
  spdlog::info("data parallel: rank {} of {} ({}; rendezvous {}:{})", o.rank, o.size, o.source,
               o.master_addr, o.master_port);
#else
  throw ConfigError(fmt::format(
      "data parallel: {} ranks asked for ({}), but this dpft was built without Gloo; install "
      "libgloo-dev (scripts/setup.sh) and rebuild, or run one process",
      o.size, o.source));
#endif
}

void shutdown() {
  World& w = the_world();
#ifdef DPFT_HAVE_GLOO
  w.pg.reset();
  w.store.reset();
#endif
  w.opts = WorldOptions();
}

int rank() {
  return the_world().opts.rank;
}
int size() {
  return the_world().opts.size;
}
const WorldOptions& options() {
  return the_world().opts;
}

std::vector<int64_t> shard(const std::vector<int64_t>& rows) {
  const int W = size(), r = rank();
  if (W == 1) return rows;
  std::vector<int64_t> out;
  for (size_t i = static_cast<size_t>(r); i < rows.size(); i += static_cast<size_t>(W))
    out.push_back(rows[i]);
  return out;
}

#ifdef DPFT_HAVE_GLOO
namespace {
// One collective `op` over ts: one call per dtype when they are mixed, else per 64 MB bucket.
template <class Op>
void collective(std::vector<torch::Tensor>& ts, const char* what, const Op& op) {
  if (!same_dtype(ts)) {
    for (auto& t : ts) {
      std::vector<torch::Tensor> one{t};
      collective(one, what, op);
    }
    return;
  }
  for (auto& bucket : buckets(ts)) {
    std::vector<torch::Tensor> buf{pack(bucket)};
    wait_for(op(buf), what);
    unpack(buf[0], bucket);
  }
}
}  // namespace
#endif

void all_reduce_sum(std::vector<torch::Tensor>& ts, const char* what) {
  if (!active() || ts.empty()) return;
#ifdef DPFT_HAVE_GLOO
  collective(ts, what, [](std::vector<torch::Tensor>& b) { return the_world().pg->allreduce(b); });
#endif
}

void broadcast(std::vector<torch::Tensor>& ts, const char* what) {
  if (!active() || ts.empty()) return;
#ifdef DPFT_HAVE_GLOO
  collective(ts, what, [](std::vector<torch::Tensor>& b) {
    c10d::BroadcastOptions bo;
    bo.rootRank = 0;
    return the_world().pg->broadcast(b, bo);
  });
#endif
}

std::string broadcast_string(const std::string& s, const char* what) {
  if (!active()) return s;
  std::vector<torch::Tensor> len{torch::tensor({static_cast<int64_t>(s.size())}, torch::kInt64)};
  broadcast(len, what);
  const int64_t n = len[0].item<int64_t>();
  std::vector<torch::Tensor> bytes{torch::zeros({n}, torch::kUInt8)};
  if (is_root() && n > 0) std::memcpy(bytes[0].data_ptr<uint8_t>(), s.data(), s.size());
  broadcast(bytes, what);
  return std::string(reinterpret_cast<const char*>(bytes[0].data_ptr<uint8_t>()),
                     static_cast<size_t>(n));
}

std::vector<int64_t> broadcast_rows(const std::vector<int64_t>& rows, const char* what) {
  if (!active()) return rows;
  std::vector<torch::Tensor> len{torch::tensor({static_cast<int64_t>(rows.size())}, torch::kInt64)};
  broadcast(len, what);
  const int64_t n = len[0].item<int64_t>();
  std::vector<torch::Tensor> t{is_root() ? torch::tensor(rows, torch::kInt64).reshape({n})
                                         : torch::zeros({n}, torch::kInt64)};
  broadcast(t, what);
  const int64_t* p = t[0].data_ptr<int64_t>();
  return std::vector<int64_t>(p, p + n);
}

std::vector<std::string> merge_disjoint(const std::vector<std::string>& texts, const char* what) {
  if (!active()) return texts;
  const int64_t n = static_cast<int64_t>(texts.size());
  // Lengths first (per entry, summed over ranks), then the bytes at their offsets.
  std::vector<torch::Tensor> len{torch::zeros({n * size()}, torch::kInt64)};
  int64_t* l = len[0].data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) l[i * size() + rank()] = static_cast<int64_t>(texts[i].size());
  all_reduce_sum(len, what);
  int64_t total = 0;
  for (int64_t j = 0; j < len[0].numel(); ++j) total += l[j];
  std::vector<torch::Tensor> bytes{torch::zeros({total}, torch::kUInt8)};
  uint8_t* p = bytes[0].data_ptr<uint8_t>();
  int64_t off = 0;
  for (int64_t j = 0; j < len[0].numel(); ++j) {  // entry j / W, from rank j % W
    if (j % size() == rank() && l[j] > 0) std::memcpy(p + off, texts[j / size()].data(), l[j]);
    off += l[j];
  }
  all_reduce_sum(bytes, what);
  std::vector<std::string> out(texts.size());
  off = 0;
  for (int64_t j = 0; j < len[0].numel(); ++j) {
    out[j / size()].append(reinterpret_cast<const char*>(p + off), static_cast<size_t>(l[j]));
    off += l[j];
  }
  return out;
}

void agree(const std::string& value, const char* what, const std::string& why) {
  if (!active()) return;
  const bool same = broadcast_string(value, what) == value;
  std::vector<torch::Tensor> differs{torch::zeros({size()}, torch::kInt64)};
  differs[0][rank()] = same ? 0 : 1;
  all_reduce_sum(differs, what);
  std::string ranks;
  for (int r = 0; r < size(); ++r)
    if (differs[0][r].item<int64_t>() != 0)
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty()) throw ConfigError(fmt::format("data parallel: rank(s) {} {}", ranks, why));
}

void barrier(const char* what) {
  if (!active()) return;
  std::vector<torch::Tensor> one{torch::zeros({1})};
  all_reduce_sum(one, what);  // a barrier that honours the same timeout and error message
}

int launch_local(int nproc, const std::vector<std::string>& args, double timeout_s) {
  DPFT_CHECK_AS(ConfigError, nproc >= 1 && nproc <= 1024, "--nproc {}: give 1 to 1024", nproc);
  DPFT_CHECK_AS(ConfigError, !std::getenv("WORLD_SIZE") && env_int("SLURM_STEP_NUM_TASKS", 1) <= 1,
                "--nproc: this process already belongs to a launched world of several ranks "
                "(WORLD_SIZE, or SLURM_STEP_NUM_TASKS > 1); give either --nproc or a launcher, "
                "not both");
  ::signal(SIGCHLD, SIG_DFL);  // an inherited SIG_IGN would reap the ranks before waitpid
  const std::string launch_id =
      fmt::format("dpft-{}-{}", static_cast<long>(::getpid()),
                  std::chrono::steady_clock::now().time_since_epoch().count());
  const int port = free_local_port();
  std::vector<pid_t> pids(static_cast<size_t>(nproc), -1);
  std::vector<int> codes(static_cast<size_t>(nproc), -1);
  const pid_t parent = ::getpid();
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = ::fork();
    DPFT_CHECK_AS(RuntimeError, pid >= 0, "--nproc: fork failed: {}", std::strerror(errno));
    if (pid == 0) {
      ::setpgid(0, 0);                     // a terminal's Ctrl-C reaches the parent only;
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // it forwards it once. A dead parent stops us.
      if (::getppid() != parent) ::_exit(143);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("DPFT_NPROC_CHILD", "1", 1);
      ::setenv("DPFT_LAUNCH_ID", launch_id.c_str(), 1);
      ::setenv("DPFT_DIST_TIMEOUT", std::to_string(static_cast<long>(timeout_s)).c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "dpft: --nproc: cannot start rank %d: %s\n", r, std::strerror(errno));
      ::_exit(kExitRuntime);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  spdlog::info("--nproc {}: started ranks 0-{} (rendezvous 127.0.0.1:{})", nproc, nproc - 1, port);
  using Clock = std::chrono::steady_clock;
  int alive = nproc;
  bool forwarded = false;
  std::optional<Clock::time_point> failed_at;
  int stage = 0;  // after a failure: 0 wait, 1 SIGTERM sent, 2 SIGKILL sent
  double grace = timeout_s + 30;  // a failed rank's peers end on their own within the timeout
  auto signal_alive = [&](int sig) {
    for (int r = 0; r < nproc; ++r)
      if (codes[static_cast<size_t>(r)] < 0) ::kill(pids[static_cast<size_t>(r)], sig);
  };
  while (alive > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno == ECHILD) break;  // nothing left to wait for
    if (pid > 0) {
      for (int r = 0; r < nproc; ++r) {
        if (pids[static_cast<size_t>(r)] != pid) continue;
        const int code = WIFEXITED(status)     ? WEXITSTATUS(status)
                         : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                               : kExitRuntime;
        codes[static_cast<size_t>(r)] = code;
        --alive;
        if (code != 0 && !failed_at) {
          failed_at = Clock::now();
          // After a forwarded Ctrl-C the others get a short grace, not the whole timeout.
          if (interrupted())
            grace = std::min(grace, 30.0);
          else
            spdlog::error(
                "--nproc: rank {} ended with exit code {}{}; the other ranks stop at "
                "their next collective",
                r, code, WIFSIGNALED(status) ? " (killed by a signal)" : "");
        }
      }
      continue;
    }
    if (interrupted() && !forwarded) {
      signal_alive(interrupt_signal());
      forwarded = true;
    }
    if (failed_at) {
      const double waited = std::chrono::duration<double>(Clock::now() - *failed_at).count();
      if (stage == 0 && waited > grace) signal_alive(SIGTERM), stage = 1;
      if (stage == 1 && waited > grace + 60) signal_alive(SIGKILL), stage = 2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (codes[0] != 0) return codes[0];
  for (int c : codes)
    if (c != 0) return c;
  return 0;
}

}  // namespace dpft::dist
