// ParameterStore: every parameter's fp32 value and gradient in two flat host buffers, each tensor's slice
// 256-byte aligned (the alignment BucketLayout will use), addressed by the parameter's index in the spec.
#pragma once

#include <span>
#include <vector>

#include "memory/host_buffer.h"
#include "models/model_spec.h"

namespace ferry::models {

class ParameterStore {
 public:
  explicit ParameterStore(const std::vector<ParamSpec>& params);

  std::span<float> value(int i) { return {values_.as<float>().data() + offset_[i], static_cast<size_t>(size_[i])}; }
  std::span<float> grad(int i) { return {grads_.as<float>().data() + offset_[i], static_cast<size_t>(size_[i])}; }
  std::span<const float> value(int i) const {
    return {values_.as<float>().data() + offset_[i], static_cast<size_t>(size_[i])};
  }
  std::span<const float> grad(int i) const {
    return {grads_.as<float>().data() + offset_[i], static_cast<size_t>(size_[i])};
  }
  // The whole flat buffers, padding included (padding stays zero in values and grads).
  std::span<float> values() { return values_.as<float>(); }
  std::span<float> grads() { return grads_.as<float>(); }
  std::span<const float> values() const { return values_.as<float>(); }
  std::span<const float> grads() const { return grads_.as<float>(); }

  int count() const { return static_cast<int>(offset_.size()); }
  // Every parameter's values, one span each (what init_model and load_weights write into).
  std::vector<std::span<float>> value_views();
  void zero_grads();

 private:
  std::vector<int64_t> offset_, size_;  // in floats
  memory::HostBuffer values_, grads_;
};

}  // namespace ferry::models
