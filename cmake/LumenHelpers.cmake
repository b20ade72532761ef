# One helper pair defines every target (after abseil's absl_cc_library/absl_cc_test).
#
# lumen_cc_library(NAME <name> [SRCS ...] [HDRS_DIR <dir>] [DEPS ...] [PRIVATE_DEPS ...])
#   A static library `<name>` whose public headers live under HDRS_DIR (default:
#   include/ next to the calling CMakeLists.txt).
# lumen_cc_test(NAME <name> SRCS ... [DEPS ...] [MAIN <catch|own>])
#   A Catch2 test binary registered with CTest through catch_discover_tests.

set(LUMEN_WARNINGS -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers)

function(lumen_cc_library)
  cmake_parse_arguments(L "" "NAME;HDRS_DIR" "SRCS;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT L_HDRS_DIR)
    set(L_HDRS_DIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  if(L_SRCS)
    add_library(${L_NAME} STATIC ${L_SRCS})
    target_include_directories(${L_NAME} PUBLIC
      $<BUILD_INTERFACE:${L_HDRS_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${L_NAME} PUBLIC ${L_DEPS} PRIVATE ${L_PRIVATE_DEPS})
    target_compile_options(${L_NAME} PRIVATE ${LUMEN_WARNINGS})
  else()
    add_library(${L_NAME} INTERFACE)
    target_include_directories(${L_NAME} INTERFACE
      $<BUILD_INTERFACE:${L_HDRS_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${L_NAME} INTERFACE ${L_DEPS})
  endif()
endfunction()

function(lumen_cc_test)
  cmake_parse_arguments(T "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} Catch2::Catch2WithMain)
  target_compile_options(${T_NAME} PRIVATE ${LUMEN_WARNINGS})
  # --warn NoTests: a test name that selects nothing fails instead of passing.
  catch_discover_tests(${T_NAME} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${T_NAME}."
    EXTRA_ARGS --warn NoTests
    PROPERTIES TIMEOUT 300 ENVIRONMENT "LUMEN_LOG_LEVEL=warning")
endfunction()
