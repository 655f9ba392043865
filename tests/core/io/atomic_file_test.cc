// AtomicFile: replacement is all-or-nothing. Every failure case checks that the previous file
// survives byte for byte and that no temporary file is left behind. Failure cases are chosen to
// work as root too (permission bits do not stop root): a missing parent, a parent that is a
// regular file, a target that is a directory, and a file-size limit (RLIMIT_FSIZE) that makes
// write() fail half-way, which stands in for a full disk.
#include "core/io/atomic_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <stdexcept>
#include <thread>

#include "core/error.h"
#include "tests/core/io/temp_dir.h"
#include "tests/testing/file_size_limit.h"

namespace aiacc::io {
namespace {

using aiacc::testing::FileSizeLimit;
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
  std::string message;
  {
    const FileSizeLimit limit(4096);
    try {
      AtomicFile file(target);
      file.write(std::string(64 * 1024, 'z'));
      file.commit();
    } catch (const IoError& e) {
      message = e.what();
    }
  }
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

mode_t file_type(const std::filesystem::path& path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) return 0;
  return info.st_mode & S_IFMT;
}

// `aiacc-bench ps --json link` turned the link into a regular file and left its target old.
TEST(AtomicFileTest, SymbolicLinkIsFollowedAndStaysALink) {
  TempDir dir;
  write_bytes(dir / "target.json", "old");
  std::filesystem::create_symlink("target.json", dir / "link");  // relative to the link's folder
  std::filesystem::create_directory(dir / "sub");
  std::filesystem::create_symlink(dir / "link", dir / "sub" / "chain");  // absolute, via a link
  write_file_atomically(dir / "link", "new");
  EXPECT_EQ(file_type(dir / "link"), S_IFLNK);
  EXPECT_EQ(std::filesystem::read_symlink(dir / "link"), "target.json");
  EXPECT_EQ(read_bytes(dir / "target.json"), "new");
  write_file_atomically(dir / "sub" / "chain", "newer");
  EXPECT_EQ(file_type(dir / "sub" / "chain"), S_IFLNK);
  EXPECT_EQ(file_type(dir / "link"), S_IFLNK);
  EXPECT_EQ(read_bytes(dir / "target.json"), "newer");
  EXPECT_THAT(list_names(dir.path()), ElementsAre("link", "sub", "target.json"));
  EXPECT_THAT(list_names(dir / "sub"), ElementsAre("chain"));
}

TEST(AtomicFileTest, DanglingLinkCreatesItsTarget) {
  TempDir dir;
  std::filesystem::create_directory(dir / "out");
  std::filesystem::create_symlink("out/result.json", dir / "link");
  write_file_atomically(dir / "link", "created");
  EXPECT_EQ(file_type(dir / "link"), S_IFLNK);
  EXPECT_EQ(read_bytes(dir / "out" / "result.json"), "created");
  EXPECT_THAT(list_names(dir / "out"), ElementsAre("result.json"));

  std::filesystem::create_symlink("missing/result.json", dir / "nowhere");
  try {
    write_file_atomically(dir / "nowhere", "data");
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a symbolic link to"));
    EXPECT_THAT(e.what(), HasSubstr("does not exist"));
  }
  EXPECT_EQ(file_type(dir / "nowhere"), S_IFLNK);
}

TEST(AtomicFileTest, LinkLoopIsAnIoError) {
  TempDir dir;
  std::filesystem::create_symlink("b", dir / "a");
  std::filesystem::create_symlink("a", dir / "b");
  EXPECT_THROW(write_file_atomically(dir / "a", "data"), IoError);
  EXPECT_EQ(file_type(dir / "a"), S_IFLNK);
}

// `aiacc-bench ps --json fifo` replaced the FIFO with a regular file nobody was reading.
TEST(AtomicFileTest, FifoIsWrittenDirectlyAndStaysAFifo) {
  TempDir dir;
  const auto fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  { AtomicFile probe(fifo); }  // a probe that never writes does not wait for a reader
  std::string received;
  std::thread reader([&] { received = read_bytes(fifo); });
  const std::string payload = "{\"rows\": 1}\n" + std::string(200 * 1024, 'p');  // > a pipe's buffer
  std::uint32_t crc = write_file_atomically(fifo, payload);
  reader.join();
  EXPECT_EQ(received, payload);
  EXPECT_EQ(crc, ::crc32(0, reinterpret_cast<const Bytef*>(payload.data()),
                         static_cast<uInt>(payload.size())));
  EXPECT_EQ(file_type(fifo), S_IFIFO);
  EXPECT_THAT(list_names(dir.path()), ElementsAre("fifo"));

  // Through a symbolic link too.
  std::filesystem::create_symlink("fifo", dir / "link");
  std::thread reader2([&] { received = read_bytes(fifo); });
  write_file_atomically(dir / "link", "via link");
  reader2.join();
  EXPECT_EQ(received, "via link");
  EXPECT_EQ(file_type(fifo), S_IFIFO);
  EXPECT_EQ(file_type(dir / "link"), S_IFLNK);
}

// A reader that goes away is an IoError naming the FIFO, not a SIGPIPE that kills the process.
TEST(AtomicFileTest, FifoWhoseReaderLeavesIsAnIoError) {
  TempDir dir;
  const auto fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  std::thread reader([&] { FileDescriptor fd = open_for_reading(fifo); });  // opens, then closes
  try {
    write_file_atomically(fifo, std::string(1 << 20, 'x'));
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(fifo.string()));
    EXPECT_THAT(e.what(), HasSubstr("reader closed"));
  }
  reader.join();
  EXPECT_EQ(file_type(fifo), S_IFIFO);
}

// As root `--json /dev/full` replaced /dev/full with a regular file. A copy of the device node
// keeps the test from touching the real one.
TEST(AtomicFileTest, CharacterDeviceIsWrittenDirectlyNotReplaced) {
  TempDir dir;
  const auto full = dir / "full";
  const auto null = dir / "null";
  if (::mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0 ||
      ::mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) {
    GTEST_SKIP() << "cannot create device nodes here (mknod: " << std::strerror(errno) << ")";
  }
  write_file_atomically(null, "discarded");
  EXPECT_EQ(file_type(null), S_IFCHR);
  try {
    write_file_atomically(full, "data");
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(full.string()));
    EXPECT_THAT(e.what(), HasSubstr("No space left on device"));
  }
  EXPECT_EQ(file_type(full), S_IFCHR);
  EXPECT_THAT(list_names(dir.path()), ElementsAre("full", "null"));
}

TEST(AtomicFileTest, SocketIsRefusedNotReplaced) {
  TempDir dir;
  const auto path = dir / "sock";
  FileDescriptor sock(::socket(AF_UNIX, SOCK_STREAM, 0));
  ASSERT_TRUE(sock.valid());
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.string().size(), sizeof address.sun_path);
  std::strcpy(address.sun_path, path.c_str());
  ASSERT_EQ(::bind(sock.get(), reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  try {
    write_file_atomically(path, "data");
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path.string()));
    EXPECT_THAT(e.what(), HasSubstr("socket"));
  }
  EXPECT_EQ(file_type(path), S_IFSOCK);
  EXPECT_THAT(list_names(dir.path()), ElementsAre("sock"));
}

// Reading reused the write hints: a missing file in an existing folder said the directory did
// not exist.
TEST(FileDescriptorTest, MissingFileAndMissingFolderAreToldApart) {
  TempDir dir;
  try {
    open_for_reading(dir / "x.safetensors");
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr((dir / "x.safetensors").string()));
    EXPECT_THAT(e.what(), HasSubstr("no such file in " + dir.path().string()));
    EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("does not exist")));
  }
  try {
    open_for_reading(dir / "gone" / "deeper" / "x.safetensors");
    ADD_FAILURE() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the folder " + (dir / "gone").string() + " does not exist"));
  }
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
