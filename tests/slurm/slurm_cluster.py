"""A one-node Slurm cluster on this machine, for tests of Keel under srun and sbatch: munged,
slurmctld and slurmd from Debian's packages, each with its state, spool, socket, pid and log
files in a scratch folder and ports the kernel picks as free, so a Slurm or munge the machine
already runs is neither used nor disturbed. Client commands (srun, sbatch, sinfo, ...) find this
cluster through SLURM_CONF, which `env` carries.

The node is this host with CPUs=2 and an OverSubscribe=YES partition; jobs and steps run as
root. Needs root (slurmd starts tasks as the submitting user and slurmctld runs as SlurmUser).
`unavailable()` says why the cluster cannot exist here, for a printed skip. On exit every job is
cancelled and every daemon started here is stopped by its pid file, whatever happened before."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

DAEMONS = ("slurmd", "slurmctld", "munged")  # stopped in this order


def unavailable():
    """None where the daemons can be started here; else the reason."""
    if os.geteuid() != 0:
        return "slurmctld, slurmd and munged are started as root here, and this is not root"
    for tool in ("munged", "slurmctld", "slurmd", "srun", "sbatch", "sinfo", "squeue", "scancel"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            return f"{tool} is not installed (Debian: apt-get install slurm-wlm munge)"
    return None


def _free_port():
    """A TCP port nothing listens on now (the kernel's pick), so a Slurm already running here or
    another test's cluster never collides with this one."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _tool(name):
    return shutil.which(name) or f"/usr/sbin/{name}"


class SlurmCluster:
    """`with SlurmCluster() as c:` c.env is os.environ plus SLURM_CONF; c.run(cmd) runs a client
    command against this cluster. Raises RuntimeError naming the log when a daemon will not start."""

    def __init__(self, cpus=2):
        self.ctld_port, self.slurmd_port = _free_port(), _free_port()
        self.cpus = cpus
        self.host = socket.gethostname().split(".")[0]
        self.dir = None
        self.env = None

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def __enter__(self):
        self.dir = tempfile.mkdtemp(prefix="keel-slurm-")
        try:
            self._start()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _start(self):
        for sub in ("state", "spool", "log", "munge"):
            os.makedirs(self.path(sub), mode=0o700)
        key = self.path("munge", "munge.key")
        with open(os.open(key, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
            f.write(os.urandom(1024))
        munge_socket = self.path("munge", "socket")
        self._daemon("munged", [_tool("munged"), "--force", f"--socket={munge_socket}", f"--key-file={key}",
                                f"--pid-file={self.pid_file('munged')}", f"--log-file={self.path('log', 'munged.log')}",
                                f"--seed-file={self.path('munge', 'seed')}"])
        conf = self.path("slurm.conf")
        with open(conf, "w") as f:
            f.write("\n".join([
                "ClusterName=keeltest",
                f"SlurmctldHost={self.host}",
                f"SlurmctldPort={self.ctld_port}",
                f"SlurmdPort={self.slurmd_port}",
                "SlurmUser=root",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={munge_socket}",
                f"StateSaveLocation={self.path('state')}",
                f"SlurmdSpoolDir={self.path('spool')}",
                f"SlurmctldPidFile={self.pid_file('slurmctld')}",
                f"SlurmdPidFile={self.pid_file('slurmd')}",
                f"SlurmctldLogFile={self.path('log', 'slurmctld.log')}",
                f"SlurmdLogFile={self.path('log', 'slurmd.log')}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_CPU",
                "MpiDefault=none",  # srun without --mpi starts tasks with no PMI at all
                "ReturnToService=2",
                "SchedulerParameters=sched_interval=1",
                "InactiveLimit=0",
                "KillWait=5",
                f"NodeName={self.host} CPUs={self.cpus} State=UNKNOWN",
                f"PartitionName=keel Nodes={self.host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
                ""]))
        self.env = dict(os.environ, SLURM_CONF=conf)
        self._daemon("slurmctld", [_tool("slurmctld"), "-f", conf])
        self._daemon("slurmd", [_tool("slurmd"), "-f", conf])
        deadline = time.time() + 30
        state = ""
        while time.time() < deadline:
            p = self.run(["sinfo", "-h", "-n", self.host, "-o", "%T"], check=False)
            state = p.stdout.strip()
            if state == "idle":
                return
            time.sleep(0.3)
        raise RuntimeError(f"the node is not idle 30 s after slurmd started (sinfo: '{state}'):\n" + self.logs())

    def pid_file(self, daemon):
        return self.path(f"{daemon}.pid")

    def _daemon(self, name, cmd):
        p = subprocess.run(cmd, capture_output=True, text=True, env=self.env or os.environ, timeout=30)
        deadline = time.time() + 10
        while not self._pid(name) and time.time() < deadline:
            time.sleep(0.1)
        if p.returncode != 0 or not self._pid(name):
            raise RuntimeError(f"{name} did not start (exit {p.returncode}): {p.stderr.strip()}\n" + self.logs())

    def _pid(self, name):
        try:
            with open(self.pid_file(name)) as f:
                pid = int(f.read().split()[0])
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError, IndexError):
            return None

    def logs(self, tail=3000):
        out = []
        for name in DAEMONS:
            log = self.path("log", f"{name}.log")
            if os.path.exists(log):
                with open(log, errors="replace") as f:
                    out.append(f"--- {log}\n{f.read()[-tail:]}")
        return "\n".join(out)

    def run(self, cmd, check=True, timeout=300, env_extra=None):
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                           env=dict(self.env, **(env_extra or {})), timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        return p

    def wait_job(self, job_id, timeout=300):
        """Waits until job `job_id` has left the queue; returns how long that took."""
        start = time.time()
        while time.time() - start < timeout:
            if not self.run(["squeue", "-h", "-j", str(job_id), "-o", "%T"], check=False).stdout.strip():
                return time.time() - start
            time.sleep(0.5)
        raise RuntimeError(f"job {job_id} still queued or running after {timeout} s:\n" + self.logs())

    def __exit__(self, *exc):
        if self.env and self._pid("slurmctld"):
            # Jobs first, so slurmd's step daemons end their tasks before slurmd goes.
            self.run(["scancel", "--full", "--partition=keel"], check=False, timeout=30)
            deadline = time.time() + 15
            while time.time() < deadline and self.run(["squeue", "-h"], check=False, timeout=30).stdout.strip():
                time.sleep(0.3)
        for name in DAEMONS:
            pid = self._pid(name)
            if not pid:
                continue
            os.kill(pid, signal.SIGTERM)
            deadline = time.time() + 10
            while time.time() < deadline and self._pid(name) == pid:
                time.sleep(0.1)
            if self._pid(name) == pid:
                os.kill(pid, signal.SIGKILL)
        if self.dir and not os.environ.get("KEEL_SLURM_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
        return False
