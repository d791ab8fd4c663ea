/// @file
/// The start-up checks on a real GPU (docs/runtime.md "Device selection"): the kernel-image check passes for
/// this build and fails, without poisoning CUDA, for a kernel built for sm_80 SASS only; PTX of an older
/// architecture is accepted (the driver compiles it); the driver-too-old wording; `list_devices` through the
/// child; selection by index, UUID and local rank through the isolated executor.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "exec/cuda_device.h"
#include "facetrace/runtime/cuda_errors.h"
#include "facetrace/runtime/executor.h"
#include "gpu_skip.h"
#include "kernel_image_probe.h"
#include "runtime/runtime_kernels.h"

namespace facetrace::runtime {
namespace {

using namespace std::chrono_literals;

cudaDeviceProp device0() {
  cudaDeviceProp p{};
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  return p;
}

ExecutorOptions small_options() {
  ExecutorOptions o;
  o.ring_bytes = 8ull << 20;
  o.transfer_bytes = 8ull << 20;
  return o;
}

TEST(KernelImage, this_build_has_an_image_for_this_gpu) {
  FT_REQUIRE_GPU();
  const cudaDeviceProp p = device0();
  const Status st = check_kernel_image(probe_kernel_address(), p.major, p.minor, built_cuda_architectures());
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(KernelImage, a_kernel_built_for_sm80_sass_only_is_not_supported_and_cuda_stays_usable) {
  FT_REQUIRE_GPU();
  const cudaDeviceProp p = device0();
  if (p.major == 8) GTEST_SKIP() << "sm_" << p.major << p.minor << " runs sm_80 SASS";
  const Status st =
      check_kernel_image(facetrace::testing::probe_kernel_sm80_sass(), p.major, p.minor, "sm_80");
  EXPECT_TRUE(is_unsupported_device(st)) << st.to_string();
  EXPECT_EQ(st.what(), "not supported: no kernel image for sm_" + std::to_string(p.major) +
                           std::to_string(p.minor) + " (built for sm_80)");
  // Not sticky: the error is cleared and the process keeps working.
  EXPECT_FALSE(process_cuda_poisoned());
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(check_kernel_image(probe_kernel_address(), p.major, p.minor, "this build").ok());
}

TEST(KernelImage, ptx_of_an_older_architecture_is_compiled_by_the_driver) {
  FT_REQUIRE_GPU();
  const cudaDeviceProp p = device0();
  if (p.major < 8) GTEST_SKIP() << "compute_80 PTX needs sm_80 or newer";
  const Status st =
      check_kernel_image(facetrace::testing::probe_kernel_compute80_ptx(), p.major, p.minor, "compute_80");
  EXPECT_TRUE(st.ok()) << st.to_string();
}

TEST(KernelImage, a_driver_too_old_names_the_minimum_driver) {
  EXPECT_EQ(driver_too_old_status(13000, 12040).what(),
            "not supported: driver too old (CUDA runtime 13.0 needs driver ≥ 580; the installed driver "
            "supports CUDA 12.4)");
  EXPECT_EQ(driver_too_old_status(12080, 11080).what(),
            "not supported: driver too old (CUDA runtime 12.8 needs driver ≥ 525; the installed driver "
            "supports CUDA 11.8)");
}

TEST(ListDevices, lists_this_gpu_through_the_child_with_the_uuid_cuda_reports) {
  FT_REQUIRE_GPU();
  auto listed = list_devices();
  ASSERT_TRUE(listed.ok()) << listed.status().to_string();
  ASSERT_GE(listed->size(), 1u);
  const DeviceListing& d = listed->front();
  EXPECT_EQ(d.index, 0);
  EXPECT_EQ(d.status, "ready");
  EXPECT_TRUE(d.uuid.starts_with("GPU-")) << d.uuid;
  EXPECT_EQ(d.uuid.size(), 40u) << d.uuid;
  const cudaDeviceProp p = device0();
  EXPECT_EQ(d.name, p.name);
  EXPECT_EQ(d.cc_major, p.major);
  EXPECT_EQ(d.total_memory, p.totalGlobalMem);
  std::printf("[ metric ] list_devices: %d %s %s %s %s\n", d.index, d.uuid.c_str(), d.pci_bus_id.c_str(),
              d.name.c_str(), d.status.c_str());
}

TEST(GpuSelection, a_uuid_an_index_and_a_local_rank_select_through_the_child) {
  FT_REQUIRE_GPU();
  auto listed = list_devices();
  ASSERT_TRUE(listed.ok() && !listed->empty());
  const std::string uuid = listed->front().uuid;
  const bool inherited = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;

  ExecutorOptions by_uuid = small_options();
  by_uuid.gpu_device = uuid;
  auto a = make_isolated_executor(by_uuid);
  ASSERT_TRUE(a->start().ok()) << a->state_reason();
  EXPECT_EQ(a->info()->uuid, uuid);
  if (!inherited) {
    EXPECT_EQ(a->info()->visible_devices, uuid);
  }

  ExecutorOptions by_index = small_options();
  by_index.gpu_device = "0";
  auto b = make_isolated_executor(by_index);
  ASSERT_TRUE(b->start().ok()) << b->state_reason();
  EXPECT_EQ(b->info()->uuid, uuid);

  ExecutorOptions by_rank = small_options();
  by_rank.local_rank = static_cast<int>(listed->size()) * 3;  // ≡ 0 mod count
  auto c = make_isolated_executor(by_rank);
  ASSERT_TRUE(c->start().ok()) << c->state_reason();
  EXPECT_EQ(c->info()->ordinal, 0);
  EXPECT_EQ(c->info()->uuid, uuid);

  ExecutorOptions past = small_options();
  past.gpu_device = std::to_string(listed->size() + 5);
  auto e = make_isolated_executor(past);
  EXPECT_EQ(e->start().code(), Code::kNotSupported);
  EXPECT_EQ(e->state(), ExecutorState::kUnsupported) << e->state_reason();
  EXPECT_NE(e->state_reason().find("GPU device " + past.gpu_device + " requested"), std::string::npos)
      << e->state_reason();
  EXPECT_NE(e->state_reason().find("CUDA_VISIBLE_DEVICES"), std::string::npos) << e->state_reason();
}

}  // namespace
}  // namespace facetrace::runtime
