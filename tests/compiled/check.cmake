# ctest compiled_mode_bitwise (tests/CMakeLists.txt): runs tests/compiled/kernels.cpp built
# header-only (HEADER_ONLY) and against peal::compiled (COMPILED), compares their output
# files byte for byte, and checks with NM that the compiled build's object files (OBJECTS)
# define no tile driver or encode kernel: those must come from the library.
foreach(_v HEADER_ONLY COMPILED OBJECTS NM WORK_DIR)
  if(NOT DEFINED ${_v})
    message(FATAL_ERROR "check.cmake: -D${_v}=... is required")
  endif()
endforeach()

foreach(_mode HEADER_ONLY COMPILED)
  set(_file "${WORK_DIR}/kernels_${_mode}.bin")
  file(REMOVE "${_file}")
  execute_process(COMMAND "${${_mode}}" "${_file}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_file}")
    message(FATAL_ERROR "check.cmake: ${${_mode}} failed (${_rc})")
  endif()
endforeach()
file(SIZE "${WORK_DIR}/kernels_COMPILED.bin" _bytes)
if(_bytes LESS 100000)
  message(FATAL_ERROR "check.cmake: only ${_bytes} bytes of results written")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" -E compare_files
  "${WORK_DIR}/kernels_HEADER_ONLY.bin" "${WORK_DIR}/kernels_COMPILED.bin" RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "check.cmake: the compiled mode's results differ from header-only's")
endif()

foreach(_obj IN LISTS OBJECTS)
  execute_process(COMMAND "${NM}" -C "${_obj}" OUTPUT_VARIABLE _syms RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "check.cmake: ${NM} ${_obj} failed")
  endif()
  # Defined symbols only (" T " / " W "): the kernels' names appear as undefined references.
  string(REGEX MATCHALL "[^\n]* [TWt] [^\n]*(TileRun<|encode_kernels::run<|linear::run_linear<)[^\n]*"
         _defined "${_syms}")
  if(_defined)
    list(GET _defined 0 _first)
    message(FATAL_ERROR "check.cmake: ${_obj} instantiates a kernel peal::compiled holds: ${_first}")
  endif()
endforeach()
message(STATUS "compiled mode: ${_bytes} bytes of results equal bit for bit; no kernel in the TU")
