"""A rank whose Python program dies of an uncaught exception under a launcher (mpirun, srun)
must end the whole job at once, as `keel run` does: message first, then the end. Left to
itself, Python's exit runs MPI's orderly finalisation (libkeel-mpi.so's exit handler), which
waits for ranks that are blocked in a collective with this one until comm.timeout_s. So once a
trainer exists in a launched job, an uncaught exception prints its traceback as usual and the
process then leaves without finalising; the launcher sees a rank end with status 1 and ends
the others."""
import os
import sys

# Set per launched process (SLURM_STEP_NUM_TASKS by srun, not the allocation's SLURM_NTASKS,
# which a lone python inside an allocation also sees).
_LAUNCHER_SIZE_VARIABLES = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS")
_installed = False


_LAUNCHER_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")


def launched_rank():
    """This process's rank as its launcher set it; 0 when not launched (one process)."""
    for name in _LAUNCHER_RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def _launched_world_size():
    for name in _LAUNCHER_SIZE_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def _end_world_after(previous_hook):
    def hook(exc_type, exc, tb):
        try:
            previous_hook(exc_type, exc, tb)
            rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "?"))
            sys.stderr.write(f"keel: rank {rank}: ending every rank after the uncaught exception above\n")
            sys.stderr.flush()
            sys.stdout.flush()
        finally:
            os._exit(130 if issubclass(exc_type, KeyboardInterrupt) else 1)
    return hook


def install_when_launched():
    """Called as a trainer is built: installs the hook once, in a job of more than one rank."""
    global _installed
    if _installed or _launched_world_size() < 2:
        return
    _installed = True
    sys.excepthook = _end_world_after(sys.excepthook)
