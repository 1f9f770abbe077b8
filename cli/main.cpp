// dpft entry point: the malloc policy (core/util/system.hpp), signal handlers, then the CLI
// (cli/app.cpp).
#include <iostream>

#include "cli/app.hpp"
#include "core/util/error.hpp"
#include "core/util/signals.hpp"
#include "core/util/system.hpp"

int main(int argc, char** argv) {
  try {
    dpft::apply_malloc_policy();  // first: before LibTorch allocates anything large
  } catch (const dpft::Error& e) {
    std::cerr << "dpft: error: " << e.what() << "\n";
    return e.exit_code();
  }
  dpft::install_signal_handlers();
  return dpft::run_cli(argc, argv);
}
