// The numbers a schedule is a function of, and where each chunk lives. Rank s holds chunks
// s, s+p, s+2p, ... (Megatron's interleaved placement), so with one virtual stage chunk == stage.
#pragma once

namespace keel_schedule {

struct PipelineShape {
  int stages = 1;          // p: ranks in the pipeline group
  int microbatches = 1;    // m: micro-batches per step
  int stage = 0;           // s: this rank, 0 .. p-1
  int virtual_stages = 1;  // v: chunks per rank

  int chunks() const { return stages * virtual_stages; }
  int stage_of(int chunk) const { return chunk % stages; }
  // The global chunk of this rank's local chunk k (0 .. v-1).
  int chunk_of_local(int local_chunk) const { return stage + local_chunk * stages; }
  bool is_first_chunk(int chunk) const { return chunk == 0; }
  bool is_last_chunk(int chunk) const { return chunk == chunks() - 1; }
};

}  // namespace keel_schedule
