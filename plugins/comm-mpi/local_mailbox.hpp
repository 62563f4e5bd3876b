// Point-to-point in a world of one (no launcher, no MPI): a rank sending to itself. Messages
// match receives by tag in order, as MPI matches them, so a single-process run behaves like
// `mpirun -np 1`.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace keel_mpi {

// A receive, matched at once or later by a send, which fills it and sets done. As in MPI, a
// message longer than the buffer is the receiver's error, reported when it completes.
struct LocalReceive {
  void* buffer;
  size_t bytes;
  int tag;
  bool done = false;
  std::string error;  // set with done when the message did not fit
};

class LocalMailbox {
 public:
  // Delivers into the oldest posted receive with this tag, or keeps a copy until one is posted.
  void send(const void* data, size_t bytes, int tag);
  // Completes at once when a message with this tag is waiting; otherwise posts the receive.
  std::shared_ptr<LocalReceive> receive(void* buffer, size_t bytes, int tag);
  // Withdraws a posted receive that nothing will complete, so no later send writes into it.
  void withdraw(const std::shared_ptr<LocalReceive>& receive);

 private:
  struct Message {
    int tag;
    std::vector<unsigned char> data;
  };
  std::deque<Message> unreceived_;
  std::deque<std::shared_ptr<LocalReceive>> posted_;
};

}  // namespace keel_mpi
