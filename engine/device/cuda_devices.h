// How many CUDA devices this process can use: what `device: auto` looks at. Builds without CUDA see none.
#pragma once

namespace ferry::device {

#ifdef FERRY_WITH_CUDA
int cuda_device_count();  // 0 when there is no driver or no device
#else
inline int cuda_device_count() { return 0; }
#endif

}  // namespace ferry::device
