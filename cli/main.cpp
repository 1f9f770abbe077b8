// dpft entry point: signal handlers, then the CLI (cli/app.cpp).
#include "cli/app.hpp"
#include "core/util/signals.hpp"

int main(int argc, char** argv) {
  dpft::install_signal_handlers();
  return dpft::run_cli(argc, argv);
}
