// A fake keel_comm_api for unit tests: P "ranks" are P threads of one process, so a strategy or
// a model can be tested across data-parallel ranks without MPI. ThreadWorld(P) makes P world
// communicators sharing one group (mutex, condition variable, per-rank slots); split makes new
// groups the same way. Every collective is two barriers: each rank posts its buffers, computes
// its own result from everyone's inputs into private memory, waits until all have read, then
// writes its output — so in-place calls are safe, and sums run in rank order (deterministic).
// Counters follow comm.h exactly: all_reduce 2n, reduce_scatter n input bytes, all_gather n
// output bytes, broadcast n on every rank, send n, recv n, all_to_all_v the bytes sent to the
// other ranks; a group of one counts nothing.
// Non-blocking forms complete at the call (recv at wait, so irecv-then-send cannot deadlock).
// Collectives take fp32 and int32; send and recv move bf16 too.
// abort_world records the reason and throws ThreadWorldAborted; a test can make an operation
// fail on every rank with fail_calls().
#pragma once

#include <keel/comm.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace keel_test {

struct ThreadWorldAborted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class ThreadWorld;

namespace thread_comm_detail {

struct Group;

// What one rank posts for a collective; only that rank writes its slot, others read it
// between the two barriers.
struct Slot {
  const void* send = nullptr;
  size_t count = 0;
  int32_t op = 0;
  int32_t root = 0;
  keel_dtype dtype{};
  int32_t kind = -1;  // KEEL_COMM_* of the posted call, to catch ranks calling different collectives
  int32_t color = 0, key = 0;
  const size_t* send_counts = nullptr;  // all_to_all_v's, size entries each
  const size_t* recv_counts = nullptr;
  // split's answer, written by the group's rank 0 before the second barrier.
  std::shared_ptr<Group> new_group;
  int32_t new_rank = -1;
};

struct Group {
  explicit Group(int32_t n) : size(n), slots(static_cast<size_t>(n)) {}
  const int32_t size;
  std::mutex mutex;
  std::condition_variable changed;
  int32_t arrived = 0;
  uint64_t generation = 0;
  std::vector<Slot> slots;
  // send/recv: messages from (source, destination, tag), in order.
  std::map<std::tuple<int32_t, int32_t, int32_t>, std::deque<std::vector<char>>> mailboxes;
};

struct Communicator {
  ThreadWorld* world;
  std::shared_ptr<Group> group;
  int32_t rank;
  keel_comm_counters counters{};
  Communicator* parent = nullptr;  // split from; its counters include this one's (comm.h)
};

// A request whose work (if any) runs at wait.
struct PendingRequest {
  std::function<void()> finish;
};

}  // namespace thread_comm_detail

class ThreadWorld {
 public:
  // `host` (optional, outlives the world) receives error messages through set_error.
  explicit ThreadWorld(int32_t size, const keel_host* host = nullptr) : host_(host) {
    auto group = std::make_shared<thread_comm_detail::Group>(size);
    for (int32_t r = 0; r < size; ++r) world_.push_back(make_comm(group, r));
  }
  ThreadWorld(const ThreadWorld&) = delete;
  ThreadWorld& operator=(const ThreadWorld&) = delete;

  int32_t size() const { return static_cast<int32_t>(world_.size()); }
  // Rank r's world communicator; owned by the world (do not destroy it).
  void* comm(int32_t rank) { return world_.at(static_cast<size_t>(rank)); }
  const keel_comm_api* api() const { return &table(); }

  // Runs body(rank) on one thread per rank and joins them; rethrows the first exception.
  template <typename Body>
  void run(Body&& body) {
    std::vector<std::exception_ptr> errors(world_.size());
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < size(); ++r)
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
          abort_quietly();  // the other ranks must not hang in a collective
        }
      });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // From now on every call of `kind` (KEEL_COMM_*) on every rank fails with `message` before
  // communicating, so no rank waits for another; an empty message stops the failures.
  void fail_calls(int32_t kind, const std::string& message) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    failures_[kind] = message;
  }

  std::vector<std::string> abort_reasons() const {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return abort_reasons_;
  }

  static keel_comm_counters counters_of(void* comm) {
    keel_comm_counters out{};
    out.struct_size = sizeof(out);
    table().counters(comm, &out);
    return out;
  }

  ~ThreadWorld() {
    for (void* c : world_) delete static_cast<thread_comm_detail::Communicator*>(c);
  }

  // --- the keel_comm_api slots ---
  static const keel_comm_api& table() {
    static const keel_comm_api api = [] {
      keel_comm_api t{};
      t.struct_size = sizeof(t);
      t.destroy = [](void* c) { delete self(c); };
      t.rank = [](void* c, int32_t* out) -> keel_status { *out = self(c)->rank; return KEEL_OK; };
      t.size = [](void* c, int32_t* out) -> keel_status { *out = self(c)->group->size; return KEEL_OK; };
      t.split = split;
      t.all_reduce = all_reduce;
      t.reduce_scatter = reduce_scatter;
      t.all_gather = all_gather;
      t.broadcast = broadcast;
      t.send = send;
      t.recv = recv;
      t.barrier = barrier;
      t.wait = wait;
      t.counters = [](void* c, keel_comm_counters* out) -> keel_status {
        std::lock_guard<std::mutex> lock(self(c)->world->state_mutex_);
        const size_t size = std::min(out->struct_size, sizeof(keel_comm_counters));
        std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
                    reinterpret_cast<const char*>(&self(c)->counters) + sizeof(size_t), size - sizeof(size_t));
        return KEEL_OK;
      };
      t.abort_world = abort_world;
      t.all_to_all_v = all_to_all_v;
      return t;
    }();
    return api;
  }

 private:
  using Communicator = thread_comm_detail::Communicator;
  using Group = thread_comm_detail::Group;
  using Slot = thread_comm_detail::Slot;

  // An error inside a slot: the code and message handed to the host.
  struct Failure {
    keel_status code;
    std::string message;
  };

  void* make_comm(std::shared_ptr<Group> group, int32_t rank) {
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      groups_.push_back(group);
    }
    auto* c = new Communicator{this, std::move(group), rank, {}};
    c->counters.struct_size = sizeof(keel_comm_counters);
    return c;
  }
  static Communicator* self(void* c) { return static_cast<Communicator*>(c); }

  template <typename Body>
  static keel_status guarded(void* c, Body&& body) {
    try {
      body(*self(c));
      return KEEL_OK;
    } catch (const Failure& f) {
      const keel_host* host = self(c)->world->host_;
      return host ? host->set_error(f.code, f.message.c_str()) : f.code;
    }
  }

  static size_t element_bytes(keel_dtype dtype) {
    const bool fp32 = dtype.code == KEEL_DTYPE_FLOAT && dtype.bits == 32 && dtype.lanes == 1;
    const bool int32 = dtype.code == KEEL_DTYPE_INT && dtype.bits == 32 && dtype.lanes == 1;
    if (!fp32 && !int32) throw Failure{KEEL_ERR_UNIMPLEMENTED, "thread_comm: only fp32 and int32 are supported"};
    return 4;
  }

  // Point-to-point messages only move bytes: bf16 (pipeline activations, context parallelism's
  // key/value chunks at that compute type) as well.
  static size_t moved_bytes(keel_dtype dtype) {
    if (dtype.code == KEEL_DTYPE_BFLOAT && dtype.bits == 16 && dtype.lanes == 1) return 2;
    return element_bytes(dtype);
  }

  void check_injected(int32_t kind) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    auto it = failures_.find(kind);
    if (it != failures_.end() && !it->second.empty()) throw Failure{KEEL_ERR_IO, it->second};
    if (aborted_) throw Failure{KEEL_ERR_INTERNAL, "thread_comm: the world was aborted"};
  }

  // Waits until every rank of the group arrived; throws if the world was aborted meanwhile.
  static void group_barrier(Communicator& c) {
    Group& g = *c.group;
    std::unique_lock<std::mutex> lock(g.mutex);
    const uint64_t generation = g.generation;
    if (++g.arrived == g.size) {
      g.arrived = 0;
      ++g.generation;
      g.changed.notify_all();
      return;
    }
    g.changed.wait(lock, [&] { return g.generation != generation || c.world->is_aborted(); });
    if (g.generation == generation) throw Failure{KEEL_ERR_INTERNAL, "thread_comm: the world was aborted"};
  }

  bool is_aborted() {
    std::lock_guard<std::mutex> lock(state_mutex_);
    return aborted_;
  }

  // Marks the world aborted and wakes every rank waiting in any group.
  void abort_quietly() {
    std::vector<std::shared_ptr<Group>> groups;
    {
      std::lock_guard<std::mutex> lock(state_mutex_);
      aborted_ = true;
      for (auto& weak : groups_)
        if (auto g = weak.lock()) groups.push_back(std::move(g));
    }
    for (auto& g : groups) wake_all(*g);
  }
  static void wake_all(Group& g) {
    std::lock_guard<std::mutex> lock(g.mutex);
    g.changed.notify_all();
  }

  // Posts this rank's slot, waits for all, runs `compute` (reads everyone's slots, writes only
  // private memory), waits again, then runs `publish` (writes this rank's output).
  template <typename Compute, typename Publish>
  static void collective(Communicator& c, int32_t kind, const Slot& mine, Compute&& compute, Publish&& publish) {
    Group& g = *c.group;
    g.slots[static_cast<size_t>(c.rank)] = mine;
    g.slots[static_cast<size_t>(c.rank)].kind = kind;
    group_barrier(c);
    std::string mismatch;
    for (const Slot& other : g.slots)
      if (other.kind != kind || other.count != mine.count || other.op != mine.op || other.root != mine.root ||
          other.dtype.code != mine.dtype.code)
        mismatch = "thread_comm: ranks called different collectives or counts";
    if (mismatch.empty()) compute(g);
    group_barrier(c);
    if (!mismatch.empty()) throw Failure{KEEL_ERR_INVALID_ARGUMENT, mismatch};
    publish();
  }

  static void count_call(Communicator& c, int32_t kind, uint64_t bytes) {
    if (c.group->size == 1) return;  // comm.h: in a group of one nothing is counted
    std::lock_guard<std::mutex> lock(c.world->state_mutex_);  // a strategy's worker thread counts into the parent
    for (Communicator* counted = &c; counted; counted = counted->parent) {
      keel_comm_counters& n = counted->counters;
      ++(kind == KEEL_COMM_ALL_TO_ALL ? n.all_to_all_calls : n.calls[kind]);  // appended in 0.19, after the arrays
      (kind == KEEL_COMM_ALL_TO_ALL ? n.all_to_all_bytes : n.bytes[kind]) += bytes;
    }
  }

  template <typename T>
  static void reduce_into(std::vector<char>& out, const std::vector<const char*>& inputs, size_t n, int32_t op) {
    T* acc = reinterpret_cast<T*>(out.data());
    std::memcpy(acc, inputs[0], n * sizeof(T));
    for (size_t r = 1; r < inputs.size(); ++r) {
      const T* x = reinterpret_cast<const T*>(inputs[r]);
      for (size_t i = 0; i < n; ++i) acc[i] = op == KEEL_REDUCE_SUM ? acc[i] + x[i] : std::max(acc[i], x[i]);
    }
  }

  // Reduces element block [first, first+n) of every rank's send buffer, in rank order.
  static std::vector<char> reduce_block(const Group& g, size_t first, size_t n, keel_dtype dtype, int32_t op) {
    std::vector<const char*> inputs;
    for (const Slot& s : g.slots) inputs.push_back(static_cast<const char*>(s.send) + first * 4);
    std::vector<char> out(n * 4);
    if (n == 0) return out;
    if (dtype.code == KEEL_DTYPE_FLOAT) reduce_into<float>(out, inputs, n, op);
    else reduce_into<int32_t>(out, inputs, n, op);
    return out;
  }

  static void check_op(int32_t op) {
    if (op != KEEL_REDUCE_SUM && op != KEEL_REDUCE_MAX)
      throw Failure{KEEL_ERR_INVALID_ARGUMENT, "thread_comm: unknown reduce op " + std::to_string(op)};
  }
  static void check_peer(const Communicator& c, int32_t peer) {
    if (peer < 0 || peer >= c.group->size)
      throw Failure{KEEL_ERR_INVALID_ARGUMENT, "thread_comm: rank " + std::to_string(peer) + " is not in a group of " +
                                                   std::to_string(c.group->size)};
  }
  // The blocking forms complete at the call; a non-blocking caller gets a request to wait on.
  static void hand_out(keel_comm_request** out_request, std::function<void()> finish = nullptr) {
    if (out_request)
      *out_request = reinterpret_cast<keel_comm_request*>(new thread_comm_detail::PendingRequest{std::move(finish)});
    else if (finish)
      finish();
  }

  static keel_status all_reduce(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype, int32_t op,
                                keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_ALL_REDUCE);
      const size_t bytes = count * element_bytes(dtype);
      check_op(op);
      std::vector<char> result;
      collective(c, KEEL_COMM_ALL_REDUCE, Slot{send, count, op, 0, dtype},
                 [&](const Group& g) { result = reduce_block(g, 0, count, dtype, op); },
                 [&] { if (bytes) std::memcpy(recv, result.data(), bytes); });
      count_call(c, KEEL_COMM_ALL_REDUCE, 2 * bytes);
      hand_out(out_request);
    });
  }

  static keel_status reduce_scatter(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype,
                                    int32_t op, keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_REDUCE_SCATTER);
      const size_t block_bytes = count * element_bytes(dtype);
      check_op(op);
      std::vector<char> result;
      collective(c, KEEL_COMM_REDUCE_SCATTER, Slot{send, count, op, 0, dtype},
                 [&](const Group& g) { result = reduce_block(g, size_t(c.rank) * count, count, dtype, op); },
                 [&] { if (block_bytes) std::memcpy(recv, result.data(), block_bytes); });
      count_call(c, KEEL_COMM_REDUCE_SCATTER, block_bytes * size_t(c.group->size));
      hand_out(out_request);
    });
  }

  static keel_status all_gather(void* comm, const void* send, void* recv, size_t count, keel_dtype dtype,
                                keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_ALL_GATHER);
      const size_t block_bytes = count * element_bytes(dtype);
      std::vector<char> result(block_bytes * size_t(c.group->size));
      collective(c, KEEL_COMM_ALL_GATHER, Slot{send, count, 0, 0, dtype},
                 [&](const Group& g) {
                   for (size_t r = 0; r < g.slots.size(); ++r)
                     if (block_bytes) std::memcpy(result.data() + r * block_bytes, g.slots[r].send, block_bytes);
                 },
                 [&] { if (!result.empty()) std::memcpy(recv, result.data(), result.size()); });
      count_call(c, KEEL_COMM_ALL_GATHER, result.size());
      hand_out(out_request);
    });
  }

  static keel_status broadcast(void* comm, void* buffer, size_t count, keel_dtype dtype, int32_t root,
                               keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_BROADCAST);
      const size_t bytes = count * element_bytes(dtype);
      check_peer(c, root);
      std::vector<char> result(bytes);
      collective(c, KEEL_COMM_BROADCAST, Slot{buffer, count, 0, root, dtype},
                 [&](const Group& g) { if (bytes) std::memcpy(result.data(), g.slots[size_t(root)].send, bytes); },
                 [&] { if (bytes) std::memcpy(buffer, result.data(), bytes); });
      count_call(c, KEEL_COMM_BROADCAST, bytes);
      hand_out(out_request);
    });
  }

  static keel_status send(void* comm, const void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                          keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_SEND);
      const size_t bytes = count * moved_bytes(dtype);
      check_peer(c, peer);
      const char* data = static_cast<const char*>(buffer);
      {
        std::lock_guard<std::mutex> lock(c.group->mutex);
        c.group->mailboxes[{c.rank, peer, tag}].emplace_back(data, data + bytes);  // buffered: never blocks
        c.group->changed.notify_all();
      }
      count_call(c, KEEL_COMM_SEND, bytes);
      hand_out(out_request);
    });
  }

  static void receive(Communicator& c, void* buffer, size_t bytes, int32_t peer, int32_t tag) {
    Group& g = *c.group;
    std::unique_lock<std::mutex> lock(g.mutex);
    auto& box = g.mailboxes[{peer, c.rank, tag}];
    g.changed.wait(lock, [&] { return !box.empty() || c.world->is_aborted(); });
    if (box.empty()) throw Failure{KEEL_ERR_INTERNAL, "thread_comm: the world was aborted"};
    if (box.front().size() != bytes)
      throw Failure{KEEL_ERR_INVALID_ARGUMENT, "thread_comm: recv of " + std::to_string(bytes) + " bytes matched a send of " +
                                                   std::to_string(box.front().size())};
    if (bytes) std::memcpy(buffer, box.front().data(), bytes);
    box.pop_front();
  }

  static keel_status recv(void* comm, void* buffer, size_t count, keel_dtype dtype, int32_t peer, int32_t tag,
                          keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_RECV);
      const size_t bytes = count * moved_bytes(dtype);
      check_peer(c, peer);
      count_call(c, KEEL_COMM_RECV, bytes);
      Communicator* cp = &c;
      hand_out(out_request, [cp, buffer, bytes, peer, tag] { receive(*cp, buffer, bytes, peer, tag); });
    });
  }

  // Element offsets of each rank's block (size + 1 entries), refusing NULL and totals whose bytes
  // overflow, as comm.h asks.
  static std::vector<size_t> block_offsets(const size_t* counts, int32_t size, const char* name) {
    if (!counts) throw Failure{KEEL_ERR_INVALID_ARGUMENT, std::string("thread_comm all_to_all_v: ") + name + " is NULL"};
    std::vector<size_t> offsets(size_t(size) + 1, 0);
    for (int32_t p = 0; p < size; ++p) {
      if (counts[p] > SIZE_MAX / 4 - offsets[size_t(p)])
        throw Failure{KEEL_ERR_INVALID_ARGUMENT, std::string("thread_comm all_to_all_v: ") + name + " overflow: " +
                                                     std::to_string(offsets[size_t(p)]) + " elements before rank " +
                                                     std::to_string(p) + " plus its " + std::to_string(counts[p])};
      offsets[size_t(p) + 1] = offsets[size_t(p)] + counts[p];
    }
    return offsets;
  }

  // Rank r's block from rank p is p's block for r; recv_counts[p] must match what p sends here.
  static keel_status all_to_all_v(void* comm, const void* send, const size_t* send_counts, void* recv,
                                  const size_t* recv_counts, keel_dtype dtype, keel_comm_request** out_request) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_ALL_TO_ALL);
      const size_t bytes = element_bytes(dtype);
      const int32_t size = c.group->size;
      const std::vector<size_t> send_at = block_offsets(send_counts, size, "send_counts");
      const std::vector<size_t> recv_at = block_offsets(recv_counts, size, "recv_counts");
      Slot mine{send, 0, 0, 0, dtype};
      mine.send_counts = send_counts;
      mine.recv_counts = recv_counts;
      std::vector<char> result(recv_at.back() * bytes);
      std::string wrong_count;
      collective(c, KEEL_COMM_ALL_TO_ALL, mine,
                 [&](const Group& g) {
                   for (int32_t p = 0; p < size; ++p) {
                     const Slot& from = g.slots[size_t(p)];
                     const size_t n = from.send_counts[c.rank];
                     if (n != recv_counts[p]) {
                       wrong_count = "thread_comm all_to_all_v: rank " + std::to_string(p) + " sends " +
                                     std::to_string(n) + " elements to rank " + std::to_string(c.rank) +
                                     ", which expects " + std::to_string(recv_counts[p]);
                       return;
                     }
                     size_t first = 0;  // where p's block for this rank starts in p's send buffer
                     for (int32_t q = 0; q < c.rank; ++q) first += from.send_counts[q];
                     if (n) std::memcpy(result.data() + recv_at[size_t(p)] * bytes,
                                        static_cast<const char*>(from.send) + first * bytes, n * bytes);
                   }
                 },
                 [&] {
                   if (!wrong_count.empty()) throw Failure{KEEL_ERR_INVALID_ARGUMENT, wrong_count};
                   if (!result.empty()) std::memcpy(recv, result.data(), result.size());
                 });
      count_call(c, KEEL_COMM_ALL_TO_ALL, (send_at.back() - send_counts[c.rank]) * bytes);
      hand_out(out_request);
    });
  }

  static keel_status barrier(void* comm) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(KEEL_COMM_BARRIER);
      collective(c, KEEL_COMM_BARRIER, Slot{}, [](const Group&) {}, [] {});
      count_call(c, KEEL_COMM_BARRIER, 0);
    });
  }

  static keel_status wait(void* comm, keel_comm_request* request) {
    std::unique_ptr<thread_comm_detail::PendingRequest> pending(
        reinterpret_cast<thread_comm_detail::PendingRequest*>(request));
    return guarded(comm, [&](Communicator&) {
      if (!pending) throw Failure{KEEL_ERR_INVALID_ARGUMENT, "thread_comm: wait on a NULL request"};
      if (pending->finish) pending->finish();
    });
  }

  static keel_status split(void* comm, int32_t color, int32_t key, void** out_comm) {
    return guarded(comm, [&](Communicator& c) {
      c.world->check_injected(-1);
      Slot mine{};
      mine.color = color;
      mine.key = key;
      Slot answer;
      collective(
          c, -2, mine,
          [&](Group& g) {
            if (c.rank != 0) return;
            std::map<int32_t, std::vector<std::tuple<int32_t, int32_t>>> members;  // color -> (key, rank)
            for (int32_t r = 0; r < g.size; ++r)
              if (g.slots[size_t(r)].color >= 0) members[g.slots[size_t(r)].color].emplace_back(g.slots[size_t(r)].key, r);
            for (auto& [col, list] : members) {
              std::sort(list.begin(), list.end());
              auto group = std::make_shared<Group>(static_cast<int32_t>(list.size()));
              for (size_t i = 0; i < list.size(); ++i) {
                Slot& s = g.slots[size_t(std::get<1>(list[i]))];
                s.new_group = group;
                s.new_rank = static_cast<int32_t>(i);
              }
            }
          },
          [&] { answer = c.group->slots[size_t(c.rank)]; });
      *out_comm = answer.new_group ? c.world->make_comm(answer.new_group, answer.new_rank) : nullptr;
      if (*out_comm) self(*out_comm)->parent = &c;
    });
  }

  static keel_status abort_world(void* comm, int32_t exit_code, const char* reason) {
    ThreadWorld* world = self(comm)->world;
    {
      std::lock_guard<std::mutex> lock(world->state_mutex_);
      world->abort_reasons_.push_back(reason ? reason : "");
    }
    world->abort_quietly();
    throw ThreadWorldAborted("abort_world(" + std::to_string(exit_code) + "): " + (reason ? reason : ""));
  }

  const keel_host* host_;
  std::vector<void*> world_;
  mutable std::mutex state_mutex_;
  std::map<int32_t, std::string> failures_;
  std::vector<std::string> abort_reasons_;
  std::vector<std::weak_ptr<Group>> groups_;  // every group made, to wake on abort
  bool aborted_ = false;
};

}  // namespace keel_test
