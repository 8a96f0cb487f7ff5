// Schedule: the step's op list with actions between the ops, for one policy, and where each bucket lives
// (its tier). before[i] runs before op i (before[n_ops] after the last op). Copies go to the h2d or d2h
// stream, AdamW to the CPU pool or the device; Wait and ReleaseGrads make the compute stream wait for a copy.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace ferry::offload {

struct Action {
  enum class Kind {
    Prefetch,      // h2d: bucket b's working copy into a device slot
    Wait,          // compute waits until b has arrived
    Release,       // b's device slot is free from here on
    OffloadGrads,  // d2h: b's gradients to the host (after the last op writing them)
    ReleaseGrads,  // compute waits until b's gradients have left; their device buffer is free from here on
    CpuAdam,       // CPU pool: b's gradient statistics once they have landed; AdamW on b once every bucket's
                   // statistics are in (global-norm clipping, inf/nan skip), or during the next step (delayed)
    Upload,        // h2d: b's updated working copy into its resident slot, once AdamW has updated it
    DeviceAdam,    // compute stream, after the last op: AdamW on every bucket of the device tier, once the
                   // statistics of every bucket (the CPU's too) have decided the step
  };
  Kind kind;
  int bucket = -1;
};

const char* to_string(Action::Kind kind);

// Where a bucket lives during a step, and where AdamW updates it.
enum class Tier {
  Device,           // weights, gradients and the fp32 master, m and v on the device; AdamW on the device
  WeightsResident,  // weights on the device; gradients to the host, CPU AdamW, the new weights uploaded
  Streamed,         // weights fetched for each window of use; gradients to the host, CPU AdamW
};
const char* to_string(Tier tier);

// offload.overlap: when CPU AdamW runs. backward: each bucket's statistics as its gradients land, the
// updates once the step is decided, all before the next step starts. delayed: ZeRO-Offload's delayed
// parameter update, one step behind. pipelined: as backward, but the updates run on into the next step's
// forward pass, which waits for each bucket's update only where it first uses the bucket (exact).
enum class Overlap { Backward, Delayed, Pipelined };
const char* to_string(Overlap overlap);
Overlap parse_overlap(const std::string& name);  // backward | delayed | pipelined

struct Schedule {
  std::string policy;
  // How the actions were built: "resident schedule", "zero-offload schedule", "chunk-lru schedule" or
  // "prefetch schedule, 12 of 40 buckets resident". Greedy adopts the other policies' constructions as
  // candidates, so its policy alone does not say what the plan does.
  std::string construction;
  std::vector<std::vector<Action>> before;  // n_ops + 1 entries
  std::vector<bool> resident;               // per bucket: its working copy stays on the device all step
  // Per bucket: its optimizer state lives on the device and AdamW updates it there (the device tier; the
  // bucket is resident too). Every bucket: policy resident; some: the CPU updates the others meanwhile.
  std::vector<bool> device_optimizer;
  // ZeRO-Offload's delayed parameter update: the CPU AdamW of one step's gradients runs during the next
  // step, which computes with weights one update stale; resident buckets are uploaded after their last use.
  bool delayed_update = false;
  // The pipelined update (Overlap::Pipelined): the CPU AdamW of one step's gradients and the uploads of
  // its weights-resident buckets run on into the next step, whose ops wait for each bucket's new weights:
  // a prefetch for its update, the first op using a weights-resident bucket for its upload. The CPU updates
  // in the order the forward pass first uses the buckets (cpu_update_order). Exact: the same weights as
  // backward's, sooner. The step (and the Simulator's step time) is the steady-state period between two
  // steps' decisions.
  bool pipelined_update = false;

  Tier tier(int bucket) const {
    return device_optimizer[bucket] ? Tier::Device : resident[bucket] ? Tier::WeightsResident : Tier::Streamed;
  }
  // Whether any bucket, or every one, is updated on the device.
  bool any_device_optimizer() const { return std::find(device_optimizer.begin(), device_optimizer.end(), true) != device_optimizer.end(); }
  bool all_device_optimizer() const { return std::find(device_optimizer.begin(), device_optimizer.end(), false) == device_optimizer.end(); }

  // The policy, and the construction when it is not the policy's own: "greedy (zero-offload schedule)".
  std::string label() const {
    if (construction.empty() || construction == policy + " schedule") return policy;
    return policy + " (" + construction + ")";
  }
};

}  // namespace ferry::offload
