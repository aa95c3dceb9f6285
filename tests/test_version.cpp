// PEAL_VERSION_STRING must spell out the MAJOR.MINOR.PATCH macros of <peal/version.hpp>,
// and CMake's project version (parsed from that header) must agree.
#include <catch2/catch.hpp>
#include <peal/version.hpp>
#include <string>

#define PEAL_TEST_STR_(x) #x
#define PEAL_TEST_STR(x) PEAL_TEST_STR_(x)

TEST_CASE("version string matches the version numbers", "[version]") {
  const std::string from_numbers = PEAL_TEST_STR(PEAL_VERSION_MAJOR) "." PEAL_TEST_STR(
      PEAL_VERSION_MINOR) "." PEAL_TEST_STR(PEAL_VERSION_PATCH);
  CHECK(std::string(PEAL_VERSION_STRING) == from_numbers);
#ifdef PEAL_TEST_CMAKE_VERSION
  CHECK(std::string(PEAL_TEST_CMAKE_VERSION) == from_numbers);
#endif
}
