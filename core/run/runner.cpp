#include "core/run/runner.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "core/config/ledger_options.hpp"
#include "core/dist/world.hpp"
#include "core/run/run_context.hpp"
#include "core/run/run_dir.hpp"
#include "core/util/atomic_file.hpp"
#include "core/util/clock.hpp"
#include "core/util/error.hpp"
#include "core/util/git_commit.hpp"
#include "core/util/log.hpp"
#include "core/util/sha256.hpp"
#include "core/util/signals.hpp"
#include "core/util/strings.hpp"
#include "core/util/system.hpp"
#include "dpft/build_info.hpp"

namespace dpft {

nlohmann::json base_manifest(const Spec& spec, const std::string& command_line) {
  BlasInfo b = blas_info();
  return {{"schema", kManifestSchema},
          {"dpft_version", build::kVersion},
          {"git_commit", build::git_commit()},
          {"build_type", build::kBuildType},
          {"libtorch_version", torch_version()},
          {"blas", {{"library", b.library}, {"openblas", b.openblas}, {"config", b.config}}},
          {"device", spec.device},
          {"threads", torch_threads()},
          {"malloc", malloc_policy_name()},
          {"world_size", dist::size()},
          {"host", host_name()},
          {"seed", spec.seed},
          {"command_line", command_line}};
}

namespace {

nlohmann::json identity(const Spec& spec, const RunDir& dir) {
  nlohmann::json id = {{"name", spec.name},
                       {"run_id", dir.run_id()},
                       {"method", spec.method.name},
                       {"label", !spec.label.empty()          ? spec.label
                                 : !spec.method.label.empty() ? spec.method.label
                                                              : spec.method.name},
                       {"dataset", spec.data.train.path},
                       {"model", spec.model.path.empty() ? "embedded-default" : spec.model.path},
                       {"seed", spec.seed},
                       {"config_hash", config_hash(spec)}};
  // A labelled private set's label column (which task a classifier's run is, for reports).
  if (!spec.data.train.label_column.empty()) id["label_column"] = spec.data.train.label_column;
  if (!spec.data.train.name.empty()) id["dataset_name"] = spec.data.train.name;
  return id;
}

// The lock a resumed run started with; InputError when it is missing or unreadable (its budget
// could not be checked).
nlohmann::json read_privacy_lock(const std::string& run_dir) {
  const std::filesystem::path p = std::filesystem::path(run_dir) / kPrivacyLockFile;
  if (!std::filesystem::exists(p))
    throw InputError(fmt::format(
        "--resume {}: refused: the run has no {} (an older dpft started it, or the file was "
        "removed), so the budget it started with cannot be checked; start a new run",
        run_dir, kPrivacyLockFile));
  nlohmann::json j = nlohmann::json::parse(read_file(p), nullptr, false);
  if (!j.is_object() || j.value("schema", "") != kPrivacyLockSchema || !j.contains("settings") ||
      !j["settings"].is_object() || !j.contains("run_nonce") || !j["run_nonce"].is_string())
    throw InputError(fmt::format(
        "--resume {}: refused: {} is damaged (not a {} object); the budget the run started "
        "with cannot be checked; start a new run",
        run_dir, p.string(), kPrivacyLockSchema));
  return j;
}

// The run's private randomness (core/privacy/randomness.hpp): rank 0 holds the key.
privacy::PrivateRandomness run_randomness(const Spec& spec, const RunDir& dir, bool resume) {
  try {
    return privacy::PrivateRandomness::for_run(spec.privacy.secure_noise, spec.privacy.noise_seed,
                                               dir.file(kNoiseKeyFile), resume, dist::is_root());
  } catch (const InputError& e) {
    throw InputError(fmt::format("--resume {}: refused: {}", dir.path().string(), e.what()));
  }
}

}  // namespace

void check_executable(const Spec& spec) {
  if (spec.device != "cpu") {
    const int n = cuda_device_count();
    DPFT_CHECK_AS(ConfigError, cuda_available() && n > 0,
                  "device: {}: no GPU can be used here: this dpft's LibTorch ({}) {}; build "
                  "dpft with scripts/build_cuda.sh on a machine with a GPU, or run on the CPU "
                  "with --set device=cpu",
                  spec.device, torch_version(),
                  n > 0 ? "sees CUDA devices but cannot initialise CUDA"
                        : "has no CUDA or sees no CUDA device");
    const size_t colon = spec.device.find(':');
    const int index = colon == std::string::npos ? 0 : std::stoi(spec.device.substr(colon + 1));
    DPFT_CHECK_AS(ConfigError, index < n,
                  "device: {}: there are only {} CUDA device(s) here (cuda:0 to cuda:{})",
                  spec.device, n, n - 1);
  }
  DPFT_CHECK_AS(ConfigError, spec.model.dtype != FloatType::kFloat16 || spec.device != "cpu",
                "model.dtype: float16 needs a GPU (LibTorch's CPU kernels have no float16 "
                "matrix products); use model.dtype: bfloat16 or float32 on the CPU");
}

Spec resumable_here(Spec spec) {
  try {
    check_executable(spec);
    return spec;
  } catch (const ConfigError& e) {
    // Older dpft builds accepted device: cuda and float16 and ran them on the CPU in float32;
    // a run started on a GPU may be resumed on a machine without one. The privacy settings are
    // the same on any device (the lock compares them); only floating-point rounding differs.
    spdlog::warn("{}; resuming this run on the CPU{}", e.what(),
                 spec.model.dtype == FloatType::kFloat16 ? " in float32" : "");
    spec.device = "cpu";
    if (spec.model.dtype == FloatType::kFloat16) spec.model.dtype = FloatType::kFloat32;
    return spec;
  }
}

RunResult run_experiment(const Spec& spec, const RunHooks& hooks, const RunOptions& opts) {
  DPFT_CHECK(hooks.plan && hooks.run, "run_experiment: the method's hooks are missing");
  const WarningCapture warnings;  // for metrics.json's `warnings`
  const bool resume = !opts.resume_dir.empty();
  check_executable(spec);  // a resumed spec went through resumable_here() first
  if (resume) {  // a finished run has nothing to continue
    std::filesystem::path prev = std::filesystem::path(opts.resume_dir) / "metrics.json";
    nlohmann::json m = std::filesystem::exists(prev)
                           ? nlohmann::json::parse(read_file(prev), nullptr, false)
                           : nullptr;
    if (m.is_object() && m.value("status", "") == "ok")
      throw ConfigError(
          fmt::format("run {} already finished (status ok); start a new run instead of resuming it",
                      opts.resume_dir));
  }
  // Load what the method needs and plan its releases, once; refuse a plan over budget before
  // anything is created or released, and a resumed run whose settings changed since it began.
  const RunPlan plan = hooks.plan();
  // The budget's first check: the whole plan, before anything is created or released (its
  // second is at the end, on what the mechanisms recorded).
  if (!resume)
    privacy::PrivacyLedger(privacy::ledger_options(spec.privacy)).check_plan(plan.releases);
  if (dist::active()) {  // every rank must run the same experiment on the same data
    const std::string mine =
        config_hash(spec) + " " +
        make_privacy_lock(spec, plan, "").value("settings", nlohmann::json()).dump();
    dist::agree(mine, "the spec check",
                "resolved another spec or privacy plan than rank 0 (different files, data or "
                "--set on some node?); every rank must see the same spec and data");
  }
  nlohmann::json lock;
  std::string config_sha;  // config.resolved.yaml's SHA-256, kept in manifest.json
  if (resume) {
    lock = read_privacy_lock(opts.resume_dir);
    nlohmann::json now =
        make_privacy_lock(spec, plan, lock.value("run_nonce", std::string()));
    std::vector<std::string> diffs = lock_differences(lock["settings"], now["settings"]);
    if (!diffs.empty())
      throw ConfigError(fmt::format(
          "--resume {}: refused: the privacy settings differ from those the run started with "
          "({}):\n  {}\nA run's budget is fixed when it starts: restore config.resolved.yaml "
          "and the data files, or start a new run with dpft run SPEC",
          opts.resume_dir, kPrivacyLockFile, join(diffs, "\n  ")));
    // Any other setting (train.lr, the model, ...): a resumed run continues the run it started.
    const std::filesystem::path man = std::filesystem::path(opts.resume_dir) / "manifest.json";
    const nlohmann::json old = std::filesystem::exists(man)
                                   ? nlohmann::json::parse(read_file(man), nullptr, false)
                                   : nlohmann::json();
    const std::string want = old.is_object() ? old.value("config_sha256", "") : "";
    config_sha = sha256_file_hex(std::filesystem::path(opts.resume_dir) / "config.resolved.yaml");
    if (!want.empty() && want != config_sha)
      throw InputError(fmt::format(
          "--resume {}: refused: config.resolved.yaml was changed after the run started (its "
          "SHA-256 is not the one in manifest.json); a resumed run continues the run it "
          "started with its settings: restore the file, or start a new run with the changed "
          "spec (dpft run SPEC)",
          opts.resume_dir));
  } else {
    lock = make_privacy_lock(spec, plan, new_run_nonce());
  }
  // Ranks other than 0 write nothing the user sees: their run directory is a scratch one,
  // removed when the run ends (rank 0 owns the real one and its lock).
  const std::filesystem::path scratch =
      dist::is_root()
          ? std::filesystem::path()
          : std::filesystem::temp_directory_path() /
                fmt::format("dpft-rank{}-{}", dist::rank(), static_cast<long>(getpid()));
  struct ScratchGuard {
    std::filesystem::path p;
    ~ScratchGuard() {
      std::error_code ec;
      if (!p.empty()) remove_tree(p, ec);
    }
  } scratch_guard{scratch};
  RunDir dir = !dist::is_root() ? RunDir::create(scratch.string(), spec)
               : resume         ? RunDir::open(opts.resume_dir)
                        : RunDir::create(opts.out_dir.empty() ? spec.output.dir : opts.out_dir,
                                         spec, opts.run_name);
  if (!resume && dist::is_root() && !opts.selection_trial.is_null())
    write_json_atomic(dir.file(kSelectionTrialFile), opts.selection_trial);
  const privacy::PrivateRandomness randomness = run_randomness(spec, dir, resume);
  privacy::Mechanisms mechanisms(privacy::ledger_options(spec.privacy), randomness, plan.releases,
                                 plan.inherited);
  const privacy::PrivacyLedger& ledger = mechanisms.ledger();
  if (!resume) {
    const std::string resolved = spec_to_yaml_string(spec);
    config_sha = sha256_hex(resolved);
    write_file_atomic(dir.file("config.resolved.yaml"), resolved);
    write_json_atomic(dir.file(kPrivacyLockFile), lock);
  }
  if (!randomness.shareable() && dist::is_root())
    spdlog::warn(
        "privacy.noise_seed is set: the noise and batches are reproducible from it, so "
        "anyone who knows it can subtract the noise; this run is labelled '{}' and "
        "dpft export refuses it",
        privacy::kNoiseSeededLabel);
  if (dist::is_root()) add_log_file(dir.file("log.txt"));
  struct LogGuard {
    ~LogGuard() { remove_log_files(); }
  } log_guard;

  nlohmann::json manifest = base_manifest(spec, opts.command_line);
  manifest["start_time"] = iso_time_now();
  manifest["noise"] = randomness.to_json();
  if (resume) manifest["resumed"] = true;
  manifest["config_sha256"] = config_sha;
  manifest["status"] = "running";
  dir.write_manifest(manifest);
  spdlog::info("run {} -> {}", spec.name, dir.path().string());

  nlohmann::json metrics = {
      {"schema", kMetricsSchema}, {"status", "running"}, {"run", identity(spec, dir)}};
  auto t0 = std::chrono::steady_clock::now();
  // A resumed run that fails (a refused resume: a state file missing or altered) leaves the
  // metrics.json and ledger of its last invocation in place: they describe the releases already
  // made. The failure goes to manifest.json, the log and metrics.jsonl.
  auto finish = [&](const std::string& status, int exit_code, const std::string& error) {
    const bool keep_metrics = resume && status == "failed";
    double total = seconds_since(t0);
    metrics["status"] = status;
    nlohmann::json priv = ledger.to_json();  // the ledger's numbers, plus the method's settings
    if (metrics.contains("privacy") && metrics["privacy"].is_object())
      for (auto& [k, v] : metrics["privacy"].items())
        if (!priv.contains(k)) priv[k] = v;
    priv["noise"] = randomness.to_json();
    if (plan.settings.contains("inherited"))  // what the artefacts it builds on embody, and why
      priv["inherited"] = plan.settings["inherited"];
    // The unit epsilon is about (absent: example, one row) and N in units (public, as N is).
    // How many rows the per-user cap left out depends on the users' row counts: non-private.
    const nlohmann::json* units =
        plan.settings.contains("data") && plan.settings["data"].contains("units")
            ? &plan.settings["data"]["units"]
            : nullptr;
    if (units) priv["unit"] = {{"unit", units->at("unit")}, {"count", units->at("count")}};
    metrics["privacy"] = priv;
    if (units && spec.output.non_private_stats)
      metrics[kNonPrivate]["unit_rows_left_out"] = units->at("rows_left_out");
    if (spec.output.non_private_stats) {  // run time and memory follow the realised batch sizes
      nlohmann::json& np = metrics[kNonPrivate];
      np["note"] = kNonPrivateNote;
      np["timing"]["total_s"] = total;
      np["memory"]["peak_rss_mb"] = peak_rss_mb();
    }
    if (!error.empty()) metrics["error"] = error;
    // Every warning the run logged (non-private: some count private rows; export leaves it out).
    if (const std::vector<std::string> w = captured_warnings(); !w.empty()) metrics["warnings"] = w;
    if (!keep_metrics) dir.write_metrics(metrics);
    manifest["end_time"] = iso_time_now();
    manifest["status"] = status;
    manifest["exit_code"] = exit_code;
    if (!error.empty()) manifest["error"] = error;
    dir.write_manifest(manifest);
    dir.event("end", {{"status", status}});
  };

  // Recording a failure must not hide it: if the record cannot be written (a full disk), log
  // that and let the original error propagate.
  auto finish_failed = [&](int exit_code, const std::string& error) {
    try {
      finish("failed", exit_code, error);
    } catch (const std::exception& w) {
      spdlog::error("could not record the failure in {}: {}", dir.path().string(), w.what());
    }
  };

  metrics["privacy"] = ledger.to_json();
  // A run killed outright still leaves a parseable metrics.json: a fresh run's, or the one its
  // last invocation wrote (a resume keeps it until it has something newer to say).
  if (!resume) dir.write_metrics(metrics);
  dir.event("start", {{"method", spec.method.name}, {"seed", spec.seed}});
  RunContext ctx{spec, dir, mechanisms, resume, opts.stop_after, /*stopped=*/false, lock};
  try {
    nlohmann::json block = hooks.run(ctx);
    if (block.is_object()) metrics.update(block);
    // Defence in depth: whatever happened, a DP run that spent more than its target says so
    // (a non-private method, whose every release has sigma 0, reports inf and is labelled so).
    const auto& target = ledger.options().target_epsilon;
    bool dp_run = false;
    for (const privacy::Release& r : ledger.releases()) dp_run |= r.noise_multiplier > 0;
    privacy::EpsilonResult spent = dp_run ? ledger.spent() : privacy::EpsilonResult{};
    if (dp_run && target && std::isfinite(*target) && spent.epsilon > *target * (1 + 1e-9))
      throw RuntimeError(fmt::format(
          "privacy: the run spent epsilon {} (delta {}), over its target privacy.epsilon = {}; "
          "its outputs do not meet the budget it was started with",
          spent.epsilon, spec.privacy.delta, *target));
  } catch (const Error& e) {
    finish_failed(e.exit_code(), e.what());
    throw;
  } catch (const std::exception& e) {
    finish_failed(kExitRuntime, e.what());
    throw;
  }
  RunResult r;
  r.run_dir = dir.path().string();
  if (interrupted() && ctx.finished) {
    r.status = "ok";  // the signal came after every output was complete: nothing to resume
    spdlog::warn("signal {} received after the run finished; its outputs are complete",
                 interrupt_signal());
  } else if (interrupted()) {
    r.status = "interrupted";
    r.exit_code = interrupt_exit_code();
    if (dist::is_root())  // other ranks' directories are scratch
      spdlog::warn(
          "interrupted by signal {}; partial results saved in {}; continue with: dpft "
          "run --resume {}",
          interrupt_signal(), r.run_dir, r.run_dir);
  } else if (ctx.stopped) {
    r.status = "stopped";
    spdlog::info(
        "stopped after {} steps as asked; checkpoint saved; continue with: dpft run "
        "--resume {}",
        opts.stop_after, r.run_dir);
  } else {
    r.status = "ok";
  }
  finish(r.status, r.exit_code, "");
  if (r.status == "ok") {  // nothing resumes a finished run: its key has no further use
    std::error_code ec;
    std::filesystem::remove(dir.file(kNoiseKeyFile), ec);
  }
  if (!ledger.releases().empty()) {
    nlohmann::json p = ledger.to_json();
    auto shown = [](const nlohmann::json& v) {  // 4 significant digits
      return v.is_number() ? fmt::format("{:.4g}", v.get<double>()) : v.dump();
    };
    spdlog::info("privacy: epsilon spent {} (target {}, delta {:.4g}, {} accountant)",
                 shown(p["epsilon"]), shown(p["target_epsilon"]), spec.privacy.delta,
                 privacy::name_of(spec.privacy.accountant));
  }
  if (r.status == "ok") spdlog::info("done: {}/metrics.json", r.run_dir);
  return r;
}

}  // namespace dpft
