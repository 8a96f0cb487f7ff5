// Which device a run takes (resolve_device) from what the machine offers, given here as fake machines: `auto`
// takes a visible GPU in a CUDA build, else the host device, and says why; `cuda` without one is refused.
#include <gtest/gtest.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "engine/device/cuda_devices.h"
#include "engine/device/make_device.h"

namespace ferry::device {
namespace {

VisibleDevices machine(bool cuda_built, int cuda_devices, std::optional<std::string> cuda_visible_devices = std::nullopt) {
  VisibleDevices seen;
  seen.cuda_built = cuda_built, seen.cuda_devices = cuda_devices, seen.cuda_visible_devices = std::move(cuda_visible_devices);
  if (cuda_devices > 0) seen.first_cuda_name = "NVIDIA H100 80GB HBM3";
  return seen;
}
const VisibleDevices kH100 = machine(true, 1), kNoGpu = machine(true, 0), kHidden = machine(true, 0, ""), kCpuBuild = machine(false, 0);

std::string error_of(const std::string& requested, const VisibleDevices& seen) {
  try {
    resolve_device(requested, seen);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, AutoTakesAVisibleGpu) {
  const ResolvedDevice d = resolve_device("auto", kH100);
  EXPECT_EQ(d.kind, DeviceChoice::Kind::Cuda);
  EXPECT_EQ(d.note, "cuda (NVIDIA H100 80GB HBM3)");
  EXPECT_EQ(resolve_device("cuda", kH100).kind, DeviceChoice::Kind::Cuda);
}

TEST(DeviceChoice, AutoStaysOnTheHostDeviceAndSaysWhy) {
  const ResolvedDevice none = resolve_device("auto", kNoGpu);
  EXPECT_EQ(none.kind, DeviceChoice::Kind::Host);
  EXPECT_EQ(none.note, "cpu (no CUDA device visible)");
  EXPECT_EQ(resolve_device("auto", kHidden).note, "cpu (no CUDA device visible; CUDA_VISIBLE_DEVICES is '')");
  EXPECT_EQ(resolve_device("auto", kCpuBuild).note, "cpu (this build has no CUDA)");
  // A build without CUDA cannot use a GPU even where the driver reports one.
  EXPECT_EQ(resolve_device("auto", machine(false, 1)).kind, DeviceChoice::Kind::Host);
}

TEST(DeviceChoice, CpuIsTheHostDeviceEvenWithAGpu) {
  const ResolvedDevice d = resolve_device("cpu", kH100);
  EXPECT_EQ(d.kind, DeviceChoice::Kind::Host);
  EXPECT_EQ(d.note, "cpu (as configured)");
}

TEST(DeviceChoice, CudaWithoutAGpuIsRefusedSayingWhy) {
  EXPECT_NE(error_of("cuda", kNoGpu).find("device: cuda: no CUDA device visible"), std::string::npos) << error_of("cuda", kNoGpu);
  EXPECT_NE(error_of("cuda", kHidden).find("CUDA_VISIBLE_DEVICES is ''"), std::string::npos) << error_of("cuda", kHidden);
  EXPECT_NE(error_of("cuda", kCpuBuild).find("device: cuda: this build has no CUDA"), std::string::npos) << error_of("cuda", kCpuBuild);
  EXPECT_NE(error_of("cuda", kNoGpu).find("use device: auto or cpu"), std::string::npos);
  EXPECT_THROW(resolve_device("tpu", kH100), std::invalid_argument);
}

// This machine's answer is the CUDA runtime's: the build's CUDA, and as many devices as cuda_device_count sees.
TEST(DeviceChoice, VisibleDevicesAreTheRuntimes) {
  const VisibleDevices here = visible_devices();
#ifdef FERRY_WITH_CUDA
  EXPECT_TRUE(here.cuda_built);
#else
  EXPECT_FALSE(here.cuda_built);
#endif
  EXPECT_EQ(here.cuda_devices, cuda_device_count());
  EXPECT_EQ(here.first_cuda_name.empty(), here.cuda_devices == 0);
  EXPECT_EQ(resolve_device("auto").kind, here.cuda_built && here.cuda_devices > 0 ? DeviceChoice::Kind::Cuda : DeviceChoice::Kind::Host);
}

}  // namespace
}  // namespace ferry::device
