#!/usr/bin/env python3
"""All-reduce bandwidth across hosts: the mpi comm plugin against a plain MPI_Allreduce loop on
the same buffers, in one run (build/bin/keel-comm-bandwidth), with one rank on each of two hosts
of the namespace cluster (tests/cluster/netns_cluster.py: TCP over veth pairs and a bridge, no
shared memory). Bus bandwidth is 2 (n-1)/n × bytes / time (nccl-tests' convention); the ratio is
the plugin's over MPI's, which the plugin should hold at 0.9 or more. Needs root for the
namespaces. Run by hand after scripts/build.sh:
    /usr/bin/python3 benchmarks/cluster_allreduce.py [--sizes 1 4 16 64] [--ranks-per-host 1]
Prints the table and the ratio at the largest size; no pass/fail."""
import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import netns_cluster  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--sizes", nargs="+", default=["1", "4", "16", "64"])
    parser.add_argument("--ranks-per-host", type=int, default=1)
    args = parser.parse_args()
    reason = netns_cluster.unavailable()
    if reason:
        sys.exit(f"no namespace cluster here: {reason}")
    tool = os.path.join(args.build, "bin", "keel-comm-bandwidth")
    plugin = os.path.join(args.build, "lib", "keel", "plugins", "libkeel-mpi.so")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    with netns_cluster.Cluster(2) as cluster:
        ranks = 2 * args.ranks_per_host
        p = subprocess.run([cluster.mpirun, "--host", cluster.host_list(args.ranks_per_host), "--map-by", "node",
                            "-np", str(ranks), tool, plugin] + args.sizes, capture_output=True, text=True, env=env,
                           timeout=600)
    if p.returncode != 0:
        sys.exit(f"keel-comm-bandwidth failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}")
    print(f"all-reduce of fp32 across 2 hosts ({ranks} ranks, TCP over veth), best of 5 timed rounds:")
    print(p.stdout.rstrip())
    last = p.stdout.strip().splitlines()[-1].split()
    print(f"at {last[0]} MiB the plugin reaches {float(last[3]):.2f} of plain MPI_Allreduce "
          f"({last[1]} against {last[2]} GB/s bus bandwidth)")


if __name__ == "__main__":
    main()
