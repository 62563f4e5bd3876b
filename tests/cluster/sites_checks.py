#!/usr/bin/env python3
"""Data parallelism across two sites over a slow link (netns_sites.py: 2 sites × 2 hosts × 2
ranks, 100 Mbit/s and 20 ms each way between the sites), ranks placed round-robin over the hosts:
  - ddp in two levels by site (parallel.dp_groups "site") against flat ddp, and hybrid ZeRO-3
    against flat ZeRO-3: losses within 1e-6 over 6 steps;
  - the start-up line shows both sites with their hosts and the groups;
  - the bytes that crossed between the sites (the wan's packet counters) during the two-level run
    equal the formula within the packets' overhead: per step the across-site all-reduce of each
    rank's 1/S of the gradient, 2·G·(ranks/S)/2 payload bytes (G the gradient bytes, S = 4 ranks
    per site; an all-reduce between 2 ranks moves its n once each way), plus the run's own
    start-up and loss traffic, between 1.0 and 1.25 times it.
Needs root (skips with exit 77 and the reason otherwise). Timing is the benchmark's
(benchmarks/multisite.py), not this test's."""
import argparse
import json
import os
import signal
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import netns_sites  # noqa: E402
import parallel_checks as pc  # noqa: E402

STEPS = 6
RANKS = 8
PER_SITE = 4


def run(args, sites, work, tag, sets):
    metrics = f"{work}/{tag}.jsonl"
    sets = pc.TINY + sets + [f"train.steps={STEPS}", "data.global_batch=8", "data.micro_batch=1",
                             f"train.metrics_path=\"{metrics}\"", f"train.checkpoint.dir=\"{work}/{tag}\"",
                             "train.checkpoint.every=0", f"parallel.sites={sites.sites_json()}", "comm.timeout_s=120"]
    before = sites.wan_bytes()
    p = subprocess.run([sites.mpirun, "--host", sites.host_list(2), "--map-by", "node", "-np", str(RANKS), args.keel,
                        "run", args.config] + [a for s in sets for a in ("--set", s)],
                       capture_output=True, text=True, env=pc.ENV, timeout=600)
    assert p.returncode == 0, f"{tag} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
    records = [json.loads(line) for line in open(metrics) if line.strip() and '"loss"' in line]
    return p.stdout + p.stderr, records, sites.wan_bytes() - before


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["levels"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the namespaces are taken down
    reason = netns_sites.unavailable()
    if reason:
        print(f"SKIPPED: {reason}")
        sys.exit(77)
    with netns_sites.Sites(2, 2, rate="100mbit", delay_ms=20) as sites, tempfile.TemporaryDirectory() as work:
        ddp = ['parallel.strategy={"plugin": "ddp", "hierarchical_min_kb": 0}']  # every region through the levels
        _, flat, flat_bytes = run(args, sites, work, "flat", ddp)
        out, levels, level_bytes = run(args, sites, work, "levels", ddp + ['parallel.dp_groups="site"'])
        line = re.search(r"topology: 2 sites, 4 hosts: site a \(keel-a1: ranks 0, 4; keel-a2: ranks 1, 5\), "
                         r"site b \(keel-b1: ranks 2, 6; keel-b2: ranks 3, 7\)", out)
        assert line, f"no start-up line with both sites:\n{out[-2000:]}"
        assert "data-parallel groups (site): 2 groups of 4 ranks" in out, out[-2000:]
        pc.compare_losses({r["step"]: r["loss"] for r in flat}, {r["step"]: r["loss"] for r in levels},
                          "ddp by site against flat, across two sites", 1e-6)
        grad_bytes = levels[-1]["strategy_bytes"]["grads"]
        formula = STEPS * 2 * grad_bytes * (RANKS // PER_SITE) / 2
        print(f"bytes across the sites: two levels {level_bytes} (formula {formula:.0f} payload, "
              f"x{level_bytes / formula:.3f}), flat {flat_bytes}")
        assert 1.0 <= level_bytes / formula <= 1.25, f"{level_bytes} bytes crossed, the formula says {formula:.0f}"
        zero3 = ['parallel.strategy={"plugin": "zero", "stage": 3}']
        _, zflat, _ = run(args, sites, work, "zero3-flat", zero3)
        _, zhybrid, _ = run(args, sites, work, "zero3-hybrid", zero3 + ['parallel.dp_groups="site"'])
        pc.compare_losses({r["step"]: r["loss"] for r in zflat}, {r["step"]: r["loss"] for r in zhybrid},
                          "hybrid ZeRO-3 by site against flat ZeRO-3, across two sites", 1e-6)
    print("PASS")


if __name__ == "__main__":
    main()
