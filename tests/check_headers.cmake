# Checks that every header of a layer compiles alone, and twice (ctest headers_alone_public,
# headers_alone_detail):
#
#   cmake -DPEAL_SOURCE_DIR=<root> -DCXX=<compiler> -DINCLUDES="<dir>|<dir>" -DLAYER=public|detail
#         -P tests/check_headers.cmake
#
# The test TUs share a precompiled header (Eigen, peal.hpp, Catch2; tests/CMakeLists.txt), so
# a header that forgot an #include still builds there; here each header is the only line of
# its TU, included twice (its include guard), `-fsyntax-only` (parse and instantiate, no code).
# detail/math/angle_exact.hpp is the one header that must not be included alone: it has to fail with
# its own #error, which names detail/math/angle.hpp.
#
# Eigen/Core, parsed once: most of each TU's second was Eigen/Core (~1.1 s of g++'s ~1.3-2 s).
# A header whose own includes reach Eigen (followed through peal's headers from this file's
# reading of their #include lines) gets a precompiled <Eigen/Core> before it: in any TU that
# header brings Eigen/Core and what Eigen/Core includes, so this hides nothing that compiling
# it alone would show, except an Eigen name used in the header chain before the chain's own
# #include of Eigen. A header that does not reach Eigen is compiled without it, as before.
# hf_config.hpp (and its forwarding header) and the detail/models/hf_* readers need nlohmann-json: skipped when -DJSON=OFF.
# Fails (exit code 1) listing each header and the compiler's first lines.
cmake_minimum_required(VERSION 3.16)

foreach(_v PEAL_SOURCE_DIR CXX LAYER)
  if(NOT ${_v})
    message(FATAL_ERROR "check_headers.cmake: -D${_v}= is required")
  endif()
endforeach()

if(LAYER STREQUAL "public")
  file(GLOB _headers RELATIVE "${PEAL_SOURCE_DIR}/include" "${PEAL_SOURCE_DIR}/include/peal/*.hpp"
    "${PEAL_SOURCE_DIR}/include/peal/presets/*.hpp" "${PEAL_SOURCE_DIR}/include/peal/models/*.hpp")
elseif(LAYER STREQUAL "detail")
  file(GLOB_RECURSE _headers RELATIVE "${PEAL_SOURCE_DIR}/include"
    "${PEAL_SOURCE_DIR}/include/peal/detail/*.hpp")
else()
  message(FATAL_ERROR "check_headers.cmake: LAYER is public or detail, not '${LAYER}'")
endif()
list(SORT _headers)

set(_flags -std=c++17 -Wall -Wextra -Wpedantic "-I${PEAL_SOURCE_DIR}/include")
string(REPLACE "|" ";" _includes "${INCLUDES}")
foreach(_dir IN LISTS _includes)
  list(APPEND _flags "-isystem" "${_dir}")
endforeach()

set(_tu_dir "${CMAKE_CURRENT_BINARY_DIR}/headers_alone_${LAYER}")
file(MAKE_DIRECTORY "${_tu_dir}")

# Which headers reach Eigen through their #include lines (a fixed point over every peal header).
file(GLOB_RECURSE _all RELATIVE "${PEAL_SOURCE_DIR}/include" "${PEAL_SOURCE_DIR}/include/peal/*.hpp")
set(_reaches "")
foreach(_h IN LISTS _all)
  file(STRINGS "${PEAL_SOURCE_DIR}/include/${_h}" _lines REGEX "^[ \t]*#[ \t]*include")
  get_filename_component(_dir "${_h}" DIRECTORY)
  string(MAKE_C_IDENTIFIER "${_h}" _id)
  set(_deps_${_id} "")
  foreach(_l IN LISTS _lines)
    if(_l MATCHES "<(unsupported/)?Eigen/")
      list(APPEND _reaches "${_h}")
    elseif(_l MATCHES "\"([^\"]+)\"")
      get_filename_component(_dep "${_dir}/${CMAKE_MATCH_1}" ABSOLUTE BASE_DIR "/")
      string(REGEX REPLACE "^/" "" _dep "${_dep}")
      list(APPEND _deps_${_id} "${_dep}")
    elseif(_l MATCHES "<(peal/[^>]+)>")
      list(APPEND _deps_${_id} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
endforeach()
set(_changed TRUE)
while(_changed)
  set(_changed FALSE)
  foreach(_h IN LISTS _all)
    if(_h IN_LIST _reaches)
      continue()
    endif()
    string(MAKE_C_IDENTIFIER "${_h}" _id)
    foreach(_dep IN LISTS _deps_${_id})
      if(_dep IN_LIST _reaches)
        list(APPEND _reaches "${_h}")
        set(_changed TRUE)
        break()
      endif()
    endforeach()
  endforeach()
endwhile()

# <Eigen/Core> precompiled with the same flags (if the compiler cannot, the prefix is parsed
# as text: slower, the same result).
file(WRITE "${_tu_dir}/eigen_core.hpp" "#include <Eigen/Core>\n")
execute_process(COMMAND "${CXX}" ${_flags} -x c++-header "${_tu_dir}/eigen_core.hpp"
  -o "${_tu_dir}/eigen_core.hpp.gch" RESULT_VARIABLE _pch_rc OUTPUT_QUIET ERROR_QUIET)
if(NOT _pch_rc EQUAL 0)
  file(REMOVE "${_tu_dir}/eigen_core.hpp.gch")
endif()
set(_failed "")
set(_checked 0)
set(_prefixed 0)
foreach(_h IN LISTS _headers)
  if(JSON STREQUAL "OFF" AND _h MATCHES "(hf_config|detail/models/hf_)")
    continue()
  endif()
  string(MAKE_C_IDENTIFIER "${_h}" _name)
  set(_tu "${_tu_dir}/${_name}.cpp")
  file(WRITE "${_tu}" "#include <${_h}>\n#include <${_h}>\n")
  set(_prefix "")
  if(_h IN_LIST _reaches)
    set(_prefix -include "${_tu_dir}/eigen_core.hpp")
    math(EXPR _prefixed "${_prefixed} + 1")
  endif()
  execute_process(COMMAND "${CXX}" ${_flags} -fsyntax-only ${_prefix} "${_tu}"
    RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  math(EXPR _checked "${_checked} + 1")
  if(_h STREQUAL "peal/detail/math/angle_exact.hpp")
    if(_rc EQUAL 0 OR NOT _out MATCHES "include <peal/detail/math/angle.hpp>, not detail/math/angle_exact.hpp")
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
message(STATUS "check_headers.cmake: ${_checked} ${LAYER} headers compile alone "
  "(${_prefixed} of them with Eigen/Core precompiled before them)")
