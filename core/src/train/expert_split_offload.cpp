// The views of expert_split_offload.h: each slot forwards to the shared tier under its lock.
#include "train/expert_split_offload.h"

namespace keel {

struct SharedTierSlots {
  using View = SharedTier::View;
  static View& of(void* view) { return *static_cast<View*>(view); }
  static std::string named(const View& v, const char* name) { return v.prefix + (name ? name : ""); }

  static void destroy(void*) {}  // the core destroys the tier after the strategy
  static keel_status describe(void* view, keel_offload_info* out) {
    SharedTier& t = *of(view).shared;
    std::lock_guard<std::mutex> lock(t.calls_);
    return t.api_->describe(t.engine_, out);
  }
  static keel_status add_extent(void* view, const char* name, uint64_t bytes) {
    SharedTier& t = *of(view).shared;
    std::lock_guard<std::mutex> lock(t.calls_);
    return t.api_->add_extent(t.engine_, named(of(view), name).c_str(), bytes);
  }
  static keel_status submit_write(void* view, const char* name, uint64_t offset, const void* src, uint64_t bytes,
                                  uint64_t* ticket) {
    View& v = of(view);
    std::lock_guard<std::mutex> lock(v.shared->calls_);
    const keel_status status =
        v.shared->api_->submit_write(v.shared->engine_, named(v, name).c_str(), offset, src, bytes, ticket);
    if (status == KEEL_OK && *ticket != 0) v.in_flight.insert(*ticket);
    return status;
  }
  static keel_status submit_read(void* view, const char* name, uint64_t offset, void* dst, uint64_t bytes,
                                 uint64_t* ticket) {
    View& v = of(view);
    std::lock_guard<std::mutex> lock(v.shared->calls_);
    const keel_status status =
        v.shared->api_->submit_read(v.shared->engine_, named(v, name).c_str(), offset, dst, bytes, ticket);
    if (status == KEEL_OK && *ticket != 0) v.in_flight.insert(*ticket);
    return status;
  }
  static keel_status wait(void* view, uint64_t ticket) {
    View& v = of(view);
    std::lock_guard<std::mutex> lock(v.shared->calls_);
    v.in_flight.erase(ticket);
    return v.shared->api_->wait(v.shared->engine_, ticket);
  }
  // This view's requests only: the other half's errors stay for the other half's waits.
  static keel_status wait_all(void* view) {
    View& v = of(view);
    std::lock_guard<std::mutex> lock(v.shared->calls_);
    keel_status first = KEEL_OK;
    for (uint64_t ticket : v.in_flight) {
      const keel_status status = v.shared->api_->wait(v.shared->engine_, ticket);
      if (first == KEEL_OK) first = status;
    }
    v.in_flight.clear();
    return first;
  }
  static keel_status counters(void* view, keel_offload_counters* out) {
    SharedTier& t = *of(view).shared;
    std::lock_guard<std::mutex> lock(t.calls_);
    return t.api_->counters(t.engine_, out);
  }
  static keel_status alloc_buffer(void* view, uint64_t bytes, void** out) {
    SharedTier& t = *of(view).shared;
    std::lock_guard<std::mutex> lock(t.calls_);
    return t.api_->alloc_buffer(t.engine_, bytes, out);
  }
  static void free_buffer(void* view, void* buffer) {
    SharedTier& t = *of(view).shared;
    std::lock_guard<std::mutex> lock(t.calls_);
    t.api_->free_buffer(t.engine_, buffer);
  }
};

void* SharedTier::view(const std::string& prefix) {
  views_.push_back(std::make_unique<View>(View{this, prefix, {}}));
  return views_.back().get();
}

const keel_offload_api* SharedTier::table() {
  static const keel_offload_api api = [] {
    keel_offload_api t{};
    t.struct_size = sizeof(t);
    t.destroy = &SharedTierSlots::destroy;
    t.describe = &SharedTierSlots::describe;
    t.add_extent = &SharedTierSlots::add_extent;
    t.submit_write = &SharedTierSlots::submit_write;
    t.submit_read = &SharedTierSlots::submit_read;
    t.wait = &SharedTierSlots::wait;
    t.wait_all = &SharedTierSlots::wait_all;
    t.counters = &SharedTierSlots::counters;
    t.alloc_buffer = &SharedTierSlots::alloc_buffer;
    t.free_buffer = &SharedTierSlots::free_buffer;
    return t;
  }();
  return &api;
}

}  // namespace keel
