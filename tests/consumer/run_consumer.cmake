# Configure, build and run a consumer project of peal; fail on any error.
# Invoked by ctest (see tests/CMakeLists.txt) as `cmake -D... -P run_consumer.cmake`.
#
#   MODE=install : `cmake --install PEAL_BINARY_DIR --prefix INSTALL_PREFIX`, then build
#                  CONSUMER_SOURCE_DIR (tests/consumer) with find_package(peal) against it.
#   MODE=subdir  : build CONSUMER_SOURCE_DIR (tests/consumer_subdir), which does
#                  add_subdirectory(PEAL_SOURCE_DIR).
# Other inputs: PEAL_SOURCE_DIR, PEAL_VERSION, CONFIG, GENERATOR, GENERATOR_PLATFORM,
# GENERATOR_TOOLSET, MAKE_PROGRAM, CXX_COMPILER, EIGEN3_DIR, CTEST_COMMAND.
cmake_minimum_required(VERSION 3.16)

foreach(_var MODE CONSUMER_SOURCE_DIR CONSUMER_BINARY_DIR PEAL_SOURCE_DIR GENERATOR
             CXX_COMPILER CTEST_COMMAND)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer.cmake: ${_var} must be set")
  endif()
endforeach()

# run(<command...> [WORKING_DIRECTORY dir]): echo the command, run it, stop on failure.
function(run)
  cmake_parse_arguments(PARSE_ARGV 0 _run "" "WORKING_DIRECTORY" "")
  set(_cmd ${_run_UNPARSED_ARGUMENTS})
  set(_wd_args "")
  if(_run_WORKING_DIRECTORY)
    set(_wd_args WORKING_DIRECTORY "${_run_WORKING_DIRECTORY}")
  endif()
  string(REPLACE ";" " " _pretty "${_cmd}")
  message(STATUS "run_consumer: ${_pretty}")
  execute_process(COMMAND ${_cmd} ${_wd_args} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "run_consumer: command failed (${_rc}): ${_pretty}")
  endif()
endfunction()

set(_config_args "")
set(_ctest_config_args "")
set(_build_type_args "")
if(NOT "${CONFIG}" STREQUAL "")
  set(_config_args --config "${CONFIG}")
  set(_ctest_config_args -C "${CONFIG}")
  set(_build_type_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
endif()

set(_generator_args -G "${GENERATOR}")
if(NOT "${GENERATOR_PLATFORM}" STREQUAL "")
  list(APPEND _generator_args -A "${GENERATOR_PLATFORM}")
endif()
if(NOT "${GENERATOR_TOOLSET}" STREQUAL "")
  list(APPEND _generator_args -T "${GENERATOR_TOOLSET}")
endif()
if(NOT "${MAKE_PROGRAM}" STREQUAL "")
  list(APPEND _generator_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()

set(_configure_args
  -S "${CONSUMER_SOURCE_DIR}" -B "${CONSUMER_BINARY_DIR}"
  ${_generator_args}
  "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  ${_build_type_args}
  # Never pick up a peal from the user package registry.
  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(NOT "${EIGEN3_DIR}" STREQUAL "")
  # Use the same Eigen that peal itself was configured with.
  list(APPEND _configure_args "-DEigen3_DIR=${EIGEN3_DIR}")
endif()

# Always start from scratch, so a stale cache can never hide a packaging bug.
file(REMOVE_RECURSE "${CONSUMER_BINARY_DIR}")

if(MODE STREQUAL "install")
  foreach(_var PEAL_BINARY_DIR INSTALL_PREFIX)
    if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
      message(FATAL_ERROR "run_consumer.cmake: ${_var} must be set for MODE=install")
    endif()
  endforeach()
  file(REMOVE_RECURSE "${INSTALL_PREFIX}")
  run("${CMAKE_COMMAND}" --install "${PEAL_BINARY_DIR}" --prefix "${INSTALL_PREFIX}"
      ${_config_args})
  list(APPEND _configure_args
    "-DCMAKE_PREFIX_PATH=${INSTALL_PREFIX}"
    "-DPEAL_EXPECTED_PREFIX=${INSTALL_PREFIX}"
    "-DPEAL_EXPECTED_VERSION=${PEAL_VERSION}")
elseif(MODE STREQUAL "subdir")
  list(APPEND _configure_args "-DPEAL_SOURCE_DIR=${PEAL_SOURCE_DIR}")
else()
  message(FATAL_ERROR "run_consumer.cmake: unknown MODE '${MODE}' (install|subdir)")
endif()

run("${CMAKE_COMMAND}" ${_configure_args})
run("${CMAKE_COMMAND}" --build "${CONSUMER_BINARY_DIR}" ${_config_args})
run("${CTEST_COMMAND}" --output-on-failure --no-tests=error ${_ctest_config_args}
    WORKING_DIRECTORY "${CONSUMER_BINARY_DIR}")
