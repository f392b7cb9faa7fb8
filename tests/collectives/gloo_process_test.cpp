// Ranks as separate processes: the torchrun-style launch path, through
// gloo's FileStore. The rank program is gloo_rank_process.cpp.
#include <gtest/gtest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

struct Exit {
  bool finished = false;
  int code = -1;
};

// Starts ranks [0, started) of a `world`-rank job; returns their exit codes,
// killing any still running after `limit` so a hang fails instead of blocking.
// `mode` is the rank program's FP8C_TEST_MODE (gloo_rank_process.cpp).
std::vector<Exit> run_processes(int world, int started, int timeout_ms, std::chrono::seconds limit,
                                const std::string& mode = "") {
  const auto store = std::filesystem::temp_directory_path() /
                     ("fp8c_gloo_store_" + std::to_string(::getpid()) + "_" +
                      std::to_string(world) + "_" + std::to_string(started) + mode);
  std::filesystem::remove_all(store);
  std::vector<pid_t> pids;
  for (int rank = 0; rank < started; ++rank) {
    std::vector<std::string> env_text;
    for (char** entry = environ; *entry != nullptr; ++entry) env_text.emplace_back(*entry);
    env_text.push_back("RANK=" + std::to_string(rank));
    env_text.push_back("WORLD_SIZE=" + std::to_string(world));
    env_text.push_back("LOCAL_RANK=" + std::to_string(rank));
    env_text.push_back("MASTER_ADDR=127.0.0.1");
    env_text.push_back("MASTER_PORT=29500");
    env_text.push_back("FP8C_TEST_STORE_DIR=" + store.string());
    env_text.push_back("FP8C_TEST_TIMEOUT_MS=" + std::to_string(timeout_ms));
    if (!mode.empty()) env_text.push_back("FP8C_TEST_MODE=" + mode);
    std::vector<char*> env;
    for (std::string& text : env_text) env.push_back(text.data());
    env.push_back(nullptr);
    std::string program = FP8C_GLOO_RANK_PROCESS;
    char* argv[] = {program.data(), nullptr};
    pid_t pid = 0;
    EXPECT_EQ(posix_spawn(&pid, program.c_str(), nullptr, nullptr, argv, env.data()), 0);
    pids.push_back(pid);
  }
  std::vector<Exit> exits(pids.size());
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    int status = 0;
    while (true) {
      const pid_t done = ::waitpid(pids[i], &status, WNOHANG);
      if (done == pids[i]) {
        exits[i] = {true, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)};
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  std::filesystem::remove_all(store);
  return exits;
}

TEST(GlooProcessTest, FourProcessesRunCollectivesThroughFileStore) {
  const auto exits = run_processes(4, 4, 20000, std::chrono::seconds(40));
  for (std::size_t rank = 0; rank < exits.size(); ++rank) {
    EXPECT_TRUE(exits[rank].finished) << "rank " << rank << " hung";
    EXPECT_EQ(exits[rank].code, 0) << "rank " << rank;
  }
}

void expect_every_rank_succeeded(const std::vector<Exit>& exits) {
  for (std::size_t rank = 0; rank < exits.size(); ++rank) {
    EXPECT_TRUE(exits[rank].finished) << "rank " << rank << " hung";
    EXPECT_EQ(exits[rank].code, 0) << "rank " << rank;
  }
}

// ring_shift between processes: bit-exact data with untouched guard bytes
// on several dtypes and counts, count 0; then a mismatched count
// (kMismatch on every rank) and overlapping buffers (kInvalidArgument).
TEST(GlooProcessTest, TwoProcessesRingShiftBitForBit) {
  expect_every_rank_succeeded(run_processes(2, 2, 20000, std::chrono::seconds(40), "ring_shift"));
}

TEST(GlooProcessTest, ThreeProcessesRingShiftBitForBit) {
  expect_every_rank_succeeded(run_processes(3, 3, 20000, std::chrono::seconds(40), "ring_shift"));
}

TEST(GlooProcessTest, RingShiftMismatchFailsOnEveryProcess) {
  for (const int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " processes");
    expect_every_rank_succeeded(
        run_processes(world, world, 20000, std::chrono::seconds(40), "ring_shift_mismatch"));
  }
}

TEST(GlooProcessTest, RingShiftOverlapIsRefusedOnEveryProcess) {
  for (const int world : {2, 3}) {
    SCOPED_TRACE(std::to_string(world) + " processes");
    expect_every_rank_succeeded(
        run_processes(world, world, 20000, std::chrono::seconds(40), "ring_shift_overlap"));
  }
}

TEST(GlooProcessTest, MissingProcessMakesOthersFailWithCollectiveErrorNotHang) {
  const auto exits = run_processes(3, 2, 1000, std::chrono::seconds(20));
  for (std::size_t rank = 0; rank < exits.size(); ++rank) {
    EXPECT_TRUE(exits[rank].finished) << "rank " << rank << " hung";
    EXPECT_EQ(exits[rank].code, 2) << "rank " << rank << " (2 = CollectiveError)";
  }
}

}  // namespace
