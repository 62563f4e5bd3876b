"""Running one benchmark command under a time limit, its output kept whatever happens.

A command's output goes to a log file as it runs (the command line first), so a command that is
killed still leaves what it printed. At the limit its process group gets SIGTERM (keel then
stops after its step and still logs the op profile), then SIGKILL 5 s later. The command runs in
a session of its own, which a `timeout` around this script does not reach: stop_on_sigterm()
makes a SIGTERM to this script end the command first (2 s, then SIGKILL). While it runs,
nvidia-smi is asked every half second how much memory the GPU holds; the largest answer is the
command's device memory (the whole GPU's, so the command should be the only one on it).
"""
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass


@dataclass
class CommandResult:
    rc: int                 # 124 when it ran past its limit
    output: str
    seconds: float
    timed_out: bool
    device_memory_bytes: int = None  # the most nvidia-smi saw in use on GPU 0; None without nvidia-smi

    def reason(self):
        """Why it failed, in a line: the last that mentions an error, else the last."""
        lines = [line.strip() for line in self.output.splitlines() if line.strip()]
        errors = [line for line in lines if "error" in line.lower()]
        return (errors or lines or [""])[-1][:300]


def gpu_memory_used_bytes():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"],
                             capture_output=True, text=True, timeout=5).stdout
        return int(float(out.strip().splitlines()[0])) * 1024 * 1024
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


class _MemoryWatch(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.most, self.done = None, threading.Event()

    def run(self):
        while not self.done.is_set():
            used = gpu_memory_used_bytes()
            if used is None:
                return
            self.most = used if self.most is None else max(self.most, used)
            self.done.wait(0.5)


def run_command(cmd, log_path, timeout_s, env=None, cwd=None):
    start = time.time()
    watch = _MemoryWatch()
    watch.start()
    with open(log_path, "w") as log:
        log.write(quoted(cmd) + "\n")
        log.flush()
        timed_out = False
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                    cwd=cwd, start_new_session=True)
        except OSError as e:
            log.write(f"cannot start: {e}\n")
            rc = 127
        else:
            try:
                rc = proc.wait(timeout=max(timeout_s, 1))
            except subprocess.TimeoutExpired:
                timed_out, rc = True, 124
                _stop(proc, grace_s=5)
            except BaseException:  # this script is being stopped: its command, in a session of its own, too
                _stop(proc, grace_s=2)
                raise
        if timed_out:
            log.write(f"\n(stopped: past its limit of {timeout_s:.0f} s)\n")
    watch.done.set()
    watch.join(timeout=6)
    with open(log_path, errors="replace") as f:
        output = f.read().split("\n", 1)[-1]
    return CommandResult(rc, output, time.time() - start, timed_out, watch.most)


def _stop(proc, grace_s):
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def quoted(cmd):
    return " ".join(shlex.quote(c) for c in cmd)


def stop_on_sigterm():
    """SIGTERM raises SystemExit, so the command being waited for is stopped on the way out."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
