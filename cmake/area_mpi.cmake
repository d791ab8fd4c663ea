# facetrace-mpi, the MPI farm driver (farm.md §2): one SPMD binary over the work units of farm.md §1, with the
# canonical and reduce merges, checkpoint partials and the rank → GPU mapping. Optional: FT_ENABLE_MPI (on where
# find_package(MPI) finds a C++ MPI, e.g. Debian's libopenmpi-dev). Tests carry the ctest label mpi.
find_package(MPI REQUIRED COMPONENTS CXX)
add_executable(facetrace-mpi src/cli/mpi_main.cpp)
target_include_directories(facetrace-mpi PRIVATE ${PROJECT_SOURCE_DIR}/src/cli)
target_link_libraries(facetrace-mpi PRIVATE ft_core ft_tracer ft_tracer_io ft_render MPI::MPI_CXX CLI11::CLI11
                      spdlog::spdlog ft_warnings)
