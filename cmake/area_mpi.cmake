# facetrace-mpi, the MPI farm driver (farm.md §2): one SPMD binary over the work units of farm.md §1, with the
# canonical and reduce merges, checkpoint partials and the rank → GPU mapping. Optional: FT_ENABLE_MPI (on where
# find_package(MPI) finds a C++ MPI, e.g. Debian's libopenmpi-dev). Its tests carry the ctest label mpi and run
# through ${MPIEXEC_EXECUTABLE} with FT_MPIEXEC_PREFLAGS. The docker/ recipe checks (label cpu) run in every build.
if(FT_ENABLE_MPI AND FT_WITH_TRACER AND FT_WITH_RUNTIME)
  find_package(MPI REQUIRED COMPONENTS CXX)
  add_executable(facetrace-mpi src/cli/mpi_main.cpp)
  target_include_directories(facetrace-mpi PRIVATE ${PROJECT_SOURCE_DIR}/src/cli)
  target_link_libraries(facetrace-mpi PRIVATE ft_cli_support ft_farm ft_core ft_tracer ft_tracer_io ft_render
                        MPI::MPI_CXX CLI11::CLI11 ft_warnings)
  # The C API only: the deprecated C++ bindings' headers warn under -Wextra.
  target_compile_definitions(facetrace-mpi PRIVATE OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  include(GNUInstallDirs)
  install(TARGETS facetrace-mpi RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)

  if(FT_BUILD_TESTS)
    # More ranks than cores: Open MPI 4 takes --oversubscribe, 5.x --map-by :OVERSUBSCRIBE, MPICH needs nothing.
    # A semicolon list, passed before the program.
    set(ft_oversubscribe "")
    execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE ft_mpiexec_version ERROR_QUIET
                    TIMEOUT 20)
    if(ft_mpiexec_version MATCHES "\\((Open MPI|OpenRTE)\\) ([0-9]+)\\.")
      set(ft_oversubscribe "--oversubscribe")
      if(CMAKE_MATCH_2 GREATER_EQUAL 5)
        set(ft_oversubscribe "--map-by;:OVERSUBSCRIBE")
      endif()
    endif()
    set(FT_MPIEXEC_PREFLAGS "${ft_oversubscribe}" CACHE STRING "mpiexec flags of the mpi tests (before the program)")
    ft_add_test(mpi_farm_test mpi SOURCES tests/mpi/mpi_farm_test.cpp LIBS ft_tracer ft_runtime)
    target_compile_definitions(mpi_farm_test PRIVATE FT_FACETRACE_MPI_EXE="$<TARGET_FILE:facetrace-mpi>"
                               FT_FACETRACE_EXE="$<TARGET_FILE:facetrace>"
                               FT_MPIEXEC="${MPIEXEC_EXECUTABLE}" FT_MPIEXEC_NUMPROC_FLAG="${MPIEXEC_NUMPROC_FLAG}"
                               FT_MPIEXEC_PREFLAGS="${FT_MPIEXEC_PREFLAGS}")
    add_dependencies(mpi_farm_test facetrace-mpi facetrace)  # facetrace: worker / merge interoperate
    if(FT_ENABLE_CUDA)  # the same binary on a GPU (skipped without one): label gpu
      ft_add_test(mpi_farm_gpu_test gpu SOURCES tests/mpi/mpi_farm_gpu_test.cpp LIBS ft_tracer ft_runtime)
      target_compile_definitions(mpi_farm_gpu_test PRIVATE FT_FACETRACE_MPI_EXE="$<TARGET_FILE:facetrace-mpi>"
                                 FT_MPIEXEC="${MPIEXEC_EXECUTABLE}" FT_MPIEXEC_NUMPROC_FLAG="${MPIEXEC_NUMPROC_FLAG}"
                                 FT_MPIEXEC_PREFLAGS="${FT_MPIEXEC_PREFLAGS}")
      add_dependencies(mpi_farm_gpu_test facetrace-mpi facetrace-gpud)
    endif()
  endif()
endif()

# The recipes' static checks (docker/check_recipes.py), with the flags they pass checked against the binaries' --help.
if(FT_BUILD_TESTS)
  find_package(Python3 COMPONENTS Interpreter)
  if(Python3_Interpreter_FOUND)
    set(ft_recipe_bins "")
    if(TARGET facetrace AND FT_WITH_TRACER AND FT_WITH_RUNTIME)
      list(APPEND ft_recipe_bins --facetrace $<TARGET_FILE:facetrace>)
    endif()
    if(TARGET facetrace-mpi)
      list(APPEND ft_recipe_bins --facetrace-mpi $<TARGET_FILE:facetrace-mpi>)
    endif()
    add_test(NAME docker_recipes_check COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/docker/check_recipes.py
                                               --root ${PROJECT_SOURCE_DIR} ${ft_recipe_bins})
    add_test(NAME docker_recipes_check_self_test COMMAND ${Python3_EXECUTABLE}
                                                         ${PROJECT_SOURCE_DIR}/docker/check_recipes.py --self-test)
    set_tests_properties(docker_recipes_check docker_recipes_check_self_test PROPERTIES LABELS cpu)
  endif()
endif()
