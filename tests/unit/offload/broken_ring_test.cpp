// The ring fails (the test's hook refuses a submit with ENOMEM) while a read is in the kernel on
// a slow device (a pipe nobody has written to yet) and signals hit the pump's thread. The piece
// that never reached the kernel fails at once with an error naming the ring; the read in the
// kernel is waited out however long it takes, and lands; later requests fail with the same
// error. Before the fix the pump gave up after 1 s (or at the first signal) and failed the read
// while the kernel could still write into its buffer.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "nvme_engine.hpp"
#include "offload_test_support.hpp"
#include "uring_pump.hpp"

namespace {

using keel_support::AlignedBuffer;
using keel_support::Ticket;

constexpr uint64_t kBlock = 4096;

// The hook: counts submits; once armed, refuses every later one with ENOMEM.
std::mutex hook_mutex;
std::condition_variable hook_called;
unsigned submits_seen = 0;
bool refuse_submits = false;

int refuse_when_armed(unsigned) {
  std::lock_guard<std::mutex> lock(hook_mutex);
  submits_seen++;
  hook_called.notify_all();
  return refuse_submits ? ENOMEM : 0;
}

void wait_for_submits(unsigned count) {
  std::unique_lock<std::mutex> lock(hook_mutex);
  hook_called.wait(lock, [&] { return submits_seen >= count; });
}

void interrupt(int) {}

// Sends SIGUSR1 to every thread of this process but the caller's: the engine's pump thread.
void interrupt_other_threads() {
  pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    pid_t thread = std::stoi(entry.path().filename().string());
    if (thread != self) syscall(SYS_tgkill, getpid(), thread, SIGUSR1);
  }
}

TEST(NvmeBrokenRing, WaitsOutWhatTheKernelHoldsAndFailsEverythingElseWithTheRingsError) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  struct sigaction handler {}, previous{};
  handler.sa_handler = interrupt;  // no SA_RESTART: a wait in the kernel returns EINTR
  sigemptyset(&handler.sa_mask);
  ASSERT_EQ(0, sigaction(SIGUSR1, &handler, &previous));
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    submits_seen = 0;
    refuse_submits = false;
  }
  keel_offload::set_before_submit_hook_for_tests(refuse_when_armed);

  keel_offload::NvmeEngineConfig config;
  config.folder = folder.path();
  config.capacity_bytes = 1 << 20;
  config.queue_depth = 4;
  config.block_bytes = kBlock;
  keel_offload::NvmeEngine engine(config);
  engine.add_extent("slow", kBlock);
  engine.add_extent("fast", kBlock);
  int slow_fd = offload_test::descriptor_of(engine.files_folder() + "/0-slow.extent");
  ASSERT_GE(slow_fd, 0);
  int pipe_fds[2];
  ASSERT_EQ(0, pipe(pipe_fds));
  ASSERT_EQ(slow_fd, dup2(pipe_fds[0], slow_fd));  // reads of "slow" now wait for the pipe
  close(pipe_fds[0]);

  wait_for_submits(1);  // the pump's first submit: its wake-up read alone
  AlignedBuffer landed(kBlock, kBlock);
  Ticket slow = engine.submit_read("slow", 0, landed.data(), kBlock);
  wait_for_submits(2);  // the submit that takes the slow read into the kernel is under way
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    refuse_submits = true;
  }
  AlignedBuffer other(kBlock, kBlock);
  Ticket fast = engine.submit_read("fast", 0, other.data(), kBlock);
  auto fast_error = offload_test::error_of([&] { engine.wait(fast); });
  auto later_error = offload_test::error_of([&] { engine.wait(engine.submit_read("fast", 0, other.data(), kBlock)); });
  for (int i = 0; i < 3; ++i) interrupt_other_threads();  // the pump waits on: signals must not end its wait

  AlignedBuffer bytes = offload_test::random_bytes(kBlock, 11);
  ASSERT_EQ(ssize_t(kBlock), write(pipe_fds[1], bytes.data(), kBlock));  // the slow device answers at last
  std::string slow_error;
  try {
    engine.wait(slow);
  } catch (const keel_support::StatusError& error) {
    slow_error = error.what();
  }
  close(pipe_fds[1]);
  keel_offload::set_before_submit_hook_for_tests(nullptr);
  sigaction(SIGUSR1, &previous, nullptr);

  EXPECT_EQ(KEEL_ERR_IO, fast_error.code);
  EXPECT_NE(fast_error.message.find("nvme engine: io_uring_submit failed: "), std::string::npos) << fast_error.message;
  EXPECT_NE(fast_error.message.find("(errno " + std::to_string(ENOMEM) + ")"), std::string::npos) << fast_error.message;
  EXPECT_EQ(fast_error.message, later_error.message) << "a request after the ring broke";
  EXPECT_EQ("", slow_error) << "the read the kernel held was failed before it finished; its buffer could still "
                               "have been written after the caller was told it was done";
  EXPECT_EQ(0, std::memcmp(landed.data(), bytes.data(), kBlock)) << "the slow read's bytes did not land";
}

}  // namespace
