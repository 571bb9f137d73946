# Helpers that keep the per-folder CMakeLists short.

# tandem_library(NAME SOURCES ... DEPS ...): a static library whose include root is the project root,
# so every header is included as "runtime/format/gguf.h".
function(tandem_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# tandem_test(NAME SOURCES ... DEPS ... [LABELS ...]): one GoogleTest binary registered with ctest.
# Tests run from the project root; fixtures are found through TANDEM_SOURCE_DIR
# (tests/support/fixtures.h), so a test binary also runs from any other directory.
function(tandem_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE TANDEM_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  set(labels cpu)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  set(environment "")
  if(TANDEM_SANITIZE MATCHES "address")
    # Third-party leaks only, each with its reason (tests/lsan.supp).
    set(environment "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/lsan.supp")
  endif()
  gtest_discover_tests(${name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                       PROPERTIES LABELS "${labels}" ENVIRONMENT "${environment}"
                       DISCOVERY_TIMEOUT 60)
endfunction()

# tandem_fuzzer(NAME SOURCES ... DEPS ...): a libFuzzer target, built only with TANDEM_FUZZ=ON (clang).
function(tandem_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT TANDEM_FUZZ)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()
