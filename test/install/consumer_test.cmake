# Run by CTest (test/install/CMakeLists.txt) as a script:
#   cmake --install <build> --prefix T/prefix
#   cmake -S consumer -B T/build -DCMAKE_PREFIX_PATH=T/prefix && cmake --build T/build
#   T/build/lumen_consumer       (prints "lumen consumer: 1 + 2 = 3")
# T is a fresh directory under $TMPDIR (or /tmp), removed at the end.
if(DEFINED ENV{TMPDIR} AND NOT "$ENV{TMPDIR}" STREQUAL "")
  set(root "$ENV{TMPDIR}")
else()
  set(root "/tmp")
endif()
string(RANDOM LENGTH 8 suffix)
set(work "${root}/lumen-install-test-${suffix}")
file(MAKE_DIRECTORY "${work}")

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE "${work}")
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

run("cmake --install" ${CMAKE_COMMAND} --install "${LUMEN_BINARY_DIR}" --prefix "${work}/prefix")
set(launcher "")
if(CMAKE_CXX_COMPILER_LAUNCHER)
  set(launcher "-DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}")
endif()
# A sanitized build's libraries need the sanitizer runtimes at link time.
set(sanitize "")
if(LUMEN_SANITIZE)
  set(sanitize "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined")
endif()
run("configuring the consumer" ${CMAKE_COMMAND} -S "${CONSUMER_SOURCE_DIR}" -B "${work}/build"
    -G "${CMAKE_GENERATOR}" "-DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}"
    "-DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}" ${launcher} ${sanitize}
    "-DCMAKE_PREFIX_PATH=${work}/prefix")
run("building the consumer" ${CMAKE_COMMAND} --build "${work}/build")
run("running the consumer" "${work}/build/lumen_consumer")
file(REMOVE_RECURSE "${work}")
if(NOT last_output MATCHES "lumen consumer: 1 \\+ 2 = 3")
  message(FATAL_ERROR "the consumer printed:\n${last_output}")
endif()
message(STATUS "${last_output}")
