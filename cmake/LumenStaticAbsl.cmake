# Abseil linked statically where its archives are installed (LUMEN_STATIC_ABSL,
# default ON): the distribution's shared build is ~30 libraries of 5 mappings
# each, ~150 of a process's ~214. Every worker is forked from the worker
# template, and fork copies (and exit tears down) each mapping, so fewer
# mappings make each actor's process cheaper (doc/benchmark.md, "Stop 31:
# one-step groups and a statically linked Abseil").
option(LUMEN_STATIC_ABSL "Link Abseil's static archives when they are installed" ON)
if(LUMEN_STATIC_ABSL)
  get_property(_lumen_imported DIRECTORY PROPERTY IMPORTED_TARGETS)
  set(_lumen_static_absl 0)
  foreach(_t IN LISTS _lumen_imported)
    if(NOT _t MATCHES "^absl::")
      continue()
    endif()
    get_target_property(_type ${_t} TYPE)
    if(NOT _type STREQUAL "SHARED_LIBRARY")
      continue()
    endif()
    get_target_property(_configs ${_t} IMPORTED_CONFIGURATIONS)
    foreach(_c IN LISTS _configs)
      get_target_property(_so ${_t} IMPORTED_LOCATION_${_c})
      string(REGEX REPLACE "\\.so(\\.[0-9.]+)?$" ".a" _a "${_so}")
      if(_so AND EXISTS "${_a}")
        set_target_properties(${_t} PROPERTIES IMPORTED_LOCATION_${_c} "${_a}" IMPORTED_SONAME_${_c} "")
        math(EXPR _lumen_static_absl "${_lumen_static_absl} + 1")
      endif()
    endforeach()
  endforeach()
  message(STATUS "Lumen: ${_lumen_static_absl} Abseil libraries linked statically")
endif()
