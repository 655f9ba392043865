// AtomicFile: replacement is all-or-nothing. Every failure case checks that the previous file
// survives byte for byte and that no temporary file is left behind. Failure cases are chosen to
// work as root too (permission bits do not stop root): a missing parent, a parent that is a
// regular file, a target that is a directory, and a file-size limit (RLIMIT_FSIZE) that makes
// write() fail half-way, which stands in for a full disk.
#include "core/io/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <csignal>
#include <stdexcept>

#include "core/error.h"
#include "tests/core/io/temp_dir.h"

namespace aiacc::io {
namespace {

using aiacc::testing::list_names;
using aiacc::testing::read_bytes;
using aiacc::testing::TempDir;
using aiacc::testing::write_bytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(AtomicFileTest, WritesAndReplacesWithoutLeftovers) {
  TempDir dir;
  auto target = dir / "state.bin";
  std::uint32_t crc = write_file_atomically(target, "first version");
  EXPECT_EQ(read_bytes(target), "first version");
  EXPECT_EQ(crc, ::crc32(0, reinterpret_cast<const Bytef*>("first version"), 13));

  AtomicFile file(target);
  file.write("second ");
  file.write(std::string(1 << 20, 'x'));  // larger than any stdio buffer
  EXPECT_EQ(read_bytes(target), "first version") << "the target changes only at commit";
  file.commit();
  EXPECT_EQ(read_bytes(target), "second " + std::string(1 << 20, 'x'));
  EXPECT_EQ(file.bytes_written(), 7u + (1u << 20));
  EXPECT_THAT(list_names(dir.path()), ElementsAre("state.bin"));
}

TEST(AtomicFileTest, AbandonedWriteKeepsOldFileAndRemovesTemp) {
  TempDir dir;
  auto target = dir / "model.safetensors";
  write_bytes(target, "old contents");
  try {
    AtomicFile file(target);
    file.write("partial new contents");
    EXPECT_EQ(list_names(dir.path()).size(), 2u) << "a temporary file exists while writing";
    throw std::runtime_error("simulated failure while serialising");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(read_bytes(target), "old contents");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("model.safetensors"));
}

TEST(AtomicFileTest, MissingParentDirectoryIsAnIoErrorNamingThePath) {
  TempDir dir;
  auto target = dir / "no-such-dir" / "file.bin";
  try {
    write_file_atomically(target, "data");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(target.string()));
    EXPECT_THAT(e.what(), HasSubstr("does not exist"));
  }
  EXPECT_TRUE(list_names(dir.path()).empty());
}

TEST(AtomicFileTest, ParentThatIsARegularFileIsAnIoError) {
  TempDir dir;
  write_bytes(dir / "plain", "I am a file");
  EXPECT_THROW(write_file_atomically(dir / "plain" / "file.bin", "data"), IoError);
  EXPECT_EQ(read_bytes(dir / "plain"), "I am a file");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("plain"));
}

TEST(AtomicFileTest, TargetThatIsADirectoryFailsAtRenameAndCleansUp) {
  TempDir dir;
  std::filesystem::create_directory(dir / "taken");
  write_bytes(dir / "taken" / "inside", "keep me");
  try {
    write_file_atomically(dir / "taken", "data");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "taken").string()));
    EXPECT_THAT(e.what(), HasSubstr("rename"));
    EXPECT_THAT(e.what(), HasSubstr("previous file"));
  }
  EXPECT_THAT(list_names(dir.path()), ElementsAre("taken"));
  EXPECT_EQ(read_bytes(dir / "taken" / "inside"), "keep me");
}

// A failed write() half-way through (what a full disk looks like) surfaces as an IoError with
// the errno text, and the old file is untouched.
TEST(AtomicFileTest, FailedWriteMidwayKeepsOldFile) {
  TempDir dir;
  auto target = dir / "big.bin";
  write_bytes(target, "old");
  rlimit saved{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto saved_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of a core dump
  rlimit limited = saved;
  limited.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::string message;
  try {
    AtomicFile file(target);
    file.write(std::string(64 * 1024, 'z'));
    file.commit();
  } catch (const IoError& e) {
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, saved_handler);
  EXPECT_THAT(message, HasSubstr(target.string()));
  EXPECT_THAT(message, HasSubstr("File too large"));
  EXPECT_THAT(message, HasSubstr("size limit"));
  EXPECT_EQ(read_bytes(target), "old");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("big.bin"));
}

TEST(AtomicFileTest, ReadOnlyDirectoryWhenNotRoot) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores permission bits; covered by the cases above";
  TempDir dir;
  write_bytes(dir / "f", "old");
  ::chmod(dir.path().c_str(), 0555);
  try {
    write_file_atomically(dir / "f", "new");
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("permission denied"));
  }
  ::chmod(dir.path().c_str(), 0755);
  EXPECT_EQ(read_bytes(dir / "f"), "old");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("f"));
}

TEST(FileDescriptorTest, MoveTransfersOwnership) {
  TempDir dir;
  write_bytes(dir / "r", "abcdef");
  FileDescriptor a = open_for_reading(dir / "r");
  int raw = a.get();
  FileDescriptor b(std::move(a));
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(b.get(), raw);
  char buffer[3];
  read_exact(b, dir / "r", 2, buffer, 3);
  EXPECT_EQ(std::string(buffer, 3), "cde");
  EXPECT_THROW(read_exact(b, dir / "r", 4, buffer, 3), DataError);  // past the end
  EXPECT_THROW(open_for_reading(dir / "missing"), IoError);
}

}  // namespace
}  // namespace aiacc::io
