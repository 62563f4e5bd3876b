"""The data-parallel group's two levels (parallel.dp_groups; docs/parallelism.md §8), on 4 ranks of
this machine, with parallel_checks.py's helpers. Hosts are named per rank through KEEL_HOST (a
wrapper puts ranks 0, 2 on node0 and 1, 3 on node1), so a host grouping differs from the
consecutive one.
  - parity: ddp's two-level all-reduce (by 2 consecutive dp ranks, by host, by site) and hybrid
    ZeRO-1/2/3 (shards over 2 ranks, replicated across 2 groups) against the flat runs: losses
    within 1e-6 over 10 steps, final weights within 5e-5; the bytes across groups per step equal
    2·G/S (G the gradient bytes, S the ranks per group: one all-reduce of each rank's 1/S), the
    sharded arrays take dp/S times the flat ZeRO's bytes; the start-up lines show the hosts, the
    sites and the groups.
  - reshard: a hybrid ZeRO-3 checkpoint resumed flat, and a flat one resumed hybrid, equal the
    run that never stopped (losses 1e-6, weights 5e-5).
  - diloco: DiLoCo with each host's ranks one worker (parallel.dp_groups "host": the gradients
    averaged inside every step, the outer step across through the two levels) against DiLoCo
    flat on 2 ranks, each rank then taking what one host's ranks take together: losses within
    1e-6 over 12 steps (3 outer steps); the bytes across groups are the outer steps' alone, 2·P/S
    at each (P the parameter bytes); 6 + resume (mid-interval) + 2 equal 8 straight bit for bit.
  - refusals: uneven hosts, groups that do not divide dp, dp_groups with topk or edit, a host in
    no site, a bad KEEL_HOST: each names the key and the numbers; keel validate shows the groups.

Usage: dp_levels_checks.py CHECK --keel KEEL --config CONFIG
Exits 77 where mpirun is missing.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

RANKS = 4
STEPS = 10
TOL = 1e-6         # per-step losses, relative (the bound)
PARAM_ATOL = 5e-5  # final weights (parallel_checks' bound: AdamW magnifies a reordered sum's last bit)
FLAT_BELOW_0 = '"hierarchical_min_kb": 0'  # every bucket region through the two levels


def host_launcher(work, hosts):
    """An mpirun for pc.run that starts each rank under KEEL_HOST=hosts[rank]."""
    wrap, launcher = os.path.join(work, "keel-host"), os.path.join(work, "mpirun-hosts")
    cases = "".join(f"  {r}) export KEEL_HOST={h} ;;\n" for r, h in enumerate(hosts))
    with open(wrap, "w") as f:
        f.write(f"#!/bin/sh\ncase \"$OMPI_COMM_WORLD_RANK\" in\n{cases}esac\nexec \"$@\"\n")
    with open(launcher, "w") as f:  # pc.run passes: --oversubscribe -np N KEEL ...
        f.write(f"#!/bin/sh\na=$1; b=$2; c=$3; shift 3\nexec {shutil.which('mpirun')} \"$a\" \"$b\" \"$c\" {wrap} \"$@\"\n")
    for path in (wrap, launcher):
        os.chmod(path, 0o755)
    return launcher


def records(work, tag):
    return [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip() and '"loss"' in line]


def ddp(extra=""):
    return f'parallel.strategy={{"plugin": "ddp"{", " + extra if extra else ""}}}'


def zero(stage):
    return f'parallel.strategy={{"plugin": "zero", "stage": {stage}}}'


def run(args, work, tag, sets, **kw):
    return pc.run(args, RANKS, "ddp", work, tag, ["train.checkpoint.every=10"] + sets, steps=kw.pop("steps", STEPS), **kw)


def compare(args, work, ref, tag, what):
    pc.compare_losses(pc.losses(work, ref), pc.losses(work, tag), what, TOL)
    pc.compare_params(pc.final_params(f"{work}/{ref}/step-{STEPS:08d}"), pc.final_params(f"{work}/{tag}/step-{STEPS:08d}"),
                      what, PARAM_ATOL)


def outer_bytes(work, tag):
    last = records(work, tag)[-1]
    assert "dp_outer_comm_bytes_per_step" in last, f"{tag}: no dp_outer_comm_bytes_per_step in {sorted(last)}"
    return last["dp_outer_comm_bytes_per_step"], last["strategy_bytes"]


def check_parity(args, work):
    mpirun = args.mpirun
    run(args, work, "ddp-flat", [ddp()])
    grad_bytes = records(work, "ddp-flat")[-1]["strategy_bytes"]["grads"]
    run(args, work, "ddp-2", [ddp(FLAT_BELOW_0), "parallel.dp_groups=2"])
    args.mpirun = host_launcher(work, ["node0", "node1", "node0", "node1"])
    p = run(args, work, "ddp-host", [ddp(FLAT_BELOW_0), 'parallel.dp_groups="host"'])
    out = p.stdout + p.stderr
    assert "topology: 2 hosts (node0: ranks 0, 2; node1: ranks 1, 3)" in out, out[-2000:]
    assert "data-parallel groups (host): 2 groups of 2 ranks" in out, out[-2000:]
    p = run(args, work, "ddp-site", [ddp(FLAT_BELOW_0), 'parallel.dp_groups="site"',
                                     'parallel.sites={"east": ["node0"], "west": ["node1"]}'])
    out = p.stdout + p.stderr
    assert "topology: 2 sites, 2 hosts: site east (node0: ranks 0, 2), site west (node1: ranks 1, 3)" in out, out[-2000:]
    args.mpirun = mpirun
    for tag in ("ddp-2", "ddp-host", "ddp-site"):
        compare(args, work, "ddp-flat", tag, f"ddp, two levels ({tag})")
        across, _ = outer_bytes(work, tag)
        assert across == {"all_reduce": 2 * grad_bytes / 2}, f"{tag}: bytes across groups {across}, expected " \
                                                              f"2·G/S = {grad_bytes} (G {grad_bytes})"
    print(f"ddp two-level: bytes across groups per step {grad_bytes} = 2·G/S (G {grad_bytes} bytes, S 2)")
    for stage in (1, 2, 3):
        run(args, work, f"zero{stage}-flat", [zero(stage)])
        run(args, work, f"zero{stage}-hybrid", [zero(stage), "parallel.dp_groups=2"])
        compare(args, work, f"zero{stage}-flat", f"zero{stage}-hybrid", f"ZeRO-{stage} hybrid (2 x 2) against flat")
        across, hybrid = outer_bytes(work, f"zero{stage}-hybrid")
        flat = records(work, f"zero{stage}-flat")[-1]["strategy_bytes"]
        assert across == {"all_reduce": grad_bytes}, f"ZeRO-{stage} hybrid: bytes across groups {across}"
        sharded = {"optimizer_state"} | ({"grads"} if stage >= 2 else set()) | ({"params"} if stage == 3 else set())
        for key in flat:
            want = flat[key] * (RANKS // 2) if key in sharded else flat[key]
            assert hybrid[key] == want, f"ZeRO-{stage} hybrid {key}: {hybrid[key]} bytes, expected {want}"
        print(f"ZeRO-{stage} hybrid: strategy bytes {hybrid} (flat {flat}): the sharded arrays twice the flat's")


def check_reshard(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    hybrid = [zero(3), "parallel.dp_groups=2"]
    pc.run(args, RANKS, "ddp", work, "straight", common + [zero(3)], steps=8)
    pc.run(args, RANKS, "ddp", work, "straight-hybrid", common + hybrid, steps=8)
    for tag, first, then in (("hybrid-to-flat", hybrid, [zero(3)]), ("flat-to-hybrid", [zero(3)], hybrid)):
        pc.run(args, RANKS, "ddp", work, tag, common + first, steps=4)
        pc.run(args, RANKS, "ddp", work, tag, common + then, steps=8, resume="latest")
        reference = "straight" if then == [zero(3)] else "straight-hybrid"
        pc.compare_losses(pc.losses(work, reference), pc.losses(work, tag), f"ZeRO-3 resumed {tag}", TOL)
        pc.compare_params(pc.final_params(f"{work}/{reference}/step-00000008"),
                          pc.final_params(f"{work}/{tag}/step-00000008"), f"ZeRO-3 resumed {tag}", PARAM_ATOL)


def check_diloco(args, work):
    diloco = 'parallel.strategy={"plugin": "diloco", "sync_every": 4}'
    steps = 12
    pc.run(args, 2, "ddp", work, "diloco-flat2", [diloco, "data.micro_batch=6"], steps=steps)
    mpirun = args.mpirun
    args.mpirun = host_launcher(work, ["node0", "node1", "node0", "node1"])
    pc.run(args, RANKS, "ddp", work, "diloco-hosts", [diloco, "data.micro_batch=3", 'parallel.dp_groups="host"'],
           steps=steps)
    # Each host's ranks read the samples one flat rank reads (the sampler deals them round-robin).
    pc.compare_losses(pc.losses(work, "diloco-flat2"), pc.losses(work, "diloco-hosts"),
                      "DiLoCo with each host one worker against DiLoCo on 2 ranks", TOL)
    crossed = [r.get("dp_outer_comm_bytes_per_step", {}).get("all_reduce", 0.0) for r in records(work, "diloco-hosts")]
    param_bytes = records(work, "diloco-hosts")[-1]["strategy_bytes"]["params"]
    want = [2 * param_bytes / 2 if step % 4 == 0 else 0.0 for step in range(1, steps + 1)]
    assert crossed == want, f"bytes across groups per step {crossed}, expected the outer steps' {want}"
    print(f"DiLoCo by host: {param_bytes} bytes across at each outer step (2·P/S), none between")
    common = [diloco, "data.micro_batch=3", 'parallel.dp_groups="host"', "lr_schedule.decay_steps=8",
              "train.checkpoint.every=2"]
    pc.run(args, RANKS, "ddp", work, "diloco-straight", common, steps=8)
    pc.run(args, RANKS, "ddp", work, "diloco-split", common, steps=6)
    pc.run(args, RANKS, "ddp", work, "diloco-split", common, steps=8, resume="latest")
    args.mpirun = mpirun
    straight, resumed = pc.losses(work, "diloco-straight"), pc.losses(work, "diloco-split")
    assert all(straight[s] == resumed[s] for s in range(1, 9)), f"resumed {resumed} vs {straight}"
    print("DiLoCo by host: 8 steps straight == 6 + resume (mid-interval) + 2, bit for bit")


def refused(args, work, tag, sets, expected, mpirun=None):
    saved, args.mpirun = args.mpirun, mpirun or args.mpirun
    p = run(args, work, tag, sets, steps=1, check=False)
    args.mpirun = saved
    assert p.returncode != 0 and expected in p.stderr, f"{tag}: expected {expected!r}, got {p.returncode}:\n{p.stderr[-2000:]}"
    print(f"{tag}: refused ({expected})")


def check_refusals(args, work):
    uneven = host_launcher(work, ["h1", "h1", "h1", "h2"])
    refused(args, work, "uneven", [ddp(), 'parallel.dp_groups="host"'],
            "parallel.dp_groups: \"host\" needs the same number of a data-parallel group's ranks on every host, "
            "found 3 on h1, 1 on h2", uneven)
    refused(args, work, "no-site", [ddp(), 'parallel.dp_groups="site"', 'parallel.sites={"a": ["h1"]}'],
            "parallel.sites: host h2 (rank 3) is in no site; list it under one", uneven)
    refused(args, work, "bad-name", [ddp(), 'parallel.dp_groups="host"'], "KEEL_HOST: expected a host name",
            host_launcher(work, ["-x", "h1", "h1", "h2"]))
    refused(args, work, "topk", ['parallel.strategy={"plugin": "topk"}', "parallel.dp_groups=2"],
            "parallel.dp_groups splits the data-parallel group in two levels, which the compressing strategies do not use yet")
    refused(args, work, "edit", ['parallel.strategy={"plugin": "edit"}', "parallel.dp_groups=2"],
            "parallel.dp_groups makes each group one worker, which edit's layer-wise syncs do not take yet")
    refused(args, work, "indivisible", [ddp(), "parallel.dp_groups=3"],
            "parallel.dp_groups: groups of 3 dp ranks do not divide the data-parallel group of 4")
    validate = [args.keel, "validate", args.config, "--ranks", "4"] + \
        [a for s in pc.TINY + ["data.micro_batch=3", "parallel.dp_groups=2"] for a in ("--set", s)]
    p = subprocess.run(validate, capture_output=True, text=True, env=pc.ENV)
    assert p.returncode == 0 and "data-parallel groups of 2 ranks (2 groups)" in p.stdout, p.stdout + p.stderr
    print("keel validate shows the groups:", p.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    if not args.mpirun:
        print("SKIPPED: mpirun is not installed")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as work:
        {"parity": check_parity, "reshard": check_reshard, "diloco": check_diloco,
         "refusals": check_refusals}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()
