// A submit the kernel refuses for want of resources (EAGAIN) while a read it holds waits on a
// slow device (a pipe): the pump waits for that read to come back, which frees resources, before
// it submits again; it does not retry in a busy loop. Before the fix it called submit again at
// once, over and over, until the device answered.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "nvme_engine.hpp"
#include "offload_test_support.hpp"
#include "uring_pump.hpp"

namespace {

using keel_support::AlignedBuffer;
using keel_support::Ticket;

constexpr uint64_t kBlock = 4096;

// The hook: counts submits; once armed, refuses them with EAGAIN until the slow device answered.
std::mutex hook_mutex;
std::condition_variable hook_called;
unsigned submits_seen = 0;
unsigned submits_refused = 0;
bool refuse_submits = false;
bool device_answered = false;

int refuse_until_answered(unsigned) {
  std::lock_guard<std::mutex> lock(hook_mutex);
  submits_seen++;
  bool refuse = refuse_submits && !device_answered;
  if (refuse) submits_refused++;
  hook_called.notify_all();
  return refuse ? EAGAIN : 0;
}

void wait_for_hook(const unsigned& counter, unsigned count) {
  std::unique_lock<std::mutex> lock(hook_mutex);
  hook_called.wait(lock, [&] { return counter >= count; });
}

TEST(NvmePump, ARefusedSubmitWaitsForAPieceInTheKernelInsteadOfRetryingAtOnce) {
  offload_test::ScratchFolder folder;
  offload_test::require_direct_io(folder.path());
  if (HasFatalFailure()) return;
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    submits_seen = submits_refused = 0;
    refuse_submits = device_answered = false;
  }
  keel_offload::set_before_submit_hook_for_tests(refuse_until_answered);
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

  wait_for_hook(submits_seen, 1);  // the pump's first submit: its wake-up read alone
  AlignedBuffer landed(kBlock, kBlock);
  Ticket slow = engine.submit_read("slow", 0, landed.data(), kBlock);
  wait_for_hook(submits_seen, 2);  // the submit that takes the slow read into the kernel is under way
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    refuse_submits = true;
  }
  AlignedBuffer fast_bytes = offload_test::random_bytes(kBlock, 12);
  Ticket fast = engine.submit_write("fast", 0, fast_bytes.data(), kBlock);
  wait_for_hook(submits_refused, 1);
  unsigned refused_before_answer;
  {
    std::lock_guard<std::mutex> lock(hook_mutex);
    device_answered = true;
    refused_before_answer = submits_refused;
  }
  AlignedBuffer bytes = offload_test::random_bytes(kBlock, 13);
  ASSERT_EQ(ssize_t(kBlock), write(pipe_fds[1], bytes.data(), kBlock));  // the slow device answers
  std::string error;
  try {
    engine.wait(slow);
    engine.wait(fast);
  } catch (const keel_support::StatusError& caught) {
    error = caught.what();
  }
  close(pipe_fds[1]);
  keel_offload::set_before_submit_hook_for_tests(nullptr);

  EXPECT_EQ("", error);
  EXPECT_EQ(1u, refused_before_answer)
      << "the pump called submit " << refused_before_answer << " times while the only thing that could free "
      << "resources was the read in the kernel; expected it to wait for that read after the first refusal";
  EXPECT_EQ(0, std::memcmp(landed.data(), bytes.data(), kBlock)) << "the slow read's bytes did not land";
  AlignedBuffer back(kBlock, kBlock);
  engine.wait(engine.submit_read("fast", 0, back.data(), kBlock));
  EXPECT_EQ(0, std::memcmp(back.data(), fast_bytes.data(), kBlock)) << "the refused write did not land when retried";
}

}  // namespace
