/// @file
/// CUDA error classification (docs/design/runtime.md §4).
#include <gtest/gtest.h>

#include "facetrace/runtime/cuda_errors.h"

namespace facetrace::runtime {
namespace {

TEST(CudaErrors, classifies_every_listed_code) {
  EXPECT_EQ(classify_cuda_error(0), ErrorClass::kNone);
  EXPECT_EQ(classify_cuda_error(600), ErrorClass::kNone);
  EXPECT_EQ(classify_cuda_error(100), ErrorClass::kNoGpu);
  EXPECT_EQ(classify_cuda_error(35), ErrorClass::kNoGpu);
  EXPECT_EQ(classify_cuda_error(2), ErrorClass::kOutOfMemory);
  EXPECT_EQ(classify_cuda_error(1), ErrorClass::kTransient);
  EXPECT_EQ(classify_cuda_error(701), ErrorClass::kTransient);
  for (int code : {700, 702, 710, 714, 715, 716, 717, 718, 719, 911, 214, 999})
    EXPECT_EQ(classify_cuda_error(code), ErrorClass::kSticky) << code;
  EXPECT_EQ(cuda_error_name(700), "cudaErrorIllegalAddress");
}

TEST(CudaErrors, maps_classes_to_status_codes) {
  EXPECT_EQ(cuda_status(2, "cudaMalloc(&p, n)", "f.cpp", 3).code(), Code::kOutOfMemory);
  EXPECT_EQ(cuda_status(1, "x", "f.cpp", 3).code(), Code::kDeclined);
  const Status none = cuda_status(100, "cudaGetDeviceCount(&n)", "f.cpp", 7);
  EXPECT_EQ(none.code(), Code::kNotSupported);
  EXPECT_NE(none.what().find("no GPU"), std::string::npos);
  EXPECT_NE(none.what().find("f.cpp:7"), std::string::npos);
  EXPECT_NE(none.what().find("cudaGetDeviceCount"), std::string::npos);
}

// Runs last in its process (ctest runs each test alone): poisons the process flag.
TEST(CudaErrors, devices_unavailable_is_sticky_only_after_a_sticky_error) {
  if (!process_cuda_poisoned()) {
    EXPECT_EQ(classify_cuda_error(46), ErrorClass::kTransient);
  }
  const Status lost = cuda_status(700, "cudaStreamSynchronize(s)", "k.cu", 9);
  EXPECT_EQ(lost.code(), Code::kDeviceLost);
  EXPECT_TRUE(process_cuda_poisoned());
  EXPECT_NE(process_poison_reason().find("cudaErrorIllegalAddress"), std::string::npos);
  EXPECT_EQ(classify_cuda_error(46), ErrorClass::kSticky);
}

}  // namespace
}  // namespace facetrace::runtime
