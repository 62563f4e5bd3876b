// A replaced global operator new: malloc underneath, plus a per-thread countdown to an injected
// std::bad_alloc and process-wide counters. The array and nothrow forms of the standard library
// call these, so they are covered too; aligned new is left alone (the engines do not use it).
#include "allocation_faults.hpp"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

thread_local uint64_t allocations_until_failure = 0;  // 0: none armed
thread_local bool failure_happened = false;
std::atomic<int> counters_live{0};
std::atomic<uint64_t> counted_bytes{0};
std::atomic<uint64_t> counted_calls{0};

void* allocate(std::size_t bytes) {
  if (allocations_until_failure != 0 && --allocations_until_failure == 0) {
    failure_happened = true;
    throw std::bad_alloc();
  }
  if (counters_live.load(std::memory_order_relaxed) != 0) {
    counted_bytes.fetch_add(bytes, std::memory_order_relaxed);
    counted_calls.fetch_add(1, std::memory_order_relaxed);
  }
  void* memory = std::malloc(bytes == 0 ? 1 : bytes);
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}

}  // namespace

void* operator new(std::size_t bytes) { return allocate(bytes); }
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return allocate(bytes);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
void operator delete(void* memory, const std::nothrow_t&) noexcept { std::free(memory); }

namespace offload_test {

void fail_nth_allocation_on_this_thread(uint64_t n) {
  failure_happened = false;
  allocations_until_failure = n;
}

bool disarm_allocation_failure() {
  allocations_until_failure = 0;
  return failure_happened;
}

AllocationCount::AllocationCount() {
  counted_bytes = 0;
  counted_calls = 0;
  counters_live++;
}
AllocationCount::~AllocationCount() { counters_live--; }
uint64_t AllocationCount::bytes() const { return counted_bytes.load(); }
uint64_t AllocationCount::calls() const { return counted_calls.load(); }

}  // namespace offload_test
