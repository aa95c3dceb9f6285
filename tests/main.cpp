// Catch2 (v2) main for peal_tests; kept in its own translation unit so it compiles once.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
