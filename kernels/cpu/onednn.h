// oneDNN plumbing shared by the CPU ops: the engine, a per-thread stream, and a cache of primitives
// keyed by their shape, so each primitive is created (JIT-compiled) once and reused.
#pragma once

#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>

namespace ferry::kernels::cpu::onednn {

dnnl::engine& engine();
dnnl::stream& stream();  // one per thread: oneDNN streams are not shared across threads

// Returns the primitive cached under `key`, creating it with make() on first use.
template <class Primitive, class Key, class Make>
const Primitive& cached(const Key& key, Make&& make) {
  static std::mutex mu;
  static std::map<Key, Primitive> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make()).first;
  return it->second;
}

// Attributes every primitive is created with: its scratchpad comes from the op's workspace (ops/workspace.h)
// rather than from allocations inside oneDNN, so that library scratch is sized at start-up and counted.
dnnl::primitive_attr attributes();
// Runs a primitive on this thread's stream with its scratchpad (`scratchpad`: the primitive descriptor's
// scratchpad_desc()) in this thread's library workspace, and waits for it.
void execute(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad, std::unordered_map<int, dnnl::memory> args);

// A dense fp32 tensor of the given dims wrapped around caller memory.
inline dnnl::memory wrap(const dnnl::memory::desc& md, const float* p) {
  return dnnl::memory(md, engine(), const_cast<float*>(p));
}

}  // namespace ferry::kernels::cpu::onednn
