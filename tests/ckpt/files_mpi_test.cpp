// Faults under the checkpoint file layer (ckpt::Files, a test implementation here) in each of its
// operations (1 and 2 ranks):
//  - a full disk or an I/O error while one rank writes, a failed file creation or fsync on one rank,
//    and a failed directory creation or rename, are a SystemError on every rank; `latest` still
//    names the previous checkpoint and neither the new file nor its .tmp is left;
//  - a failed fsync of the directory or write of `latest` leaves the complete new file but `latest`
//    unchanged; a failed removal or listing by retention is an error once `latest` names the new
//    checkpoint; after each, --resume auto resumes every rank from the checkpoint `latest` names;
//  - a failed listing, read of `latest` or move aside of a newer checkpoint while choosing where to
//    resume is a UserError on every rank, naming --resume;
//  - a short read on one rank and an I/O error on every rank while resuming are errors on every rank
//    naming the file and the tensor.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "meridian/ckpt/checkpoint.h"
#include "meridian/ckpt/files.h"
#include "meridian/core/config.h"
#include "meridian/core/error.h"
#include "meridian/core/files.h"
#include "mpi_test_main.h"
#include "tiny_run.h"

using meridian::test::make_run;
using meridian::test::runtime;
using meridian::test::temp_dir;
using meridian::test::train_and_save;
namespace ckpt = meridian::ckpt;
using meridian::Config;

namespace {

// Fails one kind of operation, on one rank (-1: every rank), for one target: a dataset (writes and
// reads) or the end of a path (file operations); "": any.
class FaultyFiles : public ckpt::Files {
 public:
  enum Fault {
    FullDisk,
    WriteError,
    ShortRead,
    ReadError,
    Rename,
    Create,
    CreateDir,
    FileSync,
    DirSync,
    Latest,
    Remove,
    List,
    ReadLatest
  };
  FaultyFiles(Fault fault, int rank, std::string target) : fault_(fault), rank_(rank), target_(std::move(target)) {}
  void on_create(const std::string& path) override { fail_if(Create, path); }
  void on_write(const std::string&, const std::string& dataset) override {
    if ((fault_ == FullDisk || fault_ == WriteError) && here(dataset))
      throw meridian::SystemError(std::strerror(fault_ == FullDisk ? ENOSPC : EIO));
  }
  void on_read(const std::string&, const std::string& dataset, at::Tensor& data) override {
    if (fault_ == ReadError && here(dataset)) throw meridian::SystemError(std::strerror(EIO));
    if (fault_ == ShortRead && here(dataset)) {  // the second half never arrived: the buffer holds other bytes
      auto bytes = data.view(at::kByte).reshape({-1});
      bytes.narrow(0, bytes.numel() / 2, bytes.numel() - bytes.numel() / 2).fill_(0xA5);
    }
  }
  void create_dir(const std::string& dir) override {
    fail_if(CreateDir, dir, "cannot create the checkpoint directory '" + dir + "': ");
    Files::create_dir(dir);
  }
  void rename(const std::string& from, const std::string& to) override {
    fail_if(Rename, to, "cannot rename " + from + " to " + to + ": ");
    Files::rename(from, to);
  }
  void remove(const std::string& path) override {
    fail_if(Remove, path, "cannot remove " + path + ": ");
    Files::remove(path);
  }
  void sync_file(const std::string& path) override {
    fail_if(FileSync, path, "fsync failed: ");
    Files::sync_file(path);
  }
  void sync_dir(const std::string& dir) override {
    fail_if(DirSync, dir, "cannot fsync the directory '" + dir + "': ");
    Files::sync_dir(dir);
  }
  void write_small(const std::string& path, const std::string& contents) override {
    fail_if(Latest, path, "cannot write '" + path + ".tmp': ");
    Files::write_small(path, contents);
  }
  std::optional<std::string> read_small(const std::string& path) override {
    fail_if(ReadLatest, path, "cannot read " + path + ": ");
    return Files::read_small(path);
  }
  std::vector<std::string> list(const std::string& dir) override {
    fail_if(List, dir, "cannot list " + dir + ": ");
    return Files::list(dir);
  }

 private:
  bool here(const std::string& target) const {
    return (rank_ < 0 || rank_ == runtime().rank()) &&
           (target_.empty() || (target.size() >= target_.size() &&
                                target.compare(target.size() - target_.size(), target_.size(), target_) == 0));
  }
  void fail_if(Fault fault, const std::string& path, const std::string& what = "") const {
    if (fault_ == fault && here(path)) throw meridian::SystemError(what + std::strerror(EIO));
  }
  Fault fault_;
  int rank_;
  std::string target_;
};

// Installs a file layer for a scope.
struct Installed {
  explicit Installed(ckpt::Files* f) { ckpt::set_files(f); }
  ~Installed() { ckpt::set_files(nullptr); }
};

std::string latest(const std::string& dir) {
  std::ifstream in(dir + "/latest");
  std::string name;
  in >> name;
  return name;
}

// What a failed save leaves in the directory besides the previous checkpoint.
enum class Left {
  Nothing,   // neither step_3.h5 nor its .tmp; `latest` names step 2
  NewFile,   // step_3.h5 complete but `latest` still names step 2 (a resume moves step 3 aside)
  NewLatest  // step_3.h5 and `latest` naming it: only retention failed
};

// A good checkpoint at step 2, then a save at step 3 (keeping the newest only) under `fault`: an
// error on every rank, and a directory a run resumes from.
void expect_failed_save(FaultyFiles::Fault fault, int rank, const std::string& target, const std::string& reason,
                        Left left = Left::Nothing) {
  const std::string dir = temp_dir();
  auto a = make_run("zero: 2", 2, 0, 3);
  a.trainer->run();
  ckpt::CheckpointSettings cs;
  cs.dir = dir;
  cs.keep_last = 1;
  const Config saved = Config::parse("{}", "saved.yaml");
  ckpt::save(runtime(), *a.trainer, saved, cs);
  auto state = a.trainer->state();
  state.step = 3;
  a.trainer->set_state(state);
  {
    FaultyFiles faulty(fault, rank, target);
    Installed installed(&faulty);
    try {
      ckpt::save(runtime(), *a.trainer, saved, cs);
      ADD_FAILURE() << "the save under " << reason << " succeeded";
    } catch (const meridian::SystemError& e) {
      EXPECT_NE(std::string(e.what()).find(reason), std::string::npos) << e.what();
    }
  }
  runtime().barrier();  // rank 0 has removed the .tmp before it rethrew
  EXPECT_EQ(latest(dir), left == Left::NewLatest ? "step_00000003.h5" : "step_00000002.h5") << reason;
  EXPECT_EQ(std::filesystem::exists(dir + "/step_00000003.h5"), left != Left::Nothing) << reason;
  EXPECT_FALSE(std::filesystem::exists(dir + "/step_00000003.h5.tmp")) << reason;
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_00000002.h5")) << reason;
  const auto point = ckpt::find_resumable(dir, nullptr);
  ASSERT_TRUE(point.has_value());
  EXPECT_EQ(point->step, left == Left::NewLatest ? 3 : 2) << reason;
  runtime().barrier();  // every rank has looked before rank 0 moves a newer step 3 aside
  // The run resumes from there on every rank (a newer step 3 moved aside).
  const auto chosen = ckpt::choose_resume_point(runtime(), "auto", dir);
  ASSERT_TRUE(chosen.has_value());
  EXPECT_EQ(chosen->step, point->step) << reason;
  auto b = make_run("zero: 2", 4, 0, 5);
  ckpt::restore(runtime(), *b.trainer, *chosen);
  EXPECT_EQ(b.trainer->step(), point->step) << reason;
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointFaults, FullDiskOnOneRankFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::FullDisk, runtime().size() - 1, "", std::strerror(ENOSPC));
}

TEST(CheckpointFaults, WriteErrorOnOneTensorFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::WriteError, 0, "model/model.norm.weight", std::strerror(EIO));
}

TEST(CheckpointFaults, FailedCreateOnOneRankFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::Create, runtime().size() - 1, "", "checkpoint write failed (create)");
}

TEST(CheckpointFaults, FailedDirectoryCreationFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::CreateDir, 0, "", "cannot create the checkpoint directory");
}

TEST(CheckpointFaults, FailedFsyncOnOneRankFailsTheSaveEverywhere) {
  expect_failed_save(FaultyFiles::FileSync, runtime().size() - 1, "", "checkpoint write failed (fsync)");
}

TEST(CheckpointFaults, FailedRenameLeavesLatestAndNoFile) {
  expect_failed_save(FaultyFiles::Rename, 0, "", "cannot rename");
}

TEST(CheckpointFaults, FailedDirectoryFsyncLeavesLatest) {
  expect_failed_save(FaultyFiles::DirSync, 0, "", "cannot fsync the directory", Left::NewFile);
}

TEST(CheckpointFaults, FailedWriteOfLatestLeavesLatest) {
  expect_failed_save(FaultyFiles::Latest, 0, "/latest", "cannot write", Left::NewFile);
}

TEST(CheckpointFaults, FailedRetentionRemovalIsAnErrorEverywhere) {
  expect_failed_save(FaultyFiles::Remove, 0, "step_00000002.h5", "retention failed: cannot remove", Left::NewLatest);
}

TEST(CheckpointFaults, FailedRetentionListingIsAnErrorEverywhere) {
  expect_failed_save(FaultyFiles::List, 0, "", "retention failed: cannot list", Left::NewLatest);
}

// A directory with checkpoints at steps 2 and 3 and `latest` naming step 2 (a save whose `latest`
// write failed), resumed with --resume auto under `fault`: a UserError on every rank naming
// --resume and the reason; nothing moved.
void expect_failed_choice(FaultyFiles::Fault fault, const std::string& target, const std::string& reason) {
  const std::string dir = temp_dir();
  auto a = make_run("name: adamw", 3, 0, 3);
  a.trainer->run();
  ckpt::CheckpointSettings cs;
  cs.dir = dir;
  const Config saved = Config::parse("{}", "saved.yaml");
  auto state = a.trainer->state();
  state.step = 2;
  a.trainer->set_state(state);
  ckpt::save(runtime(), *a.trainer, saved, cs);
  state.step = 3;
  a.trainer->set_state(state);
  ckpt::save(runtime(), *a.trainer, saved, cs);
  if (runtime().rank() == 0) meridian::write_file_atomically(dir + "/latest", "step_00000002.h5\n");
  runtime().barrier();
  {
    FaultyFiles faulty(fault, 0, target);
    Installed installed(&faulty);
    try {
      ckpt::choose_resume_point(runtime(), "auto", dir);
      ADD_FAILURE() << "the resume under " << reason << " succeeded";
    } catch (const meridian::UserError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("--resume auto: ", 0), 0u) << what;
      EXPECT_NE(what.find(reason), std::string::npos) << what;
    }
  }
  runtime().barrier();
  EXPECT_TRUE(std::filesystem::exists(dir + "/step_00000003.h5")) << reason;
  EXPECT_EQ(latest(dir), "step_00000002.h5") << reason;
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointFaults, FailedListingOnResumeIsAnErrorEverywhere) {
  expect_failed_choice(FaultyFiles::List, "", "cannot list");
}

TEST(CheckpointFaults, FailedReadOfLatestOnResumeIsAnErrorEverywhere) {
  expect_failed_choice(FaultyFiles::ReadLatest, "/latest", "cannot read");
}

TEST(CheckpointFaults, FailedMoveAsideOnResumeIsAnErrorEverywhere) {
  expect_failed_choice(FaultyFiles::Rename, ".abandoned", "cannot rename");
}

// A good checkpoint, resumed under `fault`: an error on every rank naming the file and the tensor.
void expect_failed_restore(FaultyFiles::Fault fault, int rank, const std::string& dataset, const std::string& reason) {
  const std::string dir = temp_dir();
  const std::string path = train_and_save("name: adamw", 2, 3, dir);
  auto b = make_run("name: adamw", 4, 0, 4);
  {
    FaultyFiles faulty(fault, rank, dataset);
    Installed installed(&faulty);
    try {
      ckpt::restore(runtime(), *b.trainer, ckpt::read_resume_point(path, /*verify=*/false));
      ADD_FAILURE() << "the restore under " << reason << " succeeded";
    } catch (const meridian::UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(reason), std::string::npos) << what;
      EXPECT_NE(what.find(path), std::string::npos) << what;
      EXPECT_NE(what.find(dataset), std::string::npos) << what;
    }
  }
  runtime().barrier();
  if (runtime().rank() == 0) std::filesystem::remove_all(dir);
}

TEST(CheckpointFaults, ShortReadOnOneRankIsCaughtEverywhere) {
  expect_failed_restore(FaultyFiles::ShortRead, runtime().size() - 1, "model/model.embed_tokens.weight",
                        "checksum mismatch");
}

TEST(CheckpointFaults, ReadErrorOnEveryRankIsCaught) {
  expect_failed_restore(FaultyFiles::ReadError, -1, "optim/model.norm.weight/step", std::strerror(EIO));
}

}  // namespace
