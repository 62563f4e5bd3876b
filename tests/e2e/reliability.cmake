# Reliability regressions (included by tests/e2e/CMakeLists.txt, whose ${checks}, ${keel},
# ${quickstart}, ${fixtures} and keel_error_test() it uses): refusals that used to be a hang, a
# runaway allocation or training on wrong numbers.

# A global batch of 2^30 sequences in micro-batches of one: refused by validate and by run
# before anything is allocated (run used to grow past 9 GB building the step's action list).
keel_error_test(microbatches_per_step_bounded
  "data\\.global_batch: 1073741824 sequences per step are 1073741824 micro-batches per data-parallel rank \\(micro_batch 1 × dp 1\\), more than the 65536 a step may hold"
  "data.micro_batch=1" "data.global_batch=1073741824")
add_test(NAME e2e.run_refuses.microbatches_per_step_bounded
  COMMAND ${checks} run_error --keel ${keel} --config ${quickstart} --set data.micro_batch=1
          --set data.global_batch=1073741824
          --pattern "more than the 65536 a step may hold; raise data\\.micro_batch")

# keel schedule-check: the built-ins pass, a schedule's mistakes are listed, and the executor's
# own rule (transfers 64 micro-batches apart share a message tag) is checked too.
set(broken_schedules ${fixtures}/broken_schedules)
foreach(schedule gpipe 1f1b zero-bubble)
  add_test(NAME e2e.schedule_check.${schedule} COMMAND ${keel} schedule-check ${schedule} --pp 4 --microbatches 8)
  set_tests_properties(e2e.schedule_check.${schedule} PROPERTIES PASS_REGULAR_EXPRESSION
    "pp 4, 8 micro-batches, virtual_stages 1: the lists can run\n  stage 0: at most [0-9]+ activation set")
endforeach()
add_test(NAME e2e.schedule_check.interleaved
  COMMAND ${keel} schedule-check interleaved --pp 4 --microbatches 8 --virtual-stages 2)
set_tests_properties(e2e.schedule_check.interleaved PROPERTIES PASS_REGULAR_EXPRESSION
  "the lists can run\n.*bubble 15\\.8% of the unit-time model")
add_test(NAME e2e.schedule_check.lists_every_problem
  COMMAND ${checks} command_error --keel ${keel} --config ${quickstart}
          --args "schedule-check unmatched-recv --pp 2 --microbatches 4 --plugin-path ${broken_schedules}"
          --pattern "the lists cannot run\n  deadlock: stage 0 waits at action 8 RECV_GRAD\\(mb 0, chunk 0, from 1\\); \n  micro-batch 0, chunk 0: backwarded 0 times")
add_test(NAME e2e.schedule_check.message_tag_order
  COMMAND ${checks} command_error --keel ${keel} --config ${quickstart}
          --args "schedule-check tag-reorder --pp 2 --microbatches 65 --plugin-path ${broken_schedules}"
          --pattern "stage 1 receives micro-batch 64, chunk 1 from stage 0 where micro-batch 0, chunk 1 was sent first with the same message tag")
add_test(NAME e2e.schedule_check.usage
  COMMAND ${checks} command_error --keel ${keel} --config ${quickstart} --args "schedule-check 1f1b --pp 2"
          --pattern "keel schedule-check: --microbatches is required")
