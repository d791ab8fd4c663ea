/// @file
/// Private to the executors: device enumeration behind list_devices() (in this process, or through
/// `facetrace-gpud --list-devices`) and the text form in which the child hands its listing to the parent.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "facetrace/runtime/executor.h"

namespace facetrace::runtime {

/// Enumerates the devices this process sees and checks each for a kernel image. CUDA builds:
/// cuda_device.cpp; others: "built without CUDA".
Expected<std::vector<DeviceListing>> enumerate_cuda_devices();

/// Runs `facetrace-gpud --list-devices` and parses what it prints (isolated_executor.cpp).
Expected<std::vector<DeviceListing>> list_devices_through_gpud(const ExecutorOptions& options);

/// One line per device (tab-separated: index, uuid, PCI bus id, cc major, cc minor, memory, status, name), or
/// one `error` line carrying a failure's code and message.
std::string encode_device_listing(const Expected<std::vector<DeviceListing>>& devices);
/// The inverse; kInternal naming the line for malformed text.
Expected<std::vector<DeviceListing>> decode_device_listing(std::string_view text);

}  // namespace facetrace::runtime
