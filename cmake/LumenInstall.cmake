# Install rules: `cmake --install build --prefix P` lays out headers, static
# libraries and a CMake package so that a user's project can do
#
#   find_package(lumen REQUIRED)
#   target_link_libraries(app PRIVATE lumen::lumen)
#
# with CMAKE_PREFIX_PATH=P. Included at the end of the top-level CMakeLists.txt,
# after every target exists. Until the `lumen` target exists, only the headers
# are installed and no package is exported.

include(CMakePackageConfigHelpers)

set(LUMEN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/lumen)

# Headers: the public include trees, and the generated Cap'n Proto headers
# (present once the build has run; OPTIONAL skips the directory if absent).
foreach(dir core/include core/common/include objectstore/include scheduler/include
            train/include)
  if(IS_DIRECTORY ${PROJECT_SOURCE_DIR}/${dir})
    install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
            FILES_MATCHING PATTERN "*.h" PATTERN "*.hpp")
  endif()
endforeach()
install(DIRECTORY ${CMAKE_BINARY_DIR}/core/common/proto_gen/
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        OPTIONAL
        FILES_MATCHING PATTERN "*.h" PATTERN "*.capnp")

# Collects into `out_var` every non-imported target that `target` links,
# directly or transitively (static libraries carry their private deps too).
function(_lumen_collect_internal_deps target out_var)
  set(seen ${${out_var}})
  set(libs)
  foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
    get_target_property(value ${target} ${prop})
    if(value)
      list(APPEND libs ${value})
    endif()
  endforeach()
  foreach(lib IN LISTS libs)
    # Unwrap $<LINK_ONLY:x> and $<BUILD_INTERFACE:x>; skip other expressions.
    string(REGEX REPLACE "^\\$<(LINK_ONLY|BUILD_INTERFACE):(.*)>$" "\\2" lib "${lib}")
    if(lib MATCHES "^\\$<" OR NOT TARGET "${lib}")
      continue()
    endif()
    get_target_property(aliased ${lib} ALIASED_TARGET)
    if(aliased)
      set(lib ${aliased})
    endif()
    get_target_property(imported ${lib} IMPORTED)
    if(imported OR lib IN_LIST seen)
      continue()
    endif()
    list(APPEND seen ${lib})
    set(${out_var} ${seen})
    _lumen_collect_internal_deps(${lib} ${out_var})
    set(seen ${${out_var}})
  endforeach()
  set(${out_var} ${seen} PARENT_SCOPE)
endfunction()

if(TARGET lumen)
  set(LUMEN_EXPORTED_TARGETS lumen)
  foreach(t lumen_common lumen_objectstore lumen_scheduler lumen_train)
    if(TARGET ${t})
      list(APPEND LUMEN_EXPORTED_TARGETS ${t})
    endif()
  endforeach()
  # Any other in-tree library that `lumen` links (lumen_core, ...) must be in
  # the export set too, or the export step fails.
  set(_lumen_deps ${LUMEN_EXPORTED_TARGETS})
  _lumen_collect_internal_deps(lumen _lumen_deps)
  list(REMOVE_DUPLICATES _lumen_deps)
  set(LUMEN_EXPORTED_TARGETS ${_lumen_deps})

  install(TARGETS ${LUMEN_EXPORTED_TARGETS}
          EXPORT lumenTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT lumenTargets
          NAMESPACE lumen::
          DESTINATION ${LUMEN_INSTALL_CMAKEDIR})

  configure_package_config_file(
    ${PROJECT_SOURCE_DIR}/cmake/lumenConfig.cmake.in
    ${CMAKE_BINARY_DIR}/cmake/lumenConfig.cmake
    INSTALL_DESTINATION ${LUMEN_INSTALL_CMAKEDIR})
  write_basic_package_version_file(
    ${CMAKE_BINARY_DIR}/cmake/lumenConfigVersion.cmake
    VERSION ${PROJECT_VERSION}
    COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/cmake/lumenConfig.cmake
                ${CMAKE_BINARY_DIR}/cmake/lumenConfigVersion.cmake
          DESTINATION ${LUMEN_INSTALL_CMAKEDIR})
endif()
