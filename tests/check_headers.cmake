# Checks that every header of a layer compiles alone, and twice (ctest headers_alone_public,
# headers_alone_detail):
#
#   cmake -DPEAL_SOURCE_DIR=<root> -DCXX=<compiler> -DINCLUDES="<dir>|<dir>" -DLAYER=public|detail
#         -P tests/check_headers.cmake
#
# The test TUs share a precompiled header (Eigen, peal.hpp, Catch2; tests/CMakeLists.txt), so
# a header that forgot an #include still builds there; here each header is the only line of
# its TU, included twice (its include guard), `-fsyntax-only` (parse and instantiate, no code:
# about a second a header). detail/angle_exact.hpp is the one header that must not be included
# alone: it has to fail with its own #error, which names detail/angle.hpp.
# hf_config.hpp and the detail/hf_* readers need nlohmann-json: skipped when -DJSON=OFF.
# Fails (exit code 1) listing each header and the compiler's first lines.
cmake_minimum_required(VERSION 3.16)

foreach(_v PEAL_SOURCE_DIR CXX LAYER)
  if(NOT ${_v})
    message(FATAL_ERROR "check_headers.cmake: -D${_v}= is required")
  endif()
endforeach()

if(LAYER STREQUAL "public")
  file(GLOB _headers RELATIVE "${PEAL_SOURCE_DIR}/include" "${PEAL_SOURCE_DIR}/include/peal/*.hpp")
elseif(LAYER STREQUAL "detail")
  file(GLOB _headers RELATIVE "${PEAL_SOURCE_DIR}/include"
    "${PEAL_SOURCE_DIR}/include/peal/detail/*.hpp")
else()
  message(FATAL_ERROR "check_headers.cmake: LAYER is public or detail, not '${LAYER}'")
endif()
list(SORT _headers)

set(_flags -std=c++17 -fsyntax-only -Wall -Wextra -Wpedantic "-I${PEAL_SOURCE_DIR}/include")
string(REPLACE "|" ";" _includes "${INCLUDES}")
foreach(_dir IN LISTS _includes)
  list(APPEND _flags "-isystem" "${_dir}")
endforeach()

set(_tu_dir "${CMAKE_CURRENT_BINARY_DIR}/headers_alone_${LAYER}")
file(MAKE_DIRECTORY "${_tu_dir}")
set(_failed "")
set(_checked 0)
foreach(_h IN LISTS _headers)
  if(JSON STREQUAL "OFF" AND _h MATCHES "(hf_config|detail/hf_)")
    continue()
  endif()
  string(MAKE_C_IDENTIFIER "${_h}" _name)
  set(_tu "${_tu_dir}/${_name}.cpp")
  file(WRITE "${_tu}" "#include <${_h}>\n#include <${_h}>\n")
  execute_process(COMMAND "${CXX}" ${_flags} "${_tu}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  math(EXPR _checked "${_checked} + 1")
  if(_h STREQUAL "peal/detail/angle_exact.hpp")
    if(_rc EQUAL 0 OR NOT _out MATCHES "include <peal/detail/angle.hpp>, not detail/angle_exact.hpp")
      string(APPEND _failed "\n${_h}: compiled alone, or failed without its own #error:\n${_out}")
    endif()
  elseif(NOT _rc EQUAL 0 OR NOT _out STREQUAL "")
    string(SUBSTRING "${_out}" 0 1500 _out)
    string(APPEND _failed "\n${_h}: does not compile alone, warning-free:\n${_out}")
  endif()
endforeach()

if(_failed)
  message(FATAL_ERROR "check_headers.cmake (${LAYER}):${_failed}")
endif()
message(STATUS "check_headers.cmake: ${_checked} ${LAYER} headers compile alone")
