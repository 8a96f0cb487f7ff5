// The CPU engine and per-thread streams of oneDNN.
#include "kernels/cpu/onednn.h"

#include "kernels/cpu/workspace.h"

namespace ferry::kernels::cpu::onednn {

dnnl::engine& engine() {
  static dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

dnnl::primitive_attr attributes() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad, std::unordered_map<int, dnnl::memory> args) {
  if (const size_t bytes = scratchpad.get_size(); bytes > 0)
    args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(scratchpad, engine(), workspace(Scratch::Library, static_cast<int64_t>(bytes))));
  primitive.execute(stream(), args);
  stream().wait();
}

}  // namespace ferry::kernels::cpu::onednn
