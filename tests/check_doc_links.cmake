# Checks that the documentation cites only files that exist (ctest doc_links).
#
#   cmake -DPEAL_SOURCE_DIR=<repository root> -P tests/check_doc_links.cmake
#
# Scanned: README.md, docs/*.md, bench/README.md, and the code's files (headers, sources,
# tests, benchmarks, examples, scripts, CMake files), whose comments cite paths too. Checked:
#   - every relative markdown link [text](target) of a document, resolved against the linking
#     file's directory (http(s):, mailto: and pure #anchors are skipped; #anchor suffixes dropped);
#   - every backticked repository path, `include/peal/...`, `tests/...`, `bench/...`,
#     `docs/...`, `scripts/...`, `examples/...`, `cmake/...`, `.ci/...` (the leading path
#     token of the span: `tests/test_x.cpp:42` checks tests/test_x.cpp; a glob such as
#     `tests/test_*.cpp` must match at least one file), relative to the repository root;
#   - the same paths written without backticks when they name a file (end in .ext), e.g.
#     "(docs/numerics.md, section 3)"; bare directory-like words ("tests/benchmarks/examples"
#     in prose) are not paths and are left alone.
# Fails (exit code 1) listing file, kind and target of every missing reference.
cmake_minimum_required(VERSION 3.16)

if(NOT PEAL_SOURCE_DIR)
  get_filename_component(PEAL_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
endif()

file(GLOB _docs RELATIVE "${PEAL_SOURCE_DIR}" "${PEAL_SOURCE_DIR}/docs/*.md")
# The code's comments cite repository paths too ("docs/build-cost.md §3", "see
# tests/conformance_checks.cpp"): the same path checks, without the markdown-link one (C++
# lambdas contain "](").
file(GLOB_RECURSE _code RELATIVE "${PEAL_SOURCE_DIR}"
  "${PEAL_SOURCE_DIR}/include/*.hpp" "${PEAL_SOURCE_DIR}/src/*.cpp"
  "${PEAL_SOURCE_DIR}/tests/*.cpp" "${PEAL_SOURCE_DIR}/tests/*.hpp"
  "${PEAL_SOURCE_DIR}/tests/*.cmake" "${PEAL_SOURCE_DIR}/tests/*.txt"
  "${PEAL_SOURCE_DIR}/bench/*.cpp" "${PEAL_SOURCE_DIR}/examples/*.cpp"
  "${PEAL_SOURCE_DIR}/scripts/*.sh" "${PEAL_SOURCE_DIR}/cmake/*" "${PEAL_SOURCE_DIR}/.ci/*")
list(APPEND _code CMakeLists.txt)
list(REMOVE_ITEM _code tests/check_doc_links.cmake)  # its examples above are not citations
set(_files README.md bench/README.md ${_docs} ${_code})
set(_prefix "(include/peal|tests|bench|docs|scripts|examples|cmake|\\.ci)/")
set(_path_chars "[A-Za-z0-9_.*/+-]")
string(ASCII 1 _link)  # marker replacing "](" of markdown links
set(_missing "")
set(_checked 0)

# Does `path` (relative to `base`) exist? Globs must match something.
function(_peal_exists base path out)
  if(path MATCHES "[*?]")
    file(GLOB _m "${base}/${path}")
    if(_m)
      set(${out} TRUE PARENT_SCOPE)
    else()
      set(${out} FALSE PARENT_SCOPE)
    endif()
  elseif(EXISTS "${base}/${path}")
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

foreach(_f IN LISTS _files)
  if(NOT EXISTS "${PEAL_SOURCE_DIR}/${_f}")
    continue()
  endif()
  get_filename_component(_dir "${PEAL_SOURCE_DIR}/${_f}" DIRECTORY)
  file(READ "${PEAL_SOURCE_DIR}/${_f}" _text)
  # Square brackets and semicolons mean something to CMake lists: neutralise them before
  # any MATCHALL result is iterated.
  string(REPLACE ";" " " _text "${_text}")
  string(REPLACE "](" "${_link}" _text "${_text}")
  string(REPLACE "[" " " _text "${_text}")
  string(REPLACE "]" " " _text "${_text}")

  # Markdown links: "](target)" became "<marker>target)" (documents only).
  set(_links "")
  if(_f MATCHES "[.]md$")
    string(REGEX MATCHALL "${_link}[^) \t\r\n]+" _links "${_text}")
  endif()
  foreach(_l IN LISTS _links)
    string(SUBSTRING "${_l}" 1 -1 _target)
    if(_target MATCHES "^(https?|mailto|ftp):" OR _target MATCHES "^#")
      continue()
    endif()
    string(REGEX REPLACE "#.*$" "" _target "${_target}")
    math(EXPR _checked "${_checked} + 1")
    _peal_exists("${_dir}" "${_target}" _ok)
    if(NOT _ok)
      list(APPEND _missing "${_f}: link (${_target})")
    endif()
  endforeach()

  # Backticked spans whose first token is a repository path.
  string(REGEX MATCHALL "`[^`\r\n]+`" _spans "${_text}")
  foreach(_s IN LISTS _spans)
    if(_s MATCHES "^`(${_prefix}${_path_chars}*)")
      set(_p "${CMAKE_MATCH_1}")
      string(REGEX REPLACE "[.]+$" "" _p "${_p}")
      math(EXPR _checked "${_checked} + 1")
      _peal_exists("${PEAL_SOURCE_DIR}" "${_p}" _ok)
      if(NOT _ok)
        list(APPEND _missing "${_f}: backticked path `${_p}`")
      endif()
    endif()
  endforeach()

  # Bare file paths in prose: a path token after a space, "(", or a quote, ending in an
  # extension (span starts are the backtick check's, link targets the link check's).
  string(REGEX MATCHALL "(^|[ \t\n(\"'])${_prefix}${_path_chars}+" _bare "${_text}")
  foreach(_b IN LISTS _bare)
    string(REGEX REPLACE "^[ \t\n(\"']" "" _p "${_b}")
    string(REGEX REPLACE "[.]+$" "" _p "${_p}")
    if(NOT _p MATCHES "[.][A-Za-z0-9]+$")
      continue()
    endif()
    math(EXPR _checked "${_checked} + 1")
    _peal_exists("${PEAL_SOURCE_DIR}" "${_p}" _ok)
    if(NOT _ok)
      list(APPEND _missing "${_f}: path ${_p}")
    endif()
  endforeach()
endforeach()

list(REMOVE_DUPLICATES _missing)
list(LENGTH _missing _n)
if(_n GREATER 0)
  string(REPLACE ";" "\n  " _report "${_missing}")
  message(FATAL_ERROR "doc_links: ${_n} reference(s) to missing files:\n  ${_report}")
endif()
message(STATUS "doc_links: ${_checked} references checked, all exist")
