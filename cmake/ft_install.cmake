# The installable package (README "Install"):
# - ALIAS targets facetrace::core, ::runtime, ::tracer, ::faces for projects that add this tree with
#   add_subdirectory / FetchContent (the same names find_package(facetrace CONFIG) gives);
# - install rules: the CLI in bin/, the GPU child in libexec/facetrace/ (where the runtime looks for it, relative
#   to the executable or the installed package), the public headers, the static libraries and their export;
# - the CMake package facetraceConfig.cmake + version file (cmake/facetraceConfig.cmake.in);
# - CPack TGZ and DEB, each split into a `runtime` (CLI + GPU child) and a `dev` (headers, libraries, CMake
#   package) component.

# facetrace::tracer and facetrace::faces are a whole area each: scenes, the CPU tracer, scene JSON / PNG / EXR,
# the render loop with its GPU backend and the farm's work units, partials and merge (farm.h); the CPU networks
# plus the GPU accelerator where that is built.
if(TARGET ft_tracer)
  add_library(facetrace_tracer INTERFACE)
  target_link_libraries(facetrace_tracer INTERFACE ft_tracer ft_tracer_io ft_render)
  if(TARGET ft_farm)
    target_link_libraries(facetrace_tracer INTERFACE ft_farm)
  endif()
  set_target_properties(facetrace_tracer PROPERTIES EXPORT_NAME tracer)
  add_library(facetrace::tracer ALIAS facetrace_tracer)
endif()
if(TARGET ft_faces)
  add_library(facetrace_faces INTERFACE)
  target_link_libraries(facetrace_faces INTERFACE ft_faces)
  if(TARGET ft_faces_gpu)
    target_link_libraries(facetrace_faces INTERFACE ft_faces_gpu)
  endif()
  set_target_properties(facetrace_faces PROPERTIES EXPORT_NAME faces)
  add_library(facetrace::faces ALIAS facetrace_faces)
endif()
add_library(facetrace::core ALIAS ft_core)
set_target_properties(ft_core PROPERTIES EXPORT_NAME core)
if(TARGET ft_runtime)
  add_library(facetrace::runtime ALIAS ft_runtime)
  set_target_properties(ft_runtime PROPERTIES EXPORT_NAME runtime)
endif()

# Where the runtime finds facetrace-gpud once installed (find_gpud, docs/runtime.md): relative to the executable
# (bin/../libexec/facetrace for the installed CLI), through the path the installed package's config compiles into
# every program that links facetrace::runtime (relocatable: computed from where the package lies), and last the
# configured prefix's absolute path (a program linking the static libraries without CMake).
set(ft_gpud_install_dir ${CMAKE_INSTALL_LIBEXECDIR}/facetrace)
if(TARGET ft_runtime)
  file(RELATIVE_PATH ft_gpud_from_bin ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBEXECDIR}/facetrace)
  target_compile_definitions(ft_runtime PRIVATE
    FT_GPUD_RELATIVE_TO_BIN="${ft_gpud_from_bin}"
    FT_GPUD_INSTALL_PATH="${CMAKE_INSTALL_FULL_LIBEXECDIR}/facetrace/facetrace-gpud")
endif()

if(NOT FT_INSTALL)
  return()
endif()

include(CMakePackageConfigHelpers)
set(ft_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/facetrace)

# The exported libraries: the public four and every library of this tree they link, directly or through
# another (CMake needs the whole link interface of a static library in the export, INTERFACE flag targets too).
# Libraries only the programs or the tests use (the CLI's support library, test seams) stay out.
function(_ft_export_closure out)
  set(todo ${ARGN})
  set(seen "")
  while(todo)
    list(POP_FRONT todo t)
    if(t IN_LIST seen OR NOT TARGET ${t})
      continue()
    endif()
    get_target_property(imported ${t} IMPORTED)
    get_target_property(aliased ${t} ALIASED_TARGET)
    if(imported OR aliased)
      continue()
    endif()
    list(APPEND seen ${t})
    foreach(prop LINK_LIBRARIES INTERFACE_LINK_LIBRARIES)
      get_target_property(deps ${t} ${prop})
      if(NOT deps)
        continue()
      endif()
      foreach(d IN LISTS deps)
        string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" d "${d}")
        if(TARGET ${d})
          list(APPEND todo ${d})
        endif()
      endforeach()
    endforeach()
  endwhile()
  set(${out} ${seen} PARENT_SCOPE)
endfunction()
set(ft_public_libs ft_core)
foreach(t ft_runtime facetrace_tracer facetrace_faces)
  if(TARGET ${t})
    list(APPEND ft_public_libs ${t})
  endif()
endforeach()
_ft_export_closure(ft_export_libs ${ft_public_libs})
message(STATUS "facetrace: exported libraries ${ft_export_libs}")

install(TARGETS ${ft_export_libs} EXPORT facetraceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/facetrace DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)

# The programs. INSTALL_RPATH_USE_LINK_PATH: a dependency outside the system paths (cuDNN under /usr/local/cuda)
# stays found once installed.
foreach(exe facetrace facetrace-gpud)
  if(TARGET ${exe})
    set_target_properties(${exe} PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)
  endif()
endforeach()
if(TARGET facetrace)
  install(TARGETS facetrace RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
endif()
if(TARGET facetrace-gpud)
  install(TARGETS facetrace-gpud RUNTIME DESTINATION ${ft_gpud_install_dir} COMPONENT runtime)
endif()
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/models/LICENSE-yunet.txt DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/facetrace COMPONENT runtime)

# The CMake package.
install(EXPORT facetraceTargets NAMESPACE facetrace:: DESTINATION ${ft_cmake_dir} COMPONENT dev)
set(FT_PACKAGE_HAS_CUDA ${FT_ENABLE_CUDA})
set(FT_PACKAGE_HAS_TRACER ${FT_WITH_TRACER})
set(FT_PACKAGE_HAS_FACES ${FT_WITH_FACES})
set(FT_PACKAGE_HAS_FARM OFF)
if(TARGET ft_farm)
  set(FT_PACKAGE_HAS_FARM ON)  # ZLIB (CRC-32 of the partials)
endif()
set(FT_PACKAGE_HAS_CUDNN OFF)
if(TARGET CUDNN::cudnn)
  set(FT_PACKAGE_HAS_CUDNN ON)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/facetraceConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/facetraceConfig.cmake
                              INSTALL_DESTINATION ${ft_cmake_dir}
                              PATH_VARS ft_gpud_install_dir)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/facetraceConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/facetraceConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/facetraceConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindCUDNN.cmake
        DESTINATION ${ft_cmake_dir} COMPONENT dev)

# CPack: `cpack -G TGZ` / `cpack -G DEB` in the build folder, one package per component.
set(CPACK_PACKAGE_NAME facetrace)
set(CPACK_PACKAGE_VENDOR "facetrace developers")
set(CPACK_PACKAGE_CONTACT "facetrace developers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Gem path tracer, face networks and an isolated GPU runtime for render farms")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR "TGZ;DEB")
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION "The facetrace CLI and its GPU child process facetrace-gpud")
set(CPACK_COMPONENT_DEV_DESCRIPTION "Headers, static libraries and the CMake package (find_package(facetrace))")
set(CPACK_COMPONENT_DEV_DEPENDS runtime)  # the GPU child a program linking facetrace::runtime starts
set(CPACK_ARCHIVE_COMPONENT_INSTALL ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME facetrace)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME facetrace-dev)
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The runtime package's dependencies come from dpkg-shlibdeps (the shared libraries the programs link); the CUDA
# toolkit and cuDNN come from NVIDIA, not from Debian, so their folders count as private (no dependency). The dev
# package needs the -dev packages of what the static libraries link (the list of scripts/setup).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
if(FT_ENABLE_CUDA)
  set(ft_private_lib_dirs ${CUDAToolkit_LIBRARY_DIR})
  if(CUDNN_LIBRARY)
    get_filename_component(ft_cudnn_dir ${CUDNN_LIBRARY} DIRECTORY)
    list(APPEND ft_private_lib_dirs ${ft_cudnn_dir})
  endif()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${ft_private_lib_dirs})
endif()
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libspdlog-dev, libfmt-dev, nlohmann-json3-dev, libpng-dev, libjpeg62-turbo-dev | libjpeg-turbo8-dev, libssl-dev, libopenexr-dev, libonnx-dev, libprotobuf-dev")
include(CPack)

# The package test (label cpu): install into a temporary prefix, move it, build and run examples/consumer.
if(FT_BUILD_TESTS AND TARGET facetrace AND TARGET ft_render)
  set(ft_consumer_args "")
  if(FT_ENABLE_CUDA)
    list(APPEND ft_consumer_args -DCUDAToolkit_ROOT=${CUDAToolkit_LIBRARY_ROOT})
  endif()
  add_test(NAME package_install_consumer
           COMMAND ${PROJECT_SOURCE_DIR}/tests/package/install_consumer_test.sh ${CMAKE_BINARY_DIR}
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CXX_COMPILER} ${ft_consumer_args})
  set_tests_properties(package_install_consumer PROPERTIES LABELS cpu TIMEOUT 600)
  # The TGZ and DEB packages and their runtime / dev split.
  add_test(NAME package_cpack COMMAND ${PROJECT_SOURCE_DIR}/tests/package/cpack_test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(package_cpack PROPERTIES LABELS cpu TIMEOUT 300)
endif()
if(FT_BUILD_TESTS)
  # As a subproject: the ALIAS targets, and none of facetrace's tests, benchmarks or install rules.
  add_test(NAME package_subproject
           COMMAND ${PROJECT_SOURCE_DIR}/tests/package/subproject_test.sh ${PROJECT_SOURCE_DIR}
                   -DFT_ENABLE_CUDA=${FT_ENABLE_CUDA} -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER})
  set_tests_properties(package_subproject PROPERTIES LABELS cpu TIMEOUT 300)
endif()
