// The status line's step figures: link and stall figures only when the plan offloads parameters; the plain
// line a log file gets.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "engine/progress.h"

namespace ferry::engine {
namespace {

constexpr int64_t kMiB = int64_t(1) << 20;

TEST(StepFigures, AResidentStepShowsOnlyItsTimeAndThePrediction) {
  EXPECT_EQ(format_step_figures({.offloaded = false, .step_s = 0.1534, .predicted_s = 0.1601}), "step 0.153 s (predicted 0.160)");
  // Its batch's token ids and targets travel, 16 KiB here: no figure of the link for them.
  EXPECT_EQ(format_step_figures({.offloaded = false, .h2d_bytes = 16 << 10, .step_s = 0.15, .predicted_s = 0.16}),
            "step 0.150 s (predicted 0.160)");
}

TEST(StepFigures, AnOffloadedStepShowsWhatMovedAndTheStall) {
  const StepFigures f{.offloaded = true, .h2d_bytes = 37 * kMiB / 10, .d2h_bytes = 16 * kMiB / 10, .stall_s = 0.01, .step_s = 0.2,
                      .predicted_s = 0.21};
  EXPECT_EQ(format_step_figures(f), "h2d 3.7 MiB d2h 1.6 MiB | stall 5% | step 0.200 s (predicted 0.210)");
}

TEST(StepFigures, AnOffloadedPlanShowsItsLinkEvenWhenAStepMovedNothing) {
  EXPECT_EQ(format_step_figures({.offloaded = true, .step_s = 0.2, .predicted_s = 0.2}),
            "h2d 0.0 MiB d2h 0.0 MiB | stall 0% | step 0.200 s (predicted 0.200)");
}

TEST(Progress, ALogFileGetsOnePlainLinePerUpdate) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f{std::tmpfile(), &std::fclose};
  {
    Progress progress(f.get());
    progress.update(10, 800, 4.5f, 13000, 62, format_step_figures({.step_s = 0.15, .predicted_s = 0.16}));
  }
  std::rewind(f.get());
  std::string out;
  for (int c; (c = std::fgetc(f.get())) != EOF;) out.push_back(static_cast<char>(c));
  EXPECT_EQ(out, "step  10/800 | loss 4.5000 | 13000 tok/s | step 0.150 s (predicted 0.160) | 1:02 elapsed | ETA 1:21:38\n");
}

}  // namespace
}  // namespace ferry::engine
