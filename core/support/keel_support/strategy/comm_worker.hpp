// A strategy's communication thread: runs collectives, in the order they were submitted, on a
// communicator that this thread alone uses while work is queued, so the training thread goes on
// with the backward pass (MPI's non-blocking collectives do not progress unless polled; a thread
// does). ddp all-reduces gradient buckets on it, zero reduce-scatters each finished layer.
//
// comm.h allows one thread per communicator at a time: between submit() and wait_idle() the
// communicator belongs to this thread. A strategy that also communicates from the training
// thread meanwhile (ZeRO-3's parameter gathers) gives the worker a communicator of its own,
// split from its group. The backend is never touched here (backend.h: one thread at a time):
// jobs only move bytes, and the training thread does the arithmetic once they are done.
//
// A failure keeps the comm plugin's message (host->last_error, thread-local) and is rethrown
// by wait_all() on the training thread; jobs queued after it are dropped, since a rank that
// failed a collective cannot rejoin the next one.
#pragma once

#include <keel/comm.h>
#include <keel/host.h>
#include <keel/plugin.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "keel_support/common/abi_guard.hpp"

namespace keel_support {

class CommWorker {
 public:
  // One collective on the worker's communicator; returns the comm plugin's status.
  using Job = std::function<keel_status(const keel_comm_api* comm, void* comm_obj)>;

  CommWorker(const keel_host* host, const keel_comm_api* comm, void* comm_obj)
      : host_(host), comm_(comm), comm_obj_(comm_obj), thread_([this] { run(); }) {}
  CommWorker(const CommWorker&) = delete;
  CommWorker& operator=(const CommWorker&) = delete;
  // Runs what is still queued, then joins: every rank queued the same collectives, so a peer's
  // worker may already be waiting in the next one. (A peer that died is the comm plugin's
  // watchdog's business: it ends the world.) After a failure the rest is dropped, as always.
  ~CommWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // Queues `job`; `what` names it in an error message ("gradient bucket 3 (layers 4..7)").
  // Returns the job's ticket: jobs finish in ticket order.
  uint64_t submit(Job job, std::string what) {
    uint64_t ticket;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back({std::move(job), std::move(what)});
      ticket = ++submitted_;
    }
    changed_.notify_all();
    return ticket;
  }
  // Jobs with a ticket up to this one have finished (or were dropped after a failure).
  uint64_t finished() {
    std::lock_guard<std::mutex> lock(mutex_);
    return finished_;
  }
  // Blocks until every submitted job ran or was dropped.
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return finished_ == submitted_; });
  }
  // wait_idle, then throws StatusError for the first job that failed (and forgets it, so the
  // worker can serve a later step).
  void wait_all() {
    wait_idle();
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_code_ == KEEL_OK) return;
    const keel_status code = error_code_;
    const std::string message = std::move(error_message_);
    error_code_ = KEEL_OK;
    error_message_.clear();
    throw StatusError(code, message);
  }

 private:
  struct Queued {
    Job job;
    std::string what;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      Queued next = std::move(queue_.front());
      queue_.pop_front();
      if (error_code_ == KEEL_OK) {  // else dropped: see the top of the file
        lock.unlock();
        const keel_status status = next.job(comm_, comm_obj_);
        std::string detail;
        if (status != KEEL_OK) {
          const char* message = KEEL_HAS_SLOT(host_, last_error) ? host_->last_error() : nullptr;
          detail = message && *message ? message
                                       : "the comm plugin returned status " + std::to_string(status) + " without a message";
        }
        lock.lock();
        if (status != KEEL_OK && error_code_ == KEEL_OK) {
          error_code_ = status;
          error_message_ = next.what + " failed: " + detail;
        }
      }
      ++finished_;
      changed_.notify_all();
    }
  }

  const keel_host* host_;
  const keel_comm_api* comm_;
  void* comm_obj_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Queued> queue_;
  uint64_t submitted_ = 0, finished_ = 0;
  bool stopping_ = false;
  keel_status error_code_ = KEEL_OK;
  std::string error_message_;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace keel_support
