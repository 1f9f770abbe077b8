// Catch2 v2 main for dpft_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
