// `dpft version [--json]`: dpft, LibTorch, BLAS and thread facts.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <iostream>

#include "cli/app.hpp"
#include "core/util/git_commit.hpp"
#include "core/util/strings.hpp"
#include "core/util/system.hpp"
#include "dpft/build_info.hpp"

namespace dpft {

void register_version(CLI::App& app, CliContext& ctx) {
  auto json = std::make_shared<bool>(false);
  CLI::App* sub = app.add_subcommand("version", "print versions, BLAS and threads");
  sub->add_flag("--json", *json, "one JSON object");
  sub->callback([json, &ctx] {
    ctx.action = [json] {
      BlasInfo b = blas_info();
      std::vector<std::string> devices = {"cpu"};  // what `device:` may name on this machine
      if (cuda_available())
        for (int i = 0; i < cuda_device_count(); ++i) devices.push_back(fmt::format("cuda:{}", i));
      nlohmann::json j = {{"dpft", build::kVersion},
                          {"git_commit", build::git_commit()},
                          {"build_type", build::kBuildType},
                          {"libtorch", torch_version()},
                          {"threads", torch_threads()},
                          {"blas_threads", blas_threads()},
                          {"malloc", malloc_policy_name()},
                          {"cuda_devices", cuda_device_count()},
                          {"devices", devices},
                          {"blas", b.library},
                          {"openblas", b.openblas},
                          {"blas_config", b.config}};
      if (*json) {
        std::cout << j.dump(2) << "\n";
        return 0;
      }
      std::cout << "dpft " << build::kVersion << " (commit " << build::git_commit() << ", "
                << build::kBuildType << ")\n"
                << "LibTorch " << torch_version() << ", " << torch_threads()
                << " intra-op threads (OpenBLAS " << blas_threads() << "), " << cuda_device_count()
                << " CUDA device(s)\n"
                << "malloc: " << malloc_policy_name() << " (DPFT_MALLOC=heap|glibc)\n"
                << "devices: " << join(devices, ", ") << "\n"
                << "BLAS " << (b.library.empty() ? "unknown" : b.library)
                << (b.openblas ? " (OpenBLAS" + (b.config.empty() ? "" : ": " + b.config) + ")"
                               : " (NOT OpenBLAS: expect ~20x slower matrix products)")
                << "\n";
      return 0;
    };
  });
}

}  // namespace dpft
