// peal version. The top-level CMakeLists.txt reads the three numbers below with a regex
// (file(STRINGS)), so keep each on its own line in the form `#define PEAL_VERSION_X <n>`.
#pragma once

#define PEAL_VERSION_MAJOR 0
#define PEAL_VERSION_MINOR 1
#define PEAL_VERSION_PATCH 0

// "MAJOR.MINOR.PATCH"; tests/test_version.cpp checks it agrees with the numbers above.
#define PEAL_VERSION_STRING "0.1.0"
