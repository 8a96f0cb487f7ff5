// The CPU engine and per-thread streams of oneDNN.
#include "models/ops/onednn.h"

namespace ferry::models::ops::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

}  // namespace ferry::models::ops::onednn
