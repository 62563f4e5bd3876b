#!/usr/bin/env python3
"""Keel across hosts that talk over a real network: a cluster of network namespaces on this
machine (netns_cluster.py), ranks placed on them by mpirun, bytes over TCP only.
- parity: ddp, ZeRO-3, tp 2 (+ sequence parallel), pp 2 (1f1b) with ranks on 2 hosts, and
  tp 2 × dp 2 with ZeRO-3 on 2 hosts × 2 ranks, each within parallel_checks' tolerances of one
  rank on this host (1e-5 relative per-step loss over 20 steps, 5e-5 on the final weights);
  the start-up line must show the ranks on both hosts.
- link_cut: a host's link taken down mid-run. Every rank and launcher process ends within
  comm.timeout_s plus the launcher's own detection, non-zero, the surviving rank naming the
  silent host (keel-h2); the last checkpoint passes `keel inspect` and resumes.
Skips (exit 77) with the reason where namespaces cannot be made (not root, no iproute2)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import netns_cluster  # noqa: E402
import parallel_checks as pc  # noqa: E402

HOSTS_LINE = re.compile(r"joined a world of (\d+) ranks on 2 hosts \(keel-h1: ranks? [\d, ]+; keel-h2: ranks? [\d, ]+\)")


def cluster_launcher(cluster, work, slots):
    """An mpirun for parallel_checks.run: every rank on the cluster, round-robin over hosts."""
    path = os.path.join(work, f"mpirun-{slots}")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexec {cluster.mpirun} --host {cluster.host_list(slots)} --map-by node \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def layout(pp=1, tp=1, sp=False):
    return [f"parallel.pp={pp}", f"parallel.tp={tp}", f"parallel.sequence_parallel={'true' if sp else 'false'}"]


CASES = [  # tag, ranks, strategy, extra settings
    ("ddp", 2, "ddp", []),
    ("zero3", 2, "zero3", []),
    ("tp2-sp", 2, "ddp", layout(tp=2, sp=True) + [f"data.micro_batch={pc.G}"]),
    ("pp2-1f1b", 2, "ddp", layout(pp=2) + [f"data.micro_batch={pc.G // 4}"]),
    ("tp2xdp2-zero3", 4, "zero3", layout(tp=2) + [f"data.micro_batch={pc.G // 2}"]),
]


def check_parity(args, cluster, work):
    pc.run(args, 1, "ddp", work, "single")
    reference, ref_params = pc.losses(work, "single"), pc.final_params(f"{work}/single/step-00000020")
    assert len(reference) == 20, f"the one-rank run logged {len(reference)} steps"
    for tag, ranks, strategy, extra in CASES:
        args.mpirun = cluster_launcher(cluster, work, slots=ranks // 2)
        p = pc.run(args, ranks, strategy, work, tag, extra)
        placed = HOSTS_LINE.search(p.stdout + p.stderr)
        assert placed and int(placed.group(1)) == ranks, f"{tag}: no start-up line with ranks on both hosts:\n" \
                                                         f"{(p.stdout + p.stderr)[-1500:]}"
        print(f"{tag}: {placed.group(0)}")
        assert len(pc.losses(work, tag)) == 20, f"{tag}: {len(pc.losses(work, tag))} steps logged, expected 20"
        pc.compare_losses(reference, pc.losses(work, tag), f"{tag} across hosts", 1e-5)
        pc.compare_params(ref_params, pc.final_params(f"{work}/{tag}/step-00000020"), f"{tag} across hosts", 5e-5)
    print(f"parity: {len(CASES)} layouts across 2 hosts against one rank")


def steps_logged(path):
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return sum(1 for line in f if line.strip())


ALL_HOSTS = ("keel-head", "keel-h1", "keel-h2")


def process_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline") as f:
            return f"{pid} " + f.read().replace("\0", " ")[:80]
    except OSError:
        return f"{pid} (gone)"


def keel_ranks(cluster):
    """The keel processes still running on the compute hosts (the launcher's daemons aside)."""
    return [line for h in ("keel-h1", "keel-h2") for line in map(process_line, cluster.pids(h)) if " run " in line]


def check_link_cut(args, cluster, work):
    timeout_s = 5
    sets = pc.TINY + pc.strategy_sets("ddp") + [
        f"data.micro_batch={pc.G // 2}", "train.steps=100000", f"train.metrics_path=\"{work}/cut.jsonl\"",
        f"train.checkpoint.dir=\"{work}/cut\"", "train.checkpoint.every=5", f"comm.timeout_s={timeout_s}"]
    cmd = [cluster_launcher(cluster, work, slots=1), "-np", "2", args.keel, "run", args.config]
    cmd += [a for s in sets for a in ("--set", s)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace", env=pc.ENV)
    deadline = time.time() + 120
    while steps_logged(f"{work}/cut.jsonl") < 12:
        assert job.poll() is None, f"the job ended before the cut: {job.communicate()[1][-2000:]}"
        assert time.time() < deadline, "12 steps took over 2 minutes"
        time.sleep(0.1)
    cluster.cut("keel-h2")
    cut_at = time.time()
    # The ranks' watchdog fires first; the launcher's own messages to the lost host then fail
    # within the namespaces' TCP retry bound (netns_cluster.py).
    bound = timeout_s + 25
    ranks_gone = None
    while time.time() - cut_at < bound:
        if ranks_gone is None and not keel_ranks(cluster):
            ranks_gone = time.time() - cut_at
        if job.poll() is not None and not any(cluster.pids(h) for h in ALL_HOSTS):
            break
        time.sleep(0.1)
    elapsed = time.time() - cut_at
    left = {h: [process_line(pid) for pid in cluster.pids(h)] for h in ALL_HOSTS}
    if job.poll() is None:
        job.kill()
    out, err = job.communicate()
    print(f"link of keel-h2 cut after step 12: every rank gone after {ranks_gone or float('nan'):.1f}s, "
          f"the launcher (exit {job.returncode}) and its daemons after {elapsed:.1f}s")
    assert elapsed < bound and not any(left.values()), \
        f"still running {bound}s after the cut: a hang; left: {left}\n{err[-3000:]}"
    # The watchdog looks every 0.1 s; MPI_Abort and process exit take a moment more.
    assert ranks_gone is not None and ranks_gone <= timeout_s + 3, \
        f"the ranks took {ranks_gone}s to exit, comm.timeout_s is {timeout_s}"
    assert job.returncode != 0, "the job exited 0 although a host was lost"
    named = re.search(r"keel: rank 0 of 2: .*timed out after 5s .*no heartbeat .* from host keel-h2 \(rank 1\)", err)
    assert named, f"rank 0's message does not name the lost host keel-h2:\n{err[-3000:]}"
    print("named:", named.group(0))
    inspect = subprocess.run([args.keel, "inspect", f"{work}/cut"], capture_output=True, text=True)
    assert inspect.returncode == 0, f"the last checkpoint is not valid: {inspect.stderr}"
    step = int(re.search(r"step (\d+),", inspect.stdout).group(1))
    assert step >= 10, f"the last checkpoint is at step {step}, but 12 steps were logged before the cut"
    print(inspect.stdout.strip())
    # It resumes (on one rank here, resharded from dp 2) and trains on.
    pc.run(args, 1, "ddp", work, "cut", [f"data.micro_batch={pc.G // 2}", "train.checkpoint.every=5"],
           steps=step + 2, resume="latest")
    with open(f"{work}/cut.jsonl") as f:
        after = [json.loads(line)["step"] for line in f if line.strip()][-2:]
    assert after == [step + 1, step + 2], f"the resumed run logged steps {after}, expected {step + 1} and {step + 2}"
    print(f"resumed from step {step} and trained steps {step + 1}-{step + 2}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["parity", "link_cut"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    reason = netns_cluster.unavailable()
    if reason:
        print(f"SKIPPED: no namespace cluster here: {reason}")
        sys.exit(77)
    with netns_cluster.Cluster(2) as cluster, tempfile.TemporaryDirectory() as work:
        {"parity": check_parity, "link_cut": check_link_cut}[args.check](args, cluster, work)
    print("PASS")


if __name__ == "__main__":
    main()
