/// @file
/// facetrace-mpi: renders a job's work units over MPI ranks and merges them (farm.md §2).
#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Finalize();
  return 0;
}
