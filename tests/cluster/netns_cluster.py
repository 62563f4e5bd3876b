"""A cluster of hosts on this machine, for tests of Keel across a real network: each host is a
Linux network namespace with its own hostname (a UTS namespace per launched process), joined to
a bridge by a veth pair, with its own IPv4 address. OpenMPI reaches a host through an rsh agent
that enters its namespaces, and moves bytes over TCP only (btl tcp,self: no shared memory), so
every byte between two hosts crosses a network interface that a test can cut. mpirun itself
runs on a head host of its own (as on a login node), so cutting a compute host's link partitions
the launcher from it as on a real cluster.

Each namespace lowers net.ipv4.tcp_retries2 (a per-namespace setting) to 4: a TCP connection
to a host that stopped answering fails after about 6 s instead of the kernel's default of about
15 minutes. OpenMPI's launcher only learns of a lost host from TCP, so without this mpirun and
its daemons wait out that quarter of an hour after a partition (docs/cluster.md, "Across hosts").

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN). `unavailable()` says why not, for a printed skip.
Everything made is removed on exit, processes left inside the namespaces included."""
import os
import shutil
import subprocess
import tempfile


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def unavailable():
    """None where namespaces, veth pairs and bridges can be made here; else the reason."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare", "mpirun"):
        if not shutil.which(tool):
            return f"{tool} is not installed"
    probe = f"keelprobe{os.getpid() % 100000}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    try:
        inside = subprocess.run(["ip", "netns", "exec", probe, "unshare", "--uts", "true"], capture_output=True, text=True)
        if inside.returncode != 0:
            return f"unshare --uts inside a namespace failed: {inside.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


def write_launch_scripts(directory, hosts, head_ns, network):
    """mpirun's rsh agent and an mpirun that uses it, in `directory`: `hosts` are (name, address,
    namespace). mpirun calls the agent as `AGENT [options] HOST COMMAND...`; it runs the command
    inside HOST's network namespace under a UTS namespace whose hostname is HOST. The mpirun runs
    in `head_ns` and moves bytes over TCP on `network` only (no shared memory). Returns both paths."""
    agent, mpirun = os.path.join(directory, "enter-host"), os.path.join(directory, "cluster-mpirun")
    cases = "".join(f"    {addr}|{name}) ns={ns}; host={name} ;;\n" for name, addr, ns in hosts)
    with open(agent, "w") as f:
        f.write("#!/bin/sh\n# mpirun's rsh agent for the namespace cluster\n"
                "while [ $# -gt 0 ]; do case \"$1\" in -*) shift ;; *) break ;; esac; done\n"
                f"case \"$1\" in\n{cases}    *) echo \"enter-host: no host $1\" >&2; exit 255 ;;\nesac\nshift\n"
                "exec ip netns exec \"$ns\" unshare --uts sh -c 'hostname \"$0\"; exec sh -c \"$1\"' \"$host\" \"$*\"\n")
    with open(mpirun, "w") as f:
        f.write("#!/bin/sh\n# mpirun across the namespace cluster, TCP between hosts only\n"
                f"exec ip netns exec {head_ns} mpirun --mca plm_rsh_agent {agent} --mca btl tcp,self "
                f"--mca btl_tcp_if_include {network} --mca oob_tcp_if_include {network} "
                "--mca plm_rsh_no_tree_spawn 1 \"$@\"\n")
    for path in (agent, mpirun):
        os.chmod(path, 0o755)
    return agent, mpirun


class Cluster:
    """`with Cluster(2) as c:` hosts c.hosts[i] = (name, address); c.mpirun is a script taking
    mpirun's own arguments that places ranks on the hosts (--map-by node unless told)."""

    def __init__(self, n_hosts, subnet="10.77.0"):
        tag = os.getpid() % 10000
        self.subnet = subnet
        self.bridge = f"keelbr{tag}"
        self.hosts = [(f"keel-h{i + 1}", f"{subnet}.{11 + i}") for i in range(n_hosts)]
        self.head = ("keel-head", f"{subnet}.10")
        self._ns = {name: f"keel{tag}h{i + 1}" for i, (name, _) in enumerate(self.hosts)}
        self._veth = {name: f"kv{tag}h{i + 1}" for i, (name, _) in enumerate(self.hosts)}
        self._ns[self.head[0]] = f"keel{tag}hd"
        self._veth[self.head[0]] = f"kv{tag}hd"
        self._dir = None

    def __enter__(self):
        self._dir = tempfile.mkdtemp(prefix="keel-cluster-")
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _build(self):
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.1/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for name, addr in self.hosts + [self.head]:
            ns, veth = self._ns[name], self._veth[name]
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", self.bridge)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_retries2=4"], check=True)
        self.agent, self.mpirun = write_launch_scripts(
            self._dir, [(name, addr, self._ns[name]) for name, addr in self.hosts], self._ns[self.head[0]],
            f"{self.subnet}.0/24")

    def host_list(self, slots):
        """mpirun's --host value: every host with `slots` slots, by address."""
        return ",".join(f"{addr}:{slots}" for _, addr in self.hosts)

    def cut(self, name):
        """Takes the host's link down, from the bridge's side: its packets go nowhere."""
        _ip("link", "set", self._veth[name], "down")

    def pids(self, name):
        out = _ip("netns", "pids", self._ns[name], check=False).stdout.split()
        return [int(p) for p in out]

    def __exit__(self, *exc):
        for name, _ in self.hosts + [self.head]:
            for pid in self.pids(name):
                try:
                    os.kill(pid, 9)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", self._ns[name], check=False)
            _ip("link", "del", self._veth[name], check=False)
        _ip("link", "del", self.bridge, check=False)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        return False
