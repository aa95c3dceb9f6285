# ctest peal_tests_shards: the Catch specs of the two ctest shards (tests/CMakeLists.txt,
# peal_tests_suites and peal_tests_others) partition the test cases of peal_tests: every case
# runs in exactly one shard. Run as
#   cmake -DPEAL_TESTS=<peal_tests> -DSUITES=<spec> -DOTHERS=<spec> -P check_shards.cmake
cmake_policy(SET CMP0007 NEW)
foreach(_v PEAL_TESTS SUITES OTHERS)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "check_shards.cmake: -D${_v}= is required")
  endif()
endforeach()

function(_peal_list_cases out)
  execute_process(COMMAND "${PEAL_TESTS}" --list-test-names-only ${ARGN}
    OUTPUT_VARIABLE _text)
  # Catch2 v2 exits with the number of cases listed; each output line is one case's name.
  string(REPLACE ";" "\\;" _text "${_text}")
  string(REPLACE "\n" ";" _names "${_text}")
  list(FILTER _names EXCLUDE REGEX "^$")
  list(SORT _names)
  set(${out} "${_names}" PARENT_SCOPE)
endfunction()

_peal_list_cases(_all)
_peal_list_cases(_suites "${SUITES}")
_peal_list_cases(_others "${OTHERS}")
list(LENGTH _all _n_all)
list(LENGTH _suites _n_suites)
list(LENGTH _others _n_others)
set(_both ${_suites} ${_others})
list(SORT _both)
if(_n_all EQUAL 0 OR NOT _both STREQUAL _all)
  foreach(_name IN LISTS _others)
    list(FIND _suites "${_name}" _at)
    if(_at GREATER -1)
      message(SEND_ERROR "in both shards: ${_name}")
    endif()
  endforeach()
  foreach(_name IN LISTS _all)
    list(FIND _both "${_name}" _at)
    if(_at EQUAL -1)
      message(SEND_ERROR "in neither shard: ${_name}")
    endif()
  endforeach()
  message(FATAL_ERROR "the shards do not partition the ${_n_all} test cases "
                      "(suites ${_n_suites}, others ${_n_others})")
endif()
message(STATUS "${_n_all} test cases: ${_n_suites} in the suites shard, ${_n_others} in the others")
