# Used by scripts/lint: writes a Makefile (OUT) that compiles every translation
# unit of compile_commands.json (COMPILE_COMMANDS) whose object file is missing
# after the build, i.e. that make skipped because a library it links against
# failed. So one lint run analyses every file, not only those upstream of the
# first failure.
#
#   cmake -DCOMPILE_COMMANDS=build-lint/compile_commands.json -DOUT=unbuilt.mk \
#         [-DLAUNCHER=/usr/bin/ccache] -P cmake/lint_unbuilt.cmake
#
# compile_commands.json leaves out the compiler launcher (ccache): LAUNCHER
# puts it back.
file(READ "${COMPILE_COMMANDS}" json)
string(JSON count LENGTH "${json}")
set(rules "")
set(targets "")
if(count GREATER 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON dir GET "${json}" ${i} directory)
    string(JSON command GET "${json}" ${i} command)
    # The object file: after -o (the Makefile generator writes no "output").
    if(NOT command MATCHES " -o ([^ ]+) ")
      continue()
    endif()
    set(output "${CMAKE_MATCH_1}")
    if(NOT IS_ABSOLUTE "${output}")
      set(output "${dir}/${output}")
    endif()
    if(EXISTS "${output}")
      continue()
    endif()
    string(REPLACE "$" "$$" command "${command}")
    string(APPEND rules "${output}:\n\tcd ${dir} && ${LAUNCHER} ${command}\n")
    string(APPEND targets " ${output}")
  endforeach()
endif()
file(WRITE "${OUT}" "all:${targets}\n.PHONY: all\n${rules}")
