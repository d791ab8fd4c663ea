/// @file
/// facetrace-mpi on a GPU (farm.md §2, §3; ctest label gpu, skipped without a usable GPU): the canonical
/// merge of GPU-rendered units is the same bits for 1 and 2 ranks sharing one GPU; a device loss in the
/// middle of a unit is survived: without --cpu-fallback the unit is redone on the replaced GPU child (every
/// unit stays pure GPU), with it the rank may finish that unit on the CPU.
#include <gtest/gtest.h>

#include <string>

#include "gpu_skip.h"
#include "mpi_test_support.h"

namespace {

using namespace mpi_test;

/// A job big enough for the GPU path (the renderer sends it whole requests): 128×96, 4 units of 64 samples.
const JobSpec kGpuJob{128, 96, 256, 64};

TEST(MpiFarmGpu, gpu_units_merge_to_the_same_bits_on_1_and_2_ranks) {
  FT_REQUIRE_GPU();
  std::string sums[2];
  for (int np : {1, 2}) {
    const std::string d = fresh_dir("gpu" + std::to_string(np), job_json(kGpuJob));
    const ProcessRun r = mpi(d, np, {"--backend=gpu", "--sums", "out.ftsum"});
    ASSERT_EQ(r.rc, 0) << describe(r);
    EXPECT_NE(r.out.find("4 gpu, 0 cpu, 0 gpu+cpu"), std::string::npos) << describe(r);
    sums[np - 1] = slurp(d + "/out.ftsum");
  }
  ASSERT_FALSE(sums[0].empty());
  EXPECT_TRUE(sums[0] == sums[1]) << "the GPU renders a unit identically in any process (farm.md §1)";
}

TEST(MpiFarmGpu, a_device_loss_mid_job_is_redone_on_the_replaced_gpu_without_cpu_fallback) {
  FT_REQUIRE_GPU();
  const std::string d = fresh_dir("gpuloss", job_json(kGpuJob));
  const ProcessRun r = mpi(d, 1, {"--backend=gpu", "--sums", "out.ftsum"},
                           {"FACETRACE_MPI_TEST_FAULT_UNIT=1", "FACETRACE_GPU_COOLDOWN_S=0"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.err.find("unit 1: device lost"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("4 gpu, 0 cpu, 0 gpu+cpu"), std::string::npos) << describe(r);
  // The same bits as an undisturbed run: the lost attempt left nothing behind.
  const std::string clean = fresh_dir("gpuclean", job_json(kGpuJob));
  ASSERT_EQ(mpi(clean, 1, {"--backend=gpu", "--sums", "out.ftsum", "--quiet"}).rc, 0);
  EXPECT_TRUE(slurp(d + "/out.ftsum") == slurp(clean + "/out.ftsum"));
}

TEST(MpiFarmGpu, with_cpu_fallback_a_device_loss_finishes_the_unit_on_the_cpu) {
  FT_REQUIRE_GPU();
  const std::string d = fresh_dir("gpufallback", job_json(kGpuJob));
  const ProcessRun r = mpi(d, 1, {"--backend=gpu", "--cpu-fallback", "--sums", "out.ftsum"},
                           {"FACETRACE_MPI_TEST_FAULT_UNIT=1", "FACETRACE_GPU_COOLDOWN_S=0"});
  ASSERT_EQ(r.rc, 0) << describe(r);
  EXPECT_NE(r.out.find("merged 4 units"), std::string::npos) << describe(r);
  const bool mixed = r.out.find("3 gpu, 0 cpu, 1 gpu+cpu") != std::string::npos;
  const bool cpu = r.out.find("3 gpu, 1 cpu, 0 gpu+cpu") != std::string::npos;
  EXPECT_TRUE(mixed || cpu) << "unit 1 is (partly) rendered on the CPU, the others on the GPU: "
                            << describe(r);
}

}  // namespace
