# `keel run` with "backend": {"plugin": "cuda"}: on a machine without a GPU it must stop at
# start-up with a message naming the missing CUDA device, exiting with a status below 128 (an
# error, not a signal). On a machine with one, it runs two steps and must not crash.
# Run with -DKEEL=<keel binary> -DCONFIG=<quickstart.json> -DWORKDIR=<scratch folder>.
file(REMOVE_RECURSE ${WORKDIR})
file(MAKE_DIRECTORY ${WORKDIR})
execute_process(
  COMMAND ${KEEL} run ${CONFIG} --set "backend={\"plugin\": \"cuda\"}" --set train.steps=2
          --set "train.checkpoint.dir=\"${WORKDIR}/checkpoints\""
          --set "train.metrics_path=\"${WORKDIR}/metrics.jsonl\""
  WORKING_DIRECTORY ${WORKDIR}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 120)
message("exit status: ${status}\nstdout:\n${out}\nstderr:\n${err}")
if(NOT status MATCHES "^[0-9]+$" OR status GREATER_EQUAL 128)
  message(FATAL_ERROR "keel run with the cuda backend did not exit with a status below 128: ${status}")
endif()
if(status EQUAL 0)
  message("PASS: a CUDA device is present and the run finished")
  return()
endif()
if(NOT err MATCHES "no CUDA device")
  message(FATAL_ERROR "keel run failed (status ${status}) without naming the missing CUDA device")
endif()
message("PASS: refused at start-up, naming the missing GPU")
