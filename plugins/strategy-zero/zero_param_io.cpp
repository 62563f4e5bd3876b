// The zero strategy's host access by global flat range, for checkpoints and bindings: what this
// rank owns (owned_range) and reads and writes within it. Below stage 3 every rank holds whole
// parameters, so read_param/write_param accept any range there; optimizer state, stage 2/3
// gradients and stage 3 parameters exist only for this rank's part of each tensor.
#include <string>

#include "zero_strategy.hpp"

namespace keel_zero {

using keel_support::StatusError;

namespace {

std::string param_label(const keel_param_spec& spec, size_t index) {
  return "parameter " + std::to_string(index) + " (\"" + (spec.name ? spec.name : "<unnamed>") + "\")";
}

}  // namespace

void ZeroStrategy::check_range(const char* what, size_t index, int64_t begin, int64_t count,
                               const void* host_ptr) const {
  if (index >= layout_.params.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": parameter index " + std::to_string(index) +
                                                     " is outside [0, " + std::to_string(layout_.params.size()) + ")");
  const int64_t numel = layout_.params[index].numel;
  if (begin < 0 || count < 0 || begin > numel || count > numel - begin)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": " + param_label(specs_[index], index) +
                                                     " has " + std::to_string(numel) + " elements; " +
                                                     std::to_string(count) + " elements from element " +
                                                     std::to_string(begin) + " do not fit");
  if (count > 0 && !host_ptr)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": the host buffer is NULL");
}

void ZeroStrategy::check_owned(const char* what, const char* kind, size_t index, int64_t begin, int64_t count) const {
  const ElementRange owned = layout_.owned_part(index);
  if (count == 0 || (begin >= owned.begin && begin + count <= owned.end)) return;
  throw StatusError(KEEL_ERR_INVALID_ARGUMENT,
                    std::string(what) + ": " + param_label(specs_[index], index) + "'s " + kind + " is sharded (ZeRO stage " +
                        std::to_string(config_.stage) + ", rank " + std::to_string(layout_.rank) + " of " +
                        std::to_string(layout_.size) + "): this rank holds elements [" + std::to_string(owned.begin) +
                        ", " + std::to_string(owned.end) + "), not [" + std::to_string(begin) + ", " +
                        std::to_string(begin + count) + "); stay within owned_range");
}

float* ZeroStrategy::state_slot(const char* what, int32_t slot) const {
  if (slot < 0 || size_t(slot) >= optimizer_state_.size())
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, std::string(what) + ": state slot " + std::to_string(slot) +
                                                     " is outside [0, " + std::to_string(optimizer_state_.size()) +
                                                     ") (the optimizer's n_state_slots)");
  return optimizer_state_[size_t(slot)].floats();
}

void ZeroStrategy::owned_range(int32_t kind, size_t index, int64_t* begin, int64_t* end) const {
  if (!begin || !end) throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "owned_range: begin or end is NULL");
  check_range("owned_range", index, 0, 0, nullptr);
  if (kind != -1) state_slot("owned_range", kind);
  const ElementRange owned = (kind == -1 && config_.stage < 3) ? ElementRange{0, layout_.params[index].numel}
                                                               : layout_.owned_part(index);
  *begin = owned.begin;
  *end = owned.end;
}

void ZeroStrategy::read_param(size_t index, int64_t begin, int64_t count, float* dst_host) const {
  check_range("read_param", index, begin, count, dst_host);
  if (config_.stage == 3) check_owned("read_param", "parameter", index, begin, count);
  if (count > 0) backend_.copy(dst_host, param_element(index, begin), count, KEEL_COPY_DEVICE_TO_HOST);
}

void ZeroStrategy::write_param(size_t index, int64_t begin, int64_t count, const float* src_host) {
  check_range("write_param", index, begin, count, src_host);
  if (config_.stage == 3) check_owned("write_param", "parameter", index, begin, count);
  if (count == 0) return;
  backend_.copy(param_element(index, begin), src_host, count, KEEL_COPY_HOST_TO_DEVICE);
  if (gather_) gather_->forget_unheld(layout_.params[index].layer);  // a prefetched copy is stale now
}

// Stage 1: the full local buffer (this rank's own gradients; after the reduction its owned
// part holds the mean). Stages 2/3: the owned part, the mean over ranks reduced so far.
void ZeroStrategy::read_grad(size_t index, int64_t begin, int64_t count, float* dst_host) {
  check_range("read_grad", index, begin, count, dst_host);
  grads_.settle();
  if (count == 0) return;
  if (config_.stage == 1)
    return backend_.copy(dst_host, grads_.persistent() + layout_.full_position(index, begin), count,
                         KEEL_COPY_DEVICE_TO_HOST);
  check_owned("read_grad", "gradient", index, begin, count);
  backend_.copy(dst_host, grads_.persistent() + layout_.shard_position(index, begin), count, KEEL_COPY_DEVICE_TO_HOST);
}

void ZeroStrategy::read_state(int32_t slot, size_t index, int64_t begin, int64_t count, float* dst_host) const {
  check_range("read_state", index, begin, count, dst_host);
  const float* state = state_slot("read_state", slot);
  check_owned("read_state", "optimizer state", index, begin, count);
  if (count > 0)
    backend_.copy(dst_host, state + layout_.shard_position(index, begin), count, KEEL_COPY_DEVICE_TO_HOST);
}

void ZeroStrategy::write_state(int32_t slot, size_t index, int64_t begin, int64_t count, const float* src_host) {
  check_range("write_state", index, begin, count, src_host);
  float* state = state_slot("write_state", slot);
  check_owned("write_state", "optimizer state", index, begin, count);
  if (count > 0)
    backend_.copy(state + layout_.shard_position(index, begin), src_host, count, KEEL_COPY_HOST_TO_DEVICE);
}

}  // namespace keel_zero
