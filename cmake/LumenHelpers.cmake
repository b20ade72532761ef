# One helper pair defines every target (after abseil's absl_cc_library/absl_cc_test).
#
# lumen_cc_library(NAME <name> [SRCS ...] [HDRS_DIR <dir>] [DEPS ...] [PRIVATE_DEPS ...])
#   A static library `<name>` whose public headers live under HDRS_DIR (default:
#   include/ next to the calling CMakeLists.txt).
# lumen_cc_test(NAME <name> SRCS ... [DEPS ...] [INCLUDE_DIRS ...] [DEFINES ...]
#               [BUILD_DEPENDS <target>...] [MAIN <catch|own>] [TIMEOUT <s>]
#               [SKIP_RETURN_CODE <n>] [ENVIRONMENT <VAR=value>...] [LABELS <label>])
#   A Catch2 test binary. MAIN catch (the default) links Catch2's main and
#   registers each test case with CTest as "<name>.<test case>" (through
#   catch_discover_tests); MAIN own links Catch2 without its main (the binary
#   has its own) and registers the binary as one test "<name>". INCLUDE_DIRS
#   and DEFINES are private to the binary; BUILD_DEPENDS are targets built
#   before it (e.g. a program it runs). Every test runs with
#   LUMEN_LOG_LEVEL=warning plus ENVIRONMENT, under TIMEOUT seconds (default
#   300); SKIP_RETURN_CODE is the exit code CTest reports as skipped; LABELS
#   is one CTest label (`ctest -L <label>` runs those tests).

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
    target_compile_options(${L_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${LUMEN_WARNINGS}>)
  else()
    add_library(${L_NAME} INTERFACE)
    target_include_directories(${L_NAME} INTERFACE
      $<BUILD_INTERFACE:${L_HDRS_DIR}> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
    target_link_libraries(${L_NAME} INTERFACE ${L_DEPS})
  endif()
endfunction()

function(lumen_cc_test)
  cmake_parse_arguments(T "" "NAME;MAIN;TIMEOUT;SKIP_RETURN_CODE"
    "SRCS;DEPS;INCLUDE_DIRS;DEFINES;BUILD_DEPENDS;ENVIRONMENT;CASES;LABELS" ${ARGN})
  if(NOT T_MAIN)
    set(T_MAIN catch)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SRCS})
  target_compile_options(${T_NAME} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${LUMEN_WARNINGS}>)
  if(T_INCLUDE_DIRS)
    target_include_directories(${T_NAME} PRIVATE ${T_INCLUDE_DIRS})
  endif()
  if(T_DEFINES)
    target_compile_definitions(${T_NAME} PRIVATE ${T_DEFINES})
  endif()
  if(T_BUILD_DEPENDS)
    add_dependencies(${T_NAME} ${T_BUILD_DEPENDS})
  endif()
  set(environment "LUMEN_LOG_LEVEL=warning" ${T_ENVIRONMENT})
  set(properties TIMEOUT ${T_TIMEOUT} ENVIRONMENT "${environment}")
  if(T_LABELS)
    # ctest -L <label> selects them (e.g. `chaos` for the fault matrix). One
    # label: catch_discover_tests' PROPERTIES cannot carry a list value.
    list(LENGTH T_LABELS n_labels)
    if(n_labels GREATER 1)
      message(FATAL_ERROR "lumen_cc_test(${T_NAME}): one LABELS value, not '${T_LABELS}'")
    endif()
    list(APPEND properties LABELS ${T_LABELS})
  endif()
  if(DEFINED T_SKIP_RETURN_CODE)
    list(APPEND properties SKIP_RETURN_CODE ${T_SKIP_RETURN_CODE})
  endif()
  if(T_MAIN STREQUAL "catch")
    target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} Catch2::Catch2WithMain)
    # --warn NoTests: a test name that selects nothing fails instead of passing.
    catch_discover_tests(${T_NAME} DISCOVERY_MODE PRE_TEST TEST_PREFIX "${T_NAME}."
      EXTRA_ARGS --warn NoTests
      PROPERTIES ${properties})
  elseif(T_MAIN STREQUAL "own")
    target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} Catch2::Catch2)
    if(T_CASES)
      # One CTest test per case: the binary runs with the case's name as its argument.
      foreach(case ${T_CASES})
        add_test(NAME ${T_NAME}.${case} COMMAND ${T_NAME} ${case})
        set_tests_properties(${T_NAME}.${case} PROPERTIES ${properties})
      endforeach()
    else()
      add_test(NAME ${T_NAME} COMMAND ${T_NAME})
      set_tests_properties(${T_NAME} PROPERTIES ${properties})
    endif()
  else()
    message(FATAL_ERROR "lumen_cc_test(${T_NAME}): MAIN is catch or own, not '${T_MAIN}'")
  endif()
endfunction()
