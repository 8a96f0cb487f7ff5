// SlowStage: quick start-up work prints nothing; slow work prints while it runs and its time when it ends,
// or that it failed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "engine/slow_stage.h"

namespace ferry::engine {
namespace {

using namespace std::chrono_literals;

std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<char>(c));
  return out;
}

struct TempFile {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f{std::tmpfile(), &std::fclose};
};

TEST(SlowStage, QuickWorkPrintsNothing) {
  TempFile t;
  Progress progress(t.f.get());
  const int v = during(progress, "quick", [] { return 7; });
  EXPECT_EQ(v, 7);
  { const SlowStage stage(progress, "also quick", 1s); }
  EXPECT_EQ(contents(t.f.get()), "");
}

TEST(SlowStage, SlowWorkSaysWhatRunsAndHowLongItTook) {
  TempFile t;
  Progress progress(t.f.get());
  {
    const SlowStage stage(progress, "pinning 2 GiB of host memory", 40ms);
    std::this_thread::sleep_for(150ms);
  }
  const std::string out = contents(t.f.get());
  EXPECT_NE(out.find("start-up: pinning 2 GiB of host memory (0 s so far)\n"), std::string::npos) << out;
  EXPECT_NE(out.find("start-up: pinning 2 GiB of host memory: done in 0."), std::string::npos) << out;
  EXPECT_EQ(out.find("done in"), out.rfind("done in")) << "one closing line: " << out;
  EXPECT_GT(out.find("done in"), out.rfind("so far")) << "the closing line last: " << out;
}

TEST(SlowStage, SlowWorkThatFailsSaysSoNotDone) {
  TempFile t;
  Progress progress(t.f.get());
  try {
    const SlowStage stage(progress, "pinning 2 GiB of host memory", 40ms);
    std::this_thread::sleep_for(100ms);
    throw std::runtime_error("no memory");
  } catch (const std::runtime_error&) {
  }
  const std::string out = contents(t.f.get());
  EXPECT_NE(out.find("start-up: pinning 2 GiB of host memory: failed after 0."), std::string::npos) << out;
  EXPECT_EQ(out.find("done in"), std::string::npos) << out;
}

}  // namespace
}  // namespace ferry::engine
