// OptimizerStep, the one definition of a step's sequence: piecewise in any landing order and from several
// threads it is bitwise the whole run; a skipped step changes nothing; clipping and loss scale as
// decide_step; a decision kept from an earlier step applies as the step that made it; misuse is an error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "cpu_optim/adamw.h"
#include "cpu_optim/optimizer_step.h"
#include "optim_fixtures.h"

namespace ferry::cpu_optim {
namespace {

using namespace fixtures;

// A model of buckets with every gradient dtype and upload dtype, and sizes from a hundred elements to
// several tiles. Bucket b's gradients have a sum of squares of about 1000 * 4^b: a few orders of
// magnitude apart, so that summed in another order they often give another double in the last bits.
struct Model {
  std::vector<State> states;
  std::vector<Grads> grads;
  std::vector<DType> upload_types;
  std::vector<bool> uploads;

  std::vector<Bucket> buckets() {
    std::vector<Bucket> out;
    for (size_t b = 0; b < states.size(); ++b)
      out.push_back(states[b].bucket(grads[b], 0, states[b].p.size(), uploads[b], upload_types[b]));
    return out;
  }
};

Model make_model(uint64_t seed, size_t n_buckets = 9) {
  Rng rng(seed);
  Model model;
  const DType grad_types[] = {DType::F32, DType::BF16, DType::F16};
  const DType upload_types[] = {DType::BF16, DType::F16, DType::F32};
  for (size_t b = 0; b < n_buckets; ++b) {
    const size_t n = b % 3 == 0 ? 3 * 16384 + 11 : 100 + 37 * b;
    model.states.push_back(make_state(rng, n));
    const DType gt = grad_types[b % 3];
    model.grads.push_back(make_grads(rng, n, gt, std::sqrt(1000.0 / double(n)) * std::pow(2.0, double(b))));
    model.upload_types.push_back(upload_types[(b / 3) % 3]);
    model.uploads.push_back(b % 4 != 3);
  }
  return model;
}

void expect_same_state(const Model& got, const Model& want) {
  for (size_t b = 0; b < got.states.size(); ++b) {
    const State &g = got.states[b], &w = want.states[b];
    const size_t n = g.p.size();
    EXPECT_EQ(0, std::memcmp(g.p.data(), w.p.data(), n * 4)) << "param of bucket " << b;
    EXPECT_EQ(0, std::memcmp(g.m.data(), w.m.data(), n * 4)) << "m of bucket " << b;
    EXPECT_EQ(0, std::memcmp(g.v.data(), w.v.data(), n * 4)) << "v of bucket " << b;
    EXPECT_EQ(0, std::memcmp(g.upload.data(), w.upload.data(), n * 4)) << "upload of bucket " << b;
  }
}

// Runs f(b) for every b of `order`, dealt round-robin to `threads` threads, each in the order it is dealt.
template <class F>
void on_threads(const std::vector<size_t>& order, int threads, F&& f) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t k = static_cast<size_t>(t); k < order.size(); k += static_cast<size_t>(threads)) f(order[k]);
    });
  for (auto& th : pool) th.join();
}

void expect_same_decision(const StepDecision& got, const StepReport& want, float want_scale) {
  EXPECT_EQ(got.report.grad_norm, want.grad_norm);  // bitwise: the sum is in bucket order
  EXPECT_EQ(got.report.skipped, want.skipped);
  EXPECT_EQ(got.grad_scale, want_scale);
}

TEST(OptimizerStep, PiecewiseInAnyLandingOrderFromSeveralThreadsIsBitwiseTheWholeRun) {
  const float max_norm = 1.0f, loss_scale = 8.0f;  // the norm (about 1000) is above max_norm: clipping is on
  for (Isa isa : paths()) {
    SCOPED_TRACE(to_string(isa));
    const CpuAdamW opt = optimizer(isa);
    const Model start = make_model(17);
    Model whole = start;
    const std::vector<Bucket> all = whole.buckets();
    OptimizerStep reference(opt, all.size(), max_norm, loss_scale);
    const StepReport report = reference.run(all, 3, 1e-3);
    const float scale = reference.decision().grad_scale;
    ASSERT_FALSE(report.skipped);
    ASSERT_LT(scale * loss_scale, 1.0f);

    std::mt19937 shuffle(5);
    for (int trial = 0; trial < 12; ++trial) {
      SCOPED_TRACE("trial " + std::to_string(trial));
      Model piecewise = start;
      const std::vector<Bucket> buckets = piecewise.buckets();
      std::vector<size_t> landing(buckets.size());
      std::iota(landing.begin(), landing.end(), 0);
      std::shuffle(landing.begin(), landing.end(), shuffle);
      if (trial == 0) std::reverse(landing.begin(), landing.end());  // certainly not bucket order
      OptimizerStep step(opt, buckets.size(), max_norm, loss_scale);
      on_threads(landing, 1 + trial % 3, [&](size_t b) {
        step.record_stats(b, buckets[b].grad, buckets[b].grad_type, buckets[b].param.size());
      });
      expect_same_decision(step.decide(), report, scale);
      std::shuffle(landing.begin(), landing.end(), shuffle);
      on_threads(landing, 3, [&](size_t b) { step.update(b, buckets[b], 3, 1e-3); });
      expect_same_state(piecewise, whole);
    }
  }
}

// 1 + 2^-53 rounds to 1 (ties to even): in bucket order the small sums vanish one by one; landed first,
// they add up to 2^-52 and survive.
TEST(OptimizerStep, TheDecisionSumsInBucketOrderWhateverTheLandingOrder) {
  const CpuAdamW opt = optimizer(Isa::Scalar);
  OptimizerStep step(opt, 4, 0.0f);
  for (size_t b : {3, 2, 1}) step.record_stats(b, GradStats{0x1p-53, true});
  step.record_stats(0, GradStats{1.0, true});
  EXPECT_EQ(step.decide().report.grad_norm, 1.0);
  EXPECT_NE(std::sqrt(((0x1p-53 + 0x1p-53) + 0x1p-53) + 1.0), 1.0);  // the landing order's norm
}

TEST(OptimizerStep, StatisticsMeasuredElsewhereDecideAsTheirGradientsWould) {
  const CpuAdamW opt = optimizer(best_isa());
  Model model = make_model(23, 5);
  const std::vector<Bucket> buckets = model.buckets();
  OptimizerStep measured(opt, buckets.size(), 0.5f), given(opt, buckets.size(), 0.5f);
  for (size_t b = 0; b < buckets.size(); ++b) {
    measured.record_stats(b, buckets[b].grad, buckets[b].grad_type, buckets[b].param.size());
    given.record_stats(b, opt.grad_stats(buckets[b].grad, buckets[b].grad_type, buckets[b].param.size()));
  }
  const StepDecision want = measured.decide();
  expect_same_decision(given.decide(), want.report, want.grad_scale);
}

TEST(OptimizerStep, AnInfOrNanGradientSkipsTheStepAndChangesNothingWholeOrPiecewise) {
  for (Isa isa : paths()) {
    for (DType gt : {DType::F32, DType::BF16, DType::F16}) {
      for (bool nan : {false, true}) {
        SCOPED_TRACE(std::string(to_string(isa)) + " grad " + dtype_name(gt) + (nan ? " nan" : " inf"));
        const CpuAdamW opt = optimizer(isa);
        Model start = make_model(3, 4);
        Rng rng(8);
        Grads& g = start.grads[2];  // one bucket
        g = make_grads(rng, g.f32.size(), gt);
        if (gt == DType::F32) {
          g.f32[77] = nan ? NAN : INFINITY;
        } else {
          g.half[77] = gt == DType::BF16 ? (nan ? 0x7fc0 : 0x7f80) : (nan ? 0x7e00 : 0x7c00);
        }
        Model whole = start, piecewise = start;
        EXPECT_TRUE(OptimizerStep(opt, 4, 1.0f).run(whole.buckets(), 1, 1e-3).skipped);
        expect_same_state(whole, start);

        const std::vector<Bucket> buckets = piecewise.buckets();
        OptimizerStep step(opt, buckets.size(), 1.0f);
        for (size_t b : {3, 0, 2, 1}) step.record_stats(b, buckets[b].grad, buckets[b].grad_type, buckets[b].param.size());
        EXPECT_TRUE(step.decide().report.skipped);
        for (size_t b = 0; b < buckets.size(); ++b) step.update(b, buckets[b], 1, 1e-3);
        expect_same_state(piecewise, start);
      }
    }
  }
}

TEST(OptimizerStep, ClipsAndUnscalesAsTorchDoes) {
  const CpuAdamW opt = optimizer(best_isa());
  struct Case {
    float max_norm, loss_scale;
  };
  // Clipping on, clipping off, and a norm below max_norm; with and without a loss scale.
  for (const Case c : {Case{0.5f, 1.0f}, Case{0.5f, 256.0f}, Case{0.0f, 8.0f}, Case{1e9f, 4.0f}}) {
    SCOPED_TRACE("max_norm " + std::to_string(c.max_norm) + " loss_scale " + std::to_string(c.loss_scale));
    Model model = make_model(29, 4), by_hand = model;
    double sum = 0;
    for (const Bucket& b : by_hand.buckets()) sum += opt.grad_stats(b.grad, b.grad_type, b.param.size()).sum_squares;
    const StepDecision want = decide_step(sum, true, c.max_norm, c.loss_scale);
    const double norm = std::sqrt(sum) / c.loss_scale;  // the true gradients' norm: unscaled
    EXPECT_NEAR(want.report.grad_norm, norm, 1e-12 * norm);
    // The factor on the stored gradients: unscaled, then clipped (torch: max_norm / (norm + 1e-6), at most 1).
    const double clip = c.max_norm > 0 && norm > c.max_norm ? c.max_norm / (norm + 1e-6) : 1.0;
    EXPECT_NEAR(want.grad_scale, clip / c.loss_scale, 1e-6 * clip / c.loss_scale);

    const StepReport got = opt.apply(model.buckets(), 2, 1e-3, c.max_norm, c.loss_scale);  // = OptimizerStep::run
    EXPECT_EQ(got.grad_norm, want.report.grad_norm);
    EXPECT_FALSE(got.skipped);
    for (const Bucket& b : by_hand.buckets()) opt.step(b, 2, 1e-3, want.grad_scale);
    expect_same_state(model, by_hand);
  }
}

TEST(OptimizerStep, ClipScaleFollowsTorch) {
  EXPECT_FLOAT_EQ(clip_scale(4.0, 1.0f), static_cast<float>(1.0 / (4.0 + 1e-6)));
  EXPECT_EQ(clip_scale(0.5, 1.0f), 1.0f);
  EXPECT_EQ(clip_scale(100.0, 0.0f), 1.0f);  // clipping off
}

// The delayed update: a step decides from its gradients, and the update under that decision runs later,
// from a StepDecision kept (or saved and restored) in the meantime.
TEST(OptimizerStep, ADecisionKeptFromAnEarlierStepAppliesAsTheStepThatMadeIt) {
  const CpuAdamW opt = optimizer(best_isa());
  Model now = make_model(31, 6), later = now, whole_later = now;
  const std::vector<Bucket> buckets = now.buckets(), later_buckets = later.buckets();
  OptimizerStep deciding(opt, buckets.size(), 0.5f, 16.0f);
  for (size_t b = 0; b < buckets.size(); ++b)
    deciding.record_stats(b, buckets[b].grad, buckets[b].grad_type, buckets[b].param.size());
  const StepDecision d = deciding.decide();
  for (size_t b = 0; b < buckets.size(); ++b) deciding.update(b, buckets[b], 4, 2e-3);

  // As a checkpoint would keep it: three numbers.
  const double norm = d.report.grad_norm;
  const bool skipped = d.report.skipped;
  const float scale = d.grad_scale;
  OptimizerStep delayed(opt, StepDecision{{norm, skipped}, scale});
  EXPECT_TRUE(delayed.decided());
  EXPECT_EQ(delayed.decide().grad_scale, scale);
  for (size_t b = buckets.size(); b-- > 0;) delayed.update(b, later_buckets[b], 4, 2e-3);
  expect_same_state(later, now);

  const StepReport r = OptimizerStep(opt, d).run(whole_later.buckets(), 4, 2e-3);
  EXPECT_EQ(r.grad_norm, norm);
  expect_same_state(whole_later, now);

  Model untouched = make_model(31, 6), skipped_model = untouched;
  OptimizerStep(opt, StepDecision{{norm, true}, scale}).run(skipped_model.buckets(), 4, 2e-3);
  expect_same_state(skipped_model, untouched);
}

TEST(OptimizerStep, MisuseIsAnErrorThatChangesNothing) {
  const CpuAdamW opt = optimizer(best_isa());
  const Model start = make_model(37, 3);
  Model model = start;
  const std::vector<Bucket> buckets = model.buckets();
  auto record = [&](OptimizerStep& s, size_t b) {
    s.record_stats(b, buckets[b].grad, buckets[b].grad_type, buckets[b].param.size());
  };
  OptimizerStep step(opt, 3, 1.0f);
  record(step, 0);
  expect_error<std::logic_error>([&] { record(step, 0); }, "bucket 0 recorded its statistics twice");
  expect_error<std::out_of_range>([&] { step.record_stats(3, GradStats{}); }, "bucket 3 does not exist");
  expect_error<std::invalid_argument>([&] { step.record_stats(1, buckets[1].grad, DType::I32, 5); }, "int32");
  record(step, 1);  // a refused recording leaves the bucket free
  expect_error<std::logic_error>([&] { step.decide(); }, "bucket 2 has no gradient statistics");
  expect_error<std::logic_error>([&] { step.update(0, buckets[0], 1, 1e-3); }, "no decision before decide()");
  step.record_stats(2, buckets[1].grad, buckets[1].grad_type, buckets[1].param.size());  // another bucket's gradients
  step.decide();
  expect_error<std::logic_error>([&] { step.record_stats(0, GradStats{}); }, "recorded after decide()");
  expect_error<std::invalid_argument>([&] { step.update(2, buckets[2], 1, 1e-3); }, "not those its statistics were recorded from");
  expect_error<std::logic_error>([&] { OptimizerStep(opt, StepDecision{}).record_stats(0, GradStats{}); }, "decision made earlier");
  expect_error<std::invalid_argument>([&] { OptimizerStep(opt, 2, 1.0f).run(buckets, 1, 1e-3); }, "run over 3 buckets");
  expect_error<std::invalid_argument>([&] { OptimizerStep(opt, 3, 1.0f, 0.0f); }, "loss scale");
  std::vector<Bucket> last_bad = buckets;
  last_bad[2].m = last_bad[2].m.first(1);
  expect_error<std::invalid_argument>([&] { OptimizerStep(opt, 3, 1.0f).run(last_bad, 1, 1e-3); }, "same length");
  expect_same_state(model, start);
}

}  // namespace
}  // namespace ferry::cpu_optim
