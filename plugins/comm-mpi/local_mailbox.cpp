// The world of one's self-addressed messages (see local_mailbox.hpp).
#include "local_mailbox.hpp"

#include <cstring>
#include <string>

namespace keel_mpi {
namespace {

void deliver(LocalReceive& receive, const void* data, size_t bytes) {
  if (bytes > receive.bytes)
    receive.error = "message truncated: " + std::to_string(bytes) + " bytes sent into a receive buffer of " +
                    std::to_string(receive.bytes) + " bytes";
  else if (bytes > 0)
    std::memcpy(receive.buffer, data, bytes);
  receive.done = true;
}

}  // namespace

void LocalMailbox::send(const void* data, size_t bytes, int tag) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if ((*it)->tag != tag) continue;
    deliver(**it, data, bytes);
    posted_.erase(it);
    return;
  }
  const auto* begin = static_cast<const unsigned char*>(data);
  unreceived_.push_back(Message{tag, std::vector<unsigned char>(begin, begin + bytes)});
}

std::shared_ptr<LocalReceive> LocalMailbox::receive(void* buffer, size_t bytes, int tag) {
  auto receive = std::make_shared<LocalReceive>(LocalReceive{buffer, bytes, tag, false, {}});
  for (auto it = unreceived_.begin(); it != unreceived_.end(); ++it) {
    if (it->tag != tag) continue;
    deliver(*receive, it->data.data(), it->data.size());
    unreceived_.erase(it);
    return receive;
  }
  posted_.push_back(receive);
  return receive;
}

void LocalMailbox::withdraw(const std::shared_ptr<LocalReceive>& receive) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it)
    if (*it == receive) return void(posted_.erase(it));
}

}  // namespace keel_mpi
