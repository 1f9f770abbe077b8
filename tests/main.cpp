// Catch2 v2 main for dpft_tests: the malloc policy first, as the dpft binary's main sets it
// (core/util/system.hpp; DPFT_MALLOC chooses), so that in-process runs allocate as dpft does.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include "core/util/error.hpp"
#include "core/util/system.hpp"

int main(int argc, char* argv[]) {
  try {
    dpft::apply_malloc_policy();
  } catch (const dpft::Error& e) {
    std::cerr << "dpft_tests: error: " << e.what() << "\n";
    return e.exit_code();
  }
  return Catch::Session().run(argc, argv);
}
