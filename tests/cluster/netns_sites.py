"""Two sites of hosts on this machine, for measuring Keel across a slow link (issue 45's testbed,
benchmarks/multisite.py): each host is a network namespace with its own hostname (a UTS namespace
per launched process, as netns_cluster.py does), on its site's bridge; a wan namespace routes
between the sites' subnets. The link between sites is slow both ways: tc's tbf limits each
direction's rate on the wan's interfaces, and since this kernel has no netem qdisc the delay comes
from wan_relay.py, a TUN device that holds every crossing packet for the one-way delay. Inside a
site the links are veth pairs on a bridge (as fast as this machine's memory). OpenMPI reaches a
host through an rsh agent and moves bytes over TCP only.

Needs root; `unavailable()` says why not. Everything made is removed on exit."""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns_cluster  # noqa: E402


def _run(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


def _ip(*args, check=True):
    return _run("ip", *args, check=check)


def unavailable():
    """None where the two sites can be made here (netns_cluster's needs, tc, a TUN device); else why not."""
    reason = netns_cluster.unavailable()
    if reason:
        return reason
    if not shutil.which("tc"):
        return "tc is not installed"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun for the relay between the sites"
    return None


class Sites:
    """`with Sites(2, 2) as c:` c.hosts[i] = (name, address, site); c.mpirun takes mpirun's own
    arguments; c.wan_bytes() is what crossed between the sites (both directions: Ethernet frames,
    ARP and neighbour discovery included)."""

    def __init__(self, n_sites=2, hosts_per_site=2, rate="100mbit", delay_ms=20, prefix="10.78"):
        tag = os.getpid() % 10000
        self.tag, self.prefix, self.rate, self.delay_ms = tag, prefix, rate, delay_ms
        self.sites = [chr(ord("a") + s) for s in range(n_sites)]
        self.hosts = [(f"keel-{site}{i + 1}", f"{prefix}.{s}.{11 + i}", site)
                      for s, site in enumerate(self.sites) for i in range(hosts_per_site)]
        self.head = ("keel-head", f"{prefix}.0.10", self.sites[0])
        self.wan = f"keel{tag}wan"
        self._ns = {name: f"keel{tag}{name[5:]}" for name, _, _ in self.hosts + [self.head]}
        self._dir, self._relay = None, None

    def __enter__(self):
        self._dir = tempfile.mkdtemp(prefix="keel-sites-")
        try:
            self._build()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wan(self, *args):
        return _run("ip", "netns", "exec", self.wan, *args)

    def _build(self):
        _ip("netns", "add", self.wan)
        for s, site in enumerate(self.sites):
            bridge = f"ks{self.tag}{site}"
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
            # The wan's leg on this site: the site's router at .1.
            _ip("link", "add", f"kw{self.tag}{site}", "type", "veth", "peer", "name", f"site{site}", "netns", self.wan)
            _ip("link", "set", f"kw{self.tag}{site}", "master", bridge)
            _ip("link", "set", f"kw{self.tag}{site}", "up")
            _ip("-n", self.wan, "addr", "add", f"{self.prefix}.{s}.1/24", "dev", f"site{site}")
            _ip("-n", self.wan, "link", "set", f"site{site}", "up")
            # The rate of everything leaving the wan towards this site.
            self._wan("tc", "qdisc", "add", "dev", f"site{site}", "root", "tbf", "rate", self.rate, "burst", "64kb",
                      "latency", "400ms")
        _ip("-n", self.wan, "link", "set", "lo", "up")
        for key in ("net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"):
            self._wan("sysctl", "-qw", key)
        # Every packet arriving from a site goes through the relay's TUN device first; what the
        # relay writes back arrives on that device and takes the main table to the other site.
        _ip("-n", self.wan, "tuntap", "add", "dev", "delay", "mode", "tun")
        _ip("-n", self.wan, "link", "set", "delay", "up")
        self._wan("sysctl", "-qw", "net.ipv4.conf.delay.rp_filter=0")
        _ip("-n", self.wan, "route", "add", "default", "dev", "delay", "table", "100")
        for site in self.sites:
            _ip("-n", self.wan, "rule", "add", "iif", f"site{site}", "lookup", "100")
        self._relay = subprocess.Popen(["ip", "netns", "exec", self.wan, sys.executable,
                                        os.path.join(HERE, "wan_relay.py"), "delay", str(self.delay_ms)],
                                       stdout=subprocess.PIPE, text=True)
        if self._relay.stdout.readline().strip() != "ready":
            raise RuntimeError(f"wan_relay.py did not attach to its TUN device (exit {self._relay.poll()})")
        for name, addr, site in self.hosts + [self.head]:
            s = self.sites.index(site)
            ns, veth = self._ns[name], f"kh{self.tag}{name[5:]}"
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", f"ks{self.tag}{site}")
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "route", "add", "default", "via", f"{self.prefix}.{s}.1")
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.tcp_retries2=4")
        self.agent, self.mpirun = netns_cluster.write_launch_scripts(
            self._dir, [(name, addr, self._ns[name]) for name, addr, _ in self.hosts], self._ns[self.head[0]],
            f"{self.prefix}.0.0/16")

    def host_list(self, slots):
        """mpirun's --host value: every host with `slots` slots, site by site."""
        return ",".join(f"{addr}:{slots}" for _, addr, _ in self.hosts)

    def sites_json(self):
        """parallel.sites for these hosts."""
        import json
        return json.dumps({site: [name for name, _, s in self.hosts if s == site] for site in self.sites})

    def wan_bytes(self):
        """Bytes the wan sent towards the sites so far (tbf's counters: every frame that crossed)."""
        if self._relay.poll() is not None:
            raise RuntimeError(f"wan_relay.py exited {self._relay.returncode}: nothing crosses between the sites")
        total = 0
        for site in self.sites:
            out = self._wan("tc", "-s", "qdisc", "show", "dev", f"site{site}").stdout
            words = out.split()
            total += int(words[words.index("Sent") + 1])
        return total

    def __exit__(self, *exc):
        if self._relay:
            self._relay.kill()
            self._relay.wait()
        for name, _, _ in self.hosts + [self.head]:
            ns = self._ns[name]
            for pid in _ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), 9)
                except ProcessLookupError:
                    pass
            _ip("netns", "del", ns, check=False)
            _ip("link", "del", f"kh{self.tag}{name[5:]}", check=False)
        _ip("netns", "del", self.wan, check=False)
        for site in self.sites:
            _ip("link", "del", f"kw{self.tag}{site}", check=False)
            _ip("link", "del", f"ks{self.tag}{site}", check=False)
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
        return False
