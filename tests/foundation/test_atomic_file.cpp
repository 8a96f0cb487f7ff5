// Checked writes: a whole file replaces its target only complete, a failed write (a full disk, /dev/full)
// is an error naming the file and leaves no temporary; appended lines are whole or absent.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "foundation/atomic_file.h"
#include "full_disk.h"
#include "test_helpers.h"

namespace ferry {
namespace {

using testing::error_of;  // every check below looks for text in the message, so no error fails it
using testing::file_text;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(AtomicFile, ReplacesTheTargetOnlyWhenComplete) {
  const auto dir = testing::scratch_path("atomic");
  std::filesystem::create_directories(dir);
  const auto target = dir / "out.json";
  write_file_atomically(target, "old\n", "test");
  EXPECT_EQ(file_text(target), "old\n");
  {
    AtomicFile half(target, "test");  // an error before commit(): the target keeps its content
    half.write("new, but never finished");
    EXPECT_TRUE(std::filesystem::exists(half.temporary()));
  }
  EXPECT_EQ(file_text(target), "old\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json.tmp"));
  write_file_atomically(target, "new\n", "test");
  EXPECT_EQ(file_text(target), "new\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "out.json.tmp"));
  std::filesystem::remove_all(dir);
}

TEST(AtomicFile, AFullDiskIsAnErrorNamingTheFileAndLeavesNoTemporary) {
  const auto dir = testing::scratch_path("atomic_full");
  std::filesystem::create_directories(dir);
  const auto target = dir / "model.safetensors";
  write_file_atomically(target, "the previous file", "test");
  std::string error;
  {
    const testing::FileSizeLimit full(4096);
    const std::string past_the_limit(16384, 'w');
    error = error_of([&] { write_file_atomically(target, past_the_limit, "test"); });
  }
  EXPECT_TRUE(has(error, target.string()) && has(error, "File too large")) << error;
  EXPECT_EQ(file_text(target), "the previous file");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1) << "a temporary was left behind";
  std::filesystem::remove_all(dir);
}

TEST(AtomicFile, DevFullIsAnErrorNotASilentEmptyFile) {
  const std::string error = error_of([] { write_file_atomically("/dev/full", "{}\n", "--json"); });
  EXPECT_TRUE(has(error, "--json: cannot write '/dev/full'") && has(error, "No space left on device")) << error;
}

TEST(AtomicFile, ALinkKeepsPointingAtTheReplacedFile) {
  const auto dir = testing::scratch_path("atomic_link");
  std::filesystem::create_directories(dir);
  write_file_atomically(dir / "real.txt", "old", "test");
  std::filesystem::create_symlink("real.txt", dir / "link.txt");
  write_file_atomically(dir / "link.txt", "new", "test");
  EXPECT_TRUE(std::filesystem::is_symlink(dir / "link.txt"));
  EXPECT_EQ(file_text(dir / "real.txt"), "new");
  const std::string error = error_of([&] { write_file_atomically(dir, "x", "test"); });
  EXPECT_TRUE(has(error, "it is a folder")) << error;
  std::filesystem::remove_all(dir);
}

TEST(AppendFile, AFailedLineIsCutSoTheFileKeepsWholeLines) {
  const auto path = testing::scratch_path("append.jsonl");
  const std::string line(100, 'x');
  std::string error;
  {
    AppendFile file(path, true, "--metrics");
    const testing::FileSizeLimit full(250);  // two lines and half of the third
    file.append_line(line);
    file.append_line(line);
    error = error_of([&] { file.append_line(line); });
  }
  EXPECT_TRUE(has(error, "--metrics: writing '" + path.string() + "' failed: File too large")) << error;
  EXPECT_EQ(file_text(path), line + "\n" + line + "\n");
  std::filesystem::remove(path);
  const std::string full_error = error_of([] { AppendFile("/dev/full", false, "--metrics").append_line("{}"); });
  EXPECT_TRUE(has(full_error, "'/dev/full' failed: No space left on device")) << full_error;
}

}  // namespace
}  // namespace ferry
