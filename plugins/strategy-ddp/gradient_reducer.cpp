// The communication thread's loop and its error hand-off (see gradient_reducer.hpp).
#include "gradient_reducer.hpp"

#include <keel_support/abi_guard.hpp>

#include "thread_error.hpp"

namespace keel_ddp {

GradientReducer::GradientReducer(const keel_host* host, const keel_comm_api* comm, void* comm_obj)
    : host_(host), comm_(comm), comm_obj_(comm_obj), thread_([this] { run(); }) {}

GradientReducer::~GradientReducer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void GradientReducer::submit(float* data, int64_t count, std::string what) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back({data, count, std::move(what)});
  }
  changed_.notify_all();
}

void GradientReducer::wait_idle() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void GradientReducer::wait_all() {
  wait_idle();
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_code_ == KEEL_OK) return;
  const keel_status code = error_code_;
  const std::string message = std::move(error_message_);
  error_code_ = KEEL_OK;
  error_message_.clear();
  throw keel_support::StatusError(code, message);
}

void GradientReducer::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;  // queued jobs are dropped: the other ranks may be gone
    Job job = std::move(queue_.front());
    queue_.pop_front();
    if (error_code_ != KEEL_OK) {  // dropped: see the header
      changed_.notify_all();
      continue;
    }
    busy_ = true;
    lock.unlock();
    reduce(job);
    lock.lock();
    busy_ = false;
    changed_.notify_all();
  }
}

void GradientReducer::reduce(const Job& job) {
  const keel_dtype fp32 = {KEEL_DTYPE_FLOAT, 32, 1};
  const keel_status status = comm_->all_reduce(comm_obj_, job.data, job.data, static_cast<size_t>(job.count), fp32,
                                               KEEL_REDUCE_SUM, nullptr);
  if (status == KEEL_OK) return;
  std::string detail = this_thread_last_error(host_);
  if (detail.empty()) detail = "the comm plugin returned status " + std::to_string(status) + " without a message";
  std::lock_guard<std::mutex> lock(mutex_);
  error_code_ = status;
  error_message_ = "data-parallel all_reduce of " + job.what + " failed: " + detail;
}

}  // namespace keel_ddp
