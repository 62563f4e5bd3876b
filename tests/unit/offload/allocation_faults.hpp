// The fault tests' view of the heap: this binary replaces the global operator new (in
// allocation_faults.cpp) so that a test can make the n-th allocation on its own thread fail, as
// a process out of memory would, and can count what every thread allocates during a call. Only
// the keel_offload_fault_tests binary links it: the other tests keep the ordinary allocator.
#pragma once

#include <cstdint>

namespace offload_test {

// From now on, the `n`-th (1-based) operator new on this thread throws std::bad_alloc, once.
void fail_nth_allocation_on_this_thread(uint64_t n);
// Stops a failure that has not happened yet; returns whether the armed failure did happen.
bool disarm_allocation_failure();

// Counts the calls and bytes of operator new on every thread while it lives.
class AllocationCount {
 public:
  AllocationCount();
  ~AllocationCount();
  AllocationCount(const AllocationCount&) = delete;
  AllocationCount& operator=(const AllocationCount&) = delete;
  uint64_t bytes() const;
  uint64_t calls() const;
};

}  // namespace offload_test
