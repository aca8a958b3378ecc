# Helpers that keep every module and test declared the same way.

# streamrl_module(NAME SOURCES file.cc... [DEPS module...] [LIBS target...] [TORCH])
# Declares the static library streamrl_NAME. DEPS are other streamrl modules; TORCH links libtorch
# and reuses the shared precompiled header.
function(streamrl_module name)
  cmake_parse_arguments(M "TORCH" "" "SOURCES;DEPS;LIBS" ${ARGN})
  add_library(streamrl_${name} STATIC ${M_SOURCES})
  target_include_directories(streamrl_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_compile_options(streamrl_${name} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  foreach(dep ${M_DEPS})
    target_link_libraries(streamrl_${name} PUBLIC streamrl_${dep})
  endforeach()
  target_link_libraries(streamrl_${name} PUBLIC ${M_LIBS})
  if(M_TORCH)
    target_link_libraries(streamrl_${name} PUBLIC torch)
    target_precompile_headers(streamrl_${name} REUSE_FROM streamrl_pch)
  endif()
endfunction()

# streamrl_test(NAME SOURCES file.cc... DEPS module... [LABEL unit|integration] [TORCH] [RUNS_BINARY])
# One GoogleTest binary, registered as one CTest test with the given label. (One process per
# binary rather than per test case: loading libtorch costs about a second per process.)
# RUNS_BINARY: the test runs the streamrl binary, so that is built first.
function(streamrl_test name)
  cmake_parse_arguments(T "TORCH;RUNS_BINARY" "LABEL" "SOURCES;DEPS" ${ARGN})
  if(NOT T_LABEL)
    set(T_LABEL unit)
  endif()
  add_executable(${name} ${T_SOURCES})
  foreach(dep ${T_DEPS})
    target_link_libraries(${name} PRIVATE streamrl_${dep})
  endforeach()
  # streamrl_testing (tests/CMakeLists.txt): main() and the helpers that run the binary, compiled
  # once for every test binary.
  target_link_libraries(${name} PRIVATE streamrl_testing)
  # The code under test is the libraries' (-O3); the tests' own code is thin, and -O1 compiles it
  # about a fifth faster, which the 2-core CI run needs.
  target_compile_options(${name} PRIVATE -O1)
  target_compile_definitions(${name} PRIVATE STREAMRL_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
                                             STREAMRL_BINARY="$<TARGET_FILE:streamrl>")
  if(T_RUNS_BINARY)
    add_dependencies(${name} streamrl)
  endif()
  if(T_TORCH)
    target_precompile_headers(${name} REUSE_FROM streamrl_pch)
  endif()
  add_test(NAME ${name} COMMAND ${name} --gtest_color=no)
  set_tests_properties(${name} PROPERTIES LABELS ${T_LABEL} TIMEOUT 900)
endfunction()
