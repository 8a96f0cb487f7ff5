// Outputs never over inputs (issue 32: --metrics, --trace, plan --json and --save-cost-model could name the
// training text, the config or a file of the checkpoint resumed): the same file under any name, a path inside
// a folder read, and two outputs on one file are refused; an output folder may hold what the command reads.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "foundation/output_paths.h"
#include "test_helpers.h"

namespace ferry::formats {
namespace {

using Kind = PathUse::Kind;
using testing::error_of;

class OutputPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_ / "ckpt" / "step-00000004");
    std::ofstream(root_ / "train.txt") << "the training text\n";
    std::ofstream(root_ / "ckpt" / "step-00000004" / "model.safetensors") << "weights\n";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // The error of writing `out` (as `kind`) in a command that reads train.txt and the checkpoint folder.
  std::string refusal(const std::filesystem::path& out, Kind kind = Kind::Output) const {
    return error_of([&] {
      refuse_outputs_over_inputs({{"data.path", root_ / "train.txt"},
                                  {"the checkpoint resumed (--resume)", root_ / "ckpt" / "step-00000004"},
                                  {"--metrics", out, kind}});
    });
  }

  const std::filesystem::path root_ = testing::scratch_path("output-paths");
};

TEST_F(OutputPaths, AnInputUnderAnyNameIsRefusedNamingBoth) {
  const std::string plain = refusal(root_ / "train.txt");
  EXPECT_NE(plain.find("--metrics: '" + (root_ / "train.txt").string() +
                       "' is the data.path file, which this command reads; writing "
                       "there would destroy it: choose another path"),
            std::string::npos)
      << plain;
  std::filesystem::create_symlink(root_ / "train.txt", root_ / "link.txt");
  std::filesystem::create_hard_link(root_ / "train.txt", root_ / "hard.txt");
  for (const auto& other : {root_ / "link.txt", root_ / "hard.txt", root_ / "ckpt" / ".." / "train.txt"}) {
    const std::string what = refusal(other);
    EXPECT_NE(what.find("is the data.path file '" + (root_ / "train.txt").string() + "'"), std::string::npos)
        << other << ": " << what;
  }
  const std::string folder = refusal(root_ / "ckpt" / "step-00000004", Kind::OutputFolder);
  EXPECT_NE(folder.find("is the checkpoint resumed (--resume) folder"), std::string::npos) << folder;
}

TEST_F(OutputPaths, NothingGoesInsideAFolderReadNorOverAFolder) {
  EXPECT_NE(refusal(root_ / "ckpt" / "step-00000004" / "model.safetensors").find("lies inside"), std::string::npos);
  const std::string beside = refusal(root_ / "ckpt" / "step-00000004" / "metrics.jsonl");
  EXPECT_NE(beside.find("lies inside the checkpoint resumed (--resume) folder '" +
                        (root_ / "ckpt" / "step-00000004").string() +
                        "', which this command reads and must find as it was: write it outside that folder"),
            std::string::npos)
      << beside;
  EXPECT_NE(refusal(root_ / "ckpt" / "step-00000004" / "hf", Kind::OutputFolder).find("lies inside"),
            std::string::npos);
  const std::string over = refusal(root_ / "ckpt");
  EXPECT_NE(over.find("--metrics: '" + (root_ / "ckpt").string() + "' is a folder; name a file to write"),
            std::string::npos)
      << over;
}

// A checkpoint dir or an export writes files of its own into its folder: what else the folder holds is safe.
TEST_F(OutputPaths, AnOutputFolderMayHoldInputsAndOutputs) {
  EXPECT_EQ(refusal(root_ / "ckpt", Kind::OutputFolder), "");
  EXPECT_EQ(refusal(root_ / "metrics.jsonl"), "");
  EXPECT_EQ(error_of([&] {
              refuse_outputs_over_inputs({{"train.checkpoint_dir", root_ / "ckpt", Kind::OutputFolder},
                                          {"--metrics", root_ / "ckpt" / "metrics.jsonl", Kind::Output}});
            }),
            "");
}

TEST_F(OutputPaths, TwoOutputsOnOneFileAreRefusedDevicesAreNot) {
  const std::string both = error_of([&] {
    refuse_outputs_over_inputs(
        {{"--metrics", root_ / "m.jsonl", Kind::Output}, {"--trace", root_ / "ckpt" / ".." / "m.jsonl", Kind::Output}});
  });
  EXPECT_NE(both.find("--trace: '" + (root_ / "ckpt" / ".." / "m.jsonl").string() + "' is also where --metrics writes"),
            std::string::npos)
      << both;
  const std::string under = error_of([&] {
    refuse_outputs_over_inputs(
        {{"--metrics", root_ / "m.jsonl", Kind::Output}, {"--trace", root_ / "m.jsonl" / "t.json", Kind::Output}});
  });
  EXPECT_NE(under.find("lies inside '" + (root_ / "m.jsonl").string() + "', which --metrics writes as a file"),
            std::string::npos)
      << under;
  EXPECT_EQ(error_of([&] {
              refuse_outputs_over_inputs({{"--metrics", "/dev/null", Kind::Output},
                                          {"--trace", "/dev/null", Kind::Output},
                                          {"--config", "/dev/null"}});
            }),
            "");
}

TEST_F(OutputPaths, AnInputThatDoesNotExistIsTheReadersToReport) {
  EXPECT_EQ(error_of([&] {
              refuse_outputs_over_inputs(
                  {{"data.path", root_ / "missing.txt"}, {"--metrics", root_ / "missing.txt", Kind::Output}});
            }),
            "");
}

}  // namespace
}  // namespace ferry::formats
