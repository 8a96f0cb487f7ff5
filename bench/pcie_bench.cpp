// ferry-bench pcie: host-to-device and device-to-host bandwidth from the pinned pool into the arena, per
// transfer size (64 KiB to 1 GiB), timed with CUDA events, and the smallest size that reaches 90% of the
// 1 GiB rate in each direction: what offload.bucket_mb: auto will use. Needs a CUDA build and a GPU.
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "bench/bench_common.h"
#include "engine/device/cuda_devices.h"
#include "memory/arena.h"
#include "memory/pinned_pool.h"
#include "foundation/console.h"

#ifdef FERRY_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ferry::bench {

int run_pcie_bench(int reps, const std::string& json_path, const std::string& markdown_path, const std::string& command) {
#ifndef FERRY_WITH_CUDA
  (void)reps, (void)json_path, (void)markdown_path, (void)command;
  throw std::runtime_error("pcie: this build has no CUDA (configure with -DFERRY_CUDA=ON where nvcc exists)");
#else
  if (device::cuda_device_count() == 0) throw std::runtime_error("pcie: no CUDA device");
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(fmt::format("pcie: {}: {}", what, cudaGetErrorString(e)));
  };
  constexpr int64_t kMax = int64_t(1) << 30;
  memory::PinnedHostPool pool(kMax, {true, false});
  memory::Arena arena(memory::Arena::Backing::Cuda, kMax);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  // GB/s (1e9 bytes) of one copy direction at one size: the median of reps after one untimed copy.
  auto rate = [&](int64_t bytes, bool h2d) {
    void* dst = h2d ? static_cast<void*>(arena.data()) : static_cast<void*>(pool.data());
    const void* src = h2d ? static_cast<const void*>(pool.data()) : static_cast<const void*>(arena.data());
    const auto kind = h2d ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost;
    std::vector<double> gbps;
    for (int r = 0; r <= reps; ++r) {
      check(cudaEventRecord(start, stream), "cudaEventRecord");
      check(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), kind, stream), "cudaMemcpyAsync");
      check(cudaEventRecord(stop, stream), "cudaEventRecord");
      check(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float ms = 0;
      check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
      if (r > 0) gbps.push_back(double(bytes) / (ms * 1e-3) / 1e9);
    }
    return median(gbps);
  };
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  nlohmann::json sizes = nlohmann::json::array();
  std::ostringstream table;
  table << "| size | h2d GB/s | d2h GB/s |\n|---|---|---|\n";
  std::vector<std::pair<int64_t, std::pair<double, double>>> rows;
  for (int64_t bytes = int64_t(64) << 10; bytes <= kMax; bytes *= 2) {
    const double up = rate(bytes, true), down = rate(bytes, false);
    rows.push_back({bytes, {up, down}});
    sizes.push_back({{"bytes", bytes}, {"h2d_gbps", up}, {"d2h_gbps", down}});
    const std::string row = fmt::format("| {} | {:.1f} | {:.1f} |", memory::format_bytes(bytes), up, down);
    table << row << "\n";
    console::print(stderr, "{}\n", row);
  }
  auto size90 = [&](bool h2d) {
    const double top = h2d ? rows.back().second.first : rows.back().second.second;
    for (const auto& [bytes, r] : rows)
      if ((h2d ? r.first : r.second) >= 0.9 * top) return bytes;
    return rows.back().first;
  };
  const int64_t up90 = size90(true), down90 = size90(false);
  const std::string device = fmt::format("{} (driver {}.{}, CUDA runtime {}.{})", prop.name, driver / 1000, driver % 1000 / 10,
                                         runtime / 1000, runtime % 1000 / 10);
  const std::string summary = fmt::format("90% of the 1 GiB rate from {} (h2d) and {} (d2h)", memory::format_bytes(up90),
                                          memory::format_bytes(down90));
  console::print("{}\n{}\n{}\n", device, table.str(), summary);
  if (!json_path.empty())
    write_result(json_path, "--json",
                 nlohmann::json{{"benchmark", "pcie"}, {"device", device}, {"sizes", sizes}, {"h2d_90pct_bytes", up90},
                                {"d2h_90pct_bytes", down90}, {"reps", reps}, {"date", today()}, {"command", command}}
                         .dump(2) + "\n");
  if (!markdown_path.empty())
    write_result(markdown_path, "--markdown",
                 fmt::format("# PCIe bandwidth from the pinned pool\n\n{}; median of {} copies per size, CUDA events. "
                             "Date: {}.\n\nCommand: `{}`\n\n{}\n{}\n", device, reps, today(), command, table.str(), summary));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(stream);
  return 0;
#endif
}

}  // namespace ferry::bench
