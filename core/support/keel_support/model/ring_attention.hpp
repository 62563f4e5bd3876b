// Context parallelism's attention (docs/parallelism.md, issue 44): each of the cp ranks of a group
// holds two of the 2·cp chunks of every sequence, chunk r and chunk 2·cp−1−r, so under the causal
// mask every rank does the same work. Its queries attend to every chunk's keys and values, which
// travel round a ring: at each of cp steps a rank computes its queries against the key/value
// chunks it holds now (backend.h attention_block_forward, the statistics kept) while it passes them
// on to the next rank and takes the previous rank's, and folds each result into its own by the
// statistics (attention_merge_dt). The backward sends the keys and values round again, each with
// its gradient accumulating on every rank it visits, back to its owner after a last hop.
// The ring moves the key/value heads alone (a grouped-query model's few): rows given inside a fused
// qkv row (kv_stride wider than the heads) are first copied out compact (copy_rows_dt), and their
// gradient is added back into the caller's rows at the end.
//
// Layouts, chunk-major: a rank's q, out and dout hold (2, B, Tc) rows (its first chunk's rows for
// every sequence, then its second's), kv and dkv (2, B, Tc) rows of kv_stride, lse (2, B, NH, Tc).
#pragma once

#include <keel/comm.h>
#include <keel/model.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "keel_support/common/backend_buffer.hpp"
#include "keel_support/model/carver.hpp"
#include "keel_support/model/compute_ops.hpp"

namespace keel_support {

// A model's context-parallel group from its create args (model.h 0.19 cp_*): size 1 from a core
// older than the fields. Throws StatusError when cp_size > 1 and the args hold no group.
struct ContextGroup {
  int32_t rank = 0, size = 1;
  const keel_comm_api* comm = nullptr;
  void* obj = nullptr;
  bool all_gather = false;  // cp_all_gather: KvExchange::all_gather
};
inline ContextGroup context_group(const keel_model_create_args& args) {
  ContextGroup g;
  if (args.struct_size < offsetof(keel_model_create_args, cp_comm_obj) + sizeof(args.cp_comm_obj) || args.cp_size <= 1)
    return g;
  g = {args.cp_rank, args.cp_size, args.cp_comm, args.cp_comm_obj, false};
  if (args.struct_size >= offsetof(keel_model_create_args, cp_all_gather) + sizeof(args.cp_all_gather))
    g.all_gather = args.cp_all_gather != 0;
  if (!g.comm || !g.obj || g.rank < 0 || g.rank >= g.size)
    throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "parallel.cp " + std::to_string(g.size) + ": the create args hold no "
                                                     "context-parallel group, or rank " + std::to_string(g.rank) +
                                                     " is outside it");
  return g;
}

// The balanced split: which of the 2·cp chunks a rank holds, first and second.
inline int64_t context_chunk(int32_t rank, int32_t size, int32_t which) {
  return which == 0 ? rank : 2 * int64_t(size) - 1 - rank;
}

// How the key/value rows reach every rank: round the ring (cp − 1 hops, each overlapping a block's
// compute where the communicator allows), or all gathered at once before the compute (one
// collective; cp times the memory), the gradient reduce-scattered back.
enum class KvExchange { ring, all_gather };

class RingAttention {
 public:
  struct Shape {
    int64_t B = 0, Tc = 0, NH = 0, NKV = 0, hs = 0;  // Tc: tokens per chunk (T / (2·cp))
    int64_t q_stride = 0, out_stride = 0;            // q's and out's (and dout's, dq's) row strides
    int64_t kv_stride = 0;                           // kv's (and dkv's); 0: compact, kv_width()
    int64_t kv_width() const { return 2 * NKV * hs; }
    int64_t kv_row() const { return kv_stride ? kv_stride : kv_width(); }
  };

  RingAttention() = default;
  // `comm`, `comm_obj`: the context-parallel group, this rank `rank` of `size`.
  RingAttention(const ComputeOps& ops, const keel_comm_api* comm, void* comm_obj, int32_t rank, int32_t size,
                KvExchange exchange = KvExchange::ring)
      : ops_(ops), comm_(comm), comm_obj_(comm_obj), rank_(rank), size_(size), exchange_(exchange) {
    if (size_ < 1 || rank_ < 0 || rank_ >= size_ || (size_ > 1 && (!comm_ || !comm_obj_)))
      throw StatusError(KEEL_ERR_INVALID_ARGUMENT, "RingAttention: rank " + std::to_string(rank_) + " of " +
                                                       std::to_string(size_) + " needs a communicator of that group");
  }

  // out and lse of this rank's queries over every rank's keys and values.
  void forward(const Shape& s, Elems q, Elems kv, Elems out, float* lse) {
    ensure(s);
    kv = compact(s, kv);
    const bool gathered = exchange_ == KvExchange::all_gather && size_ > 1;
    if (gathered) gather(kv, kv_elems(s));
    Elems held = kv;  // the chunks computed against at this step: this rank's, then the ring's
    for (int32_t step = 0; step < size_; ++step) {
      const int32_t owner = (rank_ - step + size_) % size_;
      if (gathered) held = gathered_ + owner * kv_elems(s);
      Pending pending;
      if (step + 1 < size_ && !gathered) pending = pass(held, ring_[step % 2], kv_elems(s), 2 * step);
      for (int32_t qa = 0; qa < 2; ++qa)
        for (int32_t ka = 0; ka < 2; ++ka) {
          const int64_t cq = context_chunk(rank_, size_, qa), ck = context_chunk(owner, size_, ka);
          if (ck > cq) continue;  // every key comes after every query: masked whole
          const bool first = step == 0 && ka == 0;  // the first result of each query chunk is written, not merged
          keel_attention_args a = block(s, q, held, qa, ka, cq, ck);
          a.out = (first ? out + qa * rows(s) * s.out_stride : partial_out_).get();
          a.out_stride = first ? s.out_stride : s.NH * s.hs;
          a.lse = first ? lse + qa * stats(s) : partial_lse_;
          ops_.attention_block_forward(a);
          if (!first)
            ops_.attention_merge(out + qa * rows(s) * s.out_stride, s.out_stride, lse + qa * stats(s), partial_out_,
                                 s.NH * s.hs, partial_lse_, s.B, s.Tc, s.NH, s.hs);
        }
      pending.finish();
      if (step + 1 < size_ && !gathered) held = ring_[step % 2];
    }
  }

  // dq (q's layout) and dkv (kv's) += the gradients, from dout and the forward's out and lse.
  void backward(const Shape& s, Elems q, Elems kv, Elems out, const float* lse, Elems dout, Elems dq, Elems dkv) {
    ensure(s);
    const int64_t n = kv_elems(s);
    const Elems caller_dkv = dkv;
    kv = compact(s, kv);
    if (exchange_ == KvExchange::all_gather && size_ > 1) return gathered_backward(s, q, kv, out, lse, dout, dq, caller_dkv);
    // The travelling gradient of the chunks held; it reaches their owner after a last hop.
    Elems held = kv, held_grad = grad_[0];
    ops_.fill_zero(held_grad, n);
    for (int32_t step = 0; step < size_; ++step) {
      const int32_t owner = (rank_ - step + size_) % size_;
      for (int32_t qa = 0; qa < 2; ++qa)
        for (int32_t ka = 0; ka < 2; ++ka) {
          const int64_t cq = context_chunk(rank_, size_, qa), ck = context_chunk(owner, size_, ka);
          if (ck > cq) continue;
          keel_attention_args a = block(s, q, held, qa, ka, cq, ck);
          a.out = (out + qa * rows(s) * s.out_stride).get();
          a.out_stride = s.out_stride;
          a.lse = const_cast<float*>(lse + qa * stats(s));
          a.dout = (dout + qa * rows(s) * s.out_stride).get();
          a.dq = (dq + qa * rows(s) * s.q_stride).get();
          a.dkv = (held_grad + ka * rows(s) * s.kv_width()).get();
          ops_.attention_block_backward(a);
        }
      if (size_ == 1) break;
      // Pass the chunks on (not after the last step: their owner has them) with their gradient.
      Pending keys, grads;
      if (step + 1 < size_) keys = pass(held, ring_[step % 2], n, 2 * step);
      const Elems next_grad = grad_[(step + 1) % 2];
      grads = pass(held_grad, next_grad, n, 2 * step + 1);
      keys.finish();
      grads.finish();
      if (step + 1 < size_) held = ring_[step % 2];
      held_grad = next_grad;
    }
    add_home(s, caller_dkv, held_grad);  // this rank's chunks' gradient, home from the ring
  }

  // Elements a step moves per rank: its key/value heads (and, backward, their gradient).
  static int64_t step_elements(const Shape& s) { return kv_elems(s); }

 private:
  // The all-gather exchange's backward: every rank's rows gathered again, every block's gradient
  // formed here in the gathered layout, and each owner's summed back to it.
  void gathered_backward(const Shape& s, Elems q, Elems kv, Elems out, const float* lse, Elems dout, Elems dq,
                         Elems dkv) {
    const int64_t n = kv_elems(s);
    gather(kv, n);
    ops_.fill_zero(gathered_grad_, size_ * n);
    for (int32_t owner = 0; owner < size_; ++owner)
      for (int32_t qa = 0; qa < 2; ++qa)
        for (int32_t ka = 0; ka < 2; ++ka) {
          const int64_t cq = context_chunk(rank_, size_, qa), ck = context_chunk(owner, size_, ka);
          if (ck > cq) continue;
          keel_attention_args a = block(s, q, gathered_ + owner * n, qa, ka, cq, ck);
          a.out = (out + qa * rows(s) * s.out_stride).get();
          a.out_stride = s.out_stride;
          a.lse = const_cast<float*>(lse + qa * stats(s));
          a.dout = (dout + qa * rows(s) * s.out_stride).get();
          a.dq = (dq + qa * rows(s) * s.q_stride).get();
          a.dkv = (gathered_grad_ + owner * n + ka * rows(s) * s.kv_width()).get();
          ops_.attention_block_backward(a);
        }
    Pending::check(comm_->reduce_scatter(comm_obj_, gathered_grad_.get(), grad_[0].get(), size_t(n), ops_.dtype(),
                                         KEEL_REDUCE_SUM, nullptr),
                   "reduce_scatter (context-parallel key/value gradients)");
    add_home(s, dkv, grad_[0]);
  }
  // kv as the ring holds it: the caller's rows when compact, else their key/value heads copied out.
  Elems compact(const Shape& s, Elems kv) {
    if (s.kv_row() == s.kv_width()) return kv;
    ops_.copy_rows(local_, s.kv_width(), kv, s.kv_row(), 2 * rows(s), s.kv_width(), false);
    return local_;
  }
  // dkv (the caller's layout) += this rank's compact gradient.
  void add_home(const Shape& s, Elems dkv, Elems grad) {
    if (s.kv_row() == s.kv_width()) return ops_.add(dkv, dkv, grad, kv_elems(s));
    ops_.copy_rows(dkv, s.kv_row(), grad, s.kv_width(), 2 * rows(s), s.kv_width(), true);
  }
  void gather(Elems kv, int64_t n) {
    Pending::check(comm_->all_gather(comm_obj_, kv.get(), gathered_.get(), size_t(n), ops_.dtype(), nullptr),
                   "all_gather (context-parallel keys and values)");
  }
  // A send to the next rank and a receive from the previous one, completed by finish().
  struct Pending {
    const keel_comm_api* comm = nullptr;
    void* obj = nullptr;
    keel_comm_request* send = nullptr;
    keel_comm_request* recv = nullptr;
    void finish() {
      if (recv) check(comm->wait(obj, recv), "wait (context-parallel receive)");
      if (send) check(comm->wait(obj, send), "wait (context-parallel send)");
      recv = send = nullptr;
    }
    static void check(keel_status status, const char* what) {
      if (status != KEEL_OK) throw StatusError(status, std::string("RingAttention: ") + what + " failed");
    }
  };

  // Even ranks post the send first, odd ranks the receive: a communicator that runs point-to-point
  // operations in the order they are posted on one queue (NCCL on the backend's stream) pairs
  // every send with a receive already in line, whatever cp is.
  Pending pass(Elems from, Elems into, int64_t n, int32_t tag) const {
    Pending p{comm_, comm_obj_};
    const int32_t next = (rank_ + 1) % size_, previous = (rank_ - 1 + size_) % size_;
    auto post_recv = [&] {
      Pending::check(comm_->recv(comm_obj_, into.get(), size_t(n), ops_.dtype(), previous, tag, &p.recv),
                     "recv (context-parallel ring)");
    };
    auto post_send = [&] {
      Pending::check(comm_->send(comm_obj_, from.get(), size_t(n), ops_.dtype(), next, tag, &p.send),
                     "send (context-parallel ring)");
    };
    if (rank_ % 2 == 0) post_send(), post_recv();
    else post_recv(), post_send();
    return p;
  }

  keel_attention_args block(const Shape& s, Elems q, Elems kv, int32_t qa, int32_t ka, int64_t cq, int64_t ck) const {
    keel_attention_args a{};
    a.B = s.B, a.Tq = s.Tc, a.Tkv = s.Tc, a.NH = s.NH, a.NKV = s.NKV, a.hs = s.hs;
    a.q = (q + qa * rows(s) * s.q_stride).get(), a.q_stride = s.q_stride;
    a.kv = (kv + ka * rows(s) * s.kv_width()).get(), a.kv_stride = s.kv_width();  // the ring's compact rows
    a.q_index0 = cq * s.Tc, a.kv_index0 = ck * s.Tc;
    return a;
  }
  static int64_t rows(const Shape& s) { return s.B * s.Tc; }
  static int64_t stats(const Shape& s) { return s.B * s.NH * s.Tc; }
  static int64_t kv_elems(const Shape& s) { return 2 * rows(s) * s.kv_width(); }

  // The ring's two key/value buffers, the travelling gradients and one block's partial result.
  void ensure(const Shape& s) {
    const int64_t n = kv_elems(s), partial = rows(s) * s.NH * s.hs;
    const int64_t local = s.kv_row() == s.kv_width() ? 0 : n;
    if (n <= ring_elems_ && partial <= partial_elems_ && stats(s) <= stats_elems_ && local <= local_elems_) return;
    const int64_t all = exchange_ == KvExchange::all_gather ? size_ * n : 0;
    auto carve_all = [&](char* base) {
      Carver take(base);
      auto elems = [&](int64_t count) { return ops_.at(take.take<char>(int64_t(ops_.bytes(count)))); };
      ring_[0] = elems(n), ring_[1] = elems(n);
      grad_[0] = elems(n), grad_[1] = elems(n);
      gathered_ = elems(all), gathered_grad_ = elems(all);
      local_ = elems(local);
      partial_out_ = elems(partial);
      partial_lse_ = take.take<float>(stats(s));
      return take.used();
    };
    memory_ = BackendBuffer();
    memory_ = ops_.backend().alloc_bytes(carve_all(nullptr));
    carve_all(static_cast<char*>(memory_.get()));
    ring_elems_ = n, partial_elems_ = partial, stats_elems_ = stats(s), local_elems_ = local;
  }

  ComputeOps ops_;
  const keel_comm_api* comm_ = nullptr;
  void* comm_obj_ = nullptr;
  int32_t rank_ = 0, size_ = 1;
  KvExchange exchange_ = KvExchange::ring;
  BackendBuffer memory_;
  int64_t ring_elems_ = 0, partial_elems_ = 0, stats_elems_ = 0, local_elems_ = 0;
  Elems ring_[2], grad_[2], partial_out_;
  Elems gathered_, gathered_grad_;  // the all-gather exchange's: every rank's rows, and their gradient
  Elems local_;                     // this rank's key/value heads copied out of fused rows
  float* partial_lse_ = nullptr;
};

}  // namespace keel_support
