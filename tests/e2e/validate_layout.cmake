# keel validate against the layout a run would refuse (included by tests/e2e/CMakeLists.txt, whose
# ${checks} and ${quickstart} it uses): products of config numbers past their bounds, checked in
# 64 bits (issue item 7), and tensor-parallel layouts the model itself refuses (item 13).

# keel_layout_test(NAME RANKS PATTERN SET...): `keel validate quickstart --ranks RANKS --set ...`
# must fail with PATTERN on stderr; keel_valid_layout_test: must pass, PATTERN on stdout.
function(keel_layout_test name ranks pattern)
  set(sets)
  foreach(assignment IN LISTS ARGN)
    list(APPEND sets --set ${assignment})
  endforeach()
  add_test(NAME e2e.refuses.${name}
    COMMAND ${checks} error --keel ${keel} --config ${quickstart} --ranks ${ranks} --pattern ${pattern} ${sets})
endfunction()
function(keel_valid_layout_test name ranks pattern)
  set(sets)
  foreach(assignment IN LISTS ARGN)
    list(APPEND sets --set ${assignment})
  endforeach()
  add_test(NAME e2e.validate.${name}
    COMMAND ${checks} valid --keel ${keel} --config ${quickstart} --ranks ${ranks} --pattern ${pattern} ${sets})
endfunction()

# micro_batch × dp wrapped in int32: 2^20 × 4096 = 2^32 became 0 (SIGFPE), 1024 × 3145728 a negative.
keel_layout_test(micro_step_past_int32 4096
  "data\\.global_batch: 1048576 sequences per step are fewer than data\\.micro_batch 1048576 × dp 4096 = 4294967296"
  "data.micro_batch=1048576" "data.global_batch=1048576")
keel_layout_test(micro_step_wraps_negative 3145728
  "data\\.global_batch: 1073741824 sequences per step are fewer than data\\.micro_batch 1024 × dp 3145728 = 3221225472"
  "data.micro_batch=1024" "data.global_batch=1073741824")
keel_layout_test(micro_batch_tokens_past_bound 1
  "data\\.micro_batch 1048576 × data\\.seq_len 1048576 = 1099511627776 tokens per micro-batch, more than 2147483647"
  "data.micro_batch=1048576" "data.global_batch=1048576" "data.seq_len=1048576" "model.seq_len=1048576")

# The model is asked at validate, as at run start-up.
keel_layout_test(tp_above_heads 4 "model\\.n_head \\(2\\) must be a multiple of the tensor-parallel size at parallel\\.tp = 4"
  "model.n_head=2" "parallel.tp=4")
keel_layout_test(tp_one_head 2 "model\\.n_head \\(1\\) must be a multiple of the tensor-parallel size at parallel\\.tp = 2"
  "model.n_head=1" "parallel.tp=2")
keel_layout_test(mlp_at_tp 2 "model 'mlp'.*the mlp model does not split over tensor-parallel ranks"
  "model={\"plugin\":\"mlp\",\"seq_len\":128}" "parallel.tp=2")
keel_layout_test(sequence_parallel_data_seq_len 2
  "data\\.seq_len \\(31\\) must be a multiple of parallel\\.tp \\(2\\) with parallel\\.sequence_parallel"
  "data.seq_len=31" "parallel.tp=2" "parallel.sequence_parallel=true")
keel_layout_test(sequence_parallel_model_seq_len 2
  "model\\.seq_len \\(31\\) must be a multiple of the tensor-parallel size with parallel\\.sequence_parallel"
  "data.seq_len=0" "model.seq_len=31" "parallel.tp=2" "parallel.sequence_parallel=true")
keel_layout_test(data_seq_len_above_model 1 "data\\.seq_len: 256 is longer than the model's maximum sequence length 128"
  "data.seq_len=256")

# Layouts a run accepts pass: the model's probe refuses nothing a run would take.
keel_valid_layout_test(tp_layout 4 "4 ranks = tp 2 × dp 2 × pp 1" "parallel.tp=2" "data.micro_batch=8")
keel_valid_layout_test(sequence_parallel_layout 2 "2 ranks = tp 2 × dp 1 × pp 1"
  "parallel.tp=2" "parallel.sequence_parallel=true")
keel_valid_layout_test(tp_pp_layout 8 "8 ranks = tp 2 × dp 2 × pp 2, schedule 1f1b with 2 micro-batches"
  "parallel.tp=2" "parallel.pp=2" "data.micro_batch=8" "data.global_batch=32")
