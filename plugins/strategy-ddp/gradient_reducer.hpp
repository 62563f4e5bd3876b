// The ddp communication thread: sums gradient regions over the data-parallel group with the
// comm plugin's BLOCKING all_reduce while the training thread goes on with the backward (MPI's
// non-blocking collectives do not progress without being polled, a thread does). The dp
// communicator is used only from this thread between submit() and wait_all(), which keeps
// comm.h's one-thread-at-a-time rule. A failure keeps the comm plugin's message and is
// rethrown by wait_all() on the training thread; the jobs queued after it are dropped, since a
// rank that failed a collective cannot rejoin the next one.
#pragma once

#include <keel/comm.h>
#include <keel/host.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

namespace keel_ddp {

class GradientReducer {
 public:
  GradientReducer(const keel_host* host, const keel_comm_api* comm, void* comm_obj);
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;
  ~GradientReducer();  // drops queued jobs, lets a running one finish, joins

  // Queues an in-place sum of `count` floats at `data`; `what` names it in error messages.
  void submit(float* data, int64_t count, std::string what);
  // Blocks until every submitted job ran or was dropped.
  void wait_idle();
  // wait_idle, then throws keel_support::StatusError for the first job that failed (and forgets
  // it, so the reducer can serve a later step).
  void wait_all();

 private:
  struct Job {
    float* data;
    int64_t count;
    std::string what;
  };
  void run();
  void reduce(const Job& job);

  const keel_host* host_;
  const keel_comm_api* comm_;
  void* comm_obj_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  keel_status error_code_ = KEEL_OK;
  std::string error_message_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace keel_ddp
