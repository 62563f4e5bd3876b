#!/usr/bin/env python3
"""Data parallelism across two sites joined by a slow link (issue 45's testbed,
tests/cluster/netns_sites.py: 2 sites × 2 hosts × 2 ranks; 100 Mbit/s each way between the
sites from tc's tbf, 20 ms each way from wan_relay.py; veth bridges inside a site). In one run and
on the same 8 ranks: flat ddp, ddp in two levels (parallel.dp_groups "site": reduce-scatter inside
each site, all-reduce across on the pieces, gather inside) and hybrid ZeRO-3 (shards inside a
site, replicated across) and DiLoCo across the sites (each site one worker whose ranks average
their gradients every step; the outer step every 15 steps through the two levels); each
repeated, the median step time reported, with the bytes that crossed between the sites per step
(the wan's counters: IP packets, both directions) and the validation loss at the end against the
tokens trained, every layout on the same tokens.
8 ranks share this machine's cores, so a step's compute is slow; the ratio is what the levels buy
on the link. Needs root. Run after scripts/build.sh:
    /usr/bin/python3 benchmarks/multisite.py [--keel build/bin/keel] [--steps 12] [--repeats 3]
With --crossover it measures instead where the two levels start to pay for small messages: ddp
with its gradients cut into buckets of 16 KiB to 1 MiB (bucket_mb), flat against two levels with
no size floor (hierarchical_min_kb 0), the median step time of each, which sets
hierarchical_min_kb's default.
The last line reads `... flat F ms ... hierarchical H ms ... ratio R` (R = F / H)."""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import netns_sites  # noqa: E402

# A model whose gradients (3.4 MB) take the link a while, on few tokens per rank, so a step is
# mostly its reduction, as where compute is fast and sites are far apart.
MODEL = ["model.n_layer=4", "model.n_head=4", "model.d_model=128", "data.seq_len=16", "model.seq_len=64",
         "data.global_batch=8", "data.micro_batch=1", "data.text_max_bytes=1048576", "data.val_batches=2",
         "train.log_every=1", "train.sample_tokens=0", 'train.tensorboard_dir="none"', "lr_schedule.warmup_steps=5",
         "optimizer.lr=1e-3", "train.checkpoint.every=0", "comm.timeout_s=120"]
LAYOUTS = [  # label, settings
    ("flat ddp", ['parallel.strategy={"plugin": "ddp"}']),
    ("hierarchical ddp", ['parallel.strategy={"plugin": "ddp"}', 'parallel.dp_groups="site"']),
    ("hybrid ZeRO-3", ['parallel.strategy={"plugin": "zero", "stage": 3}', 'parallel.dp_groups="site"']),
    ("DiLoCo across", ['parallel.strategy={"plugin": "diloco", "sync_every": 15}', 'parallel.dp_groups="site"']),
]


def run(args, sites, work, tag, settings):
    metrics = os.path.join(work, tag + ".jsonl")
    sets = MODEL + settings + [f"train.steps={args.steps}", f"train.eval_every={args.steps}",
                               f"train.metrics_path=\"{metrics}\"", f"train.checkpoint.dir=\"{work}/{tag}\"",
                               f"parallel.sites={sites.sites_json()}"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    before = sites.wan_bytes()
    p = subprocess.run([sites.mpirun, "--host", sites.host_list(2), "--map-by", args.map_by, "-np", "8", args.keel,
                        "run", args.config] +
                       [a for s in sets for a in ("--set", s)], capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0:
        sys.exit(f"{tag} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    crossed = sites.wan_bytes() - before
    records = [json.loads(line) for line in open(metrics) if line.strip()]
    steps = [r for r in records if "step_ms" in r]
    timed = [r["step_ms"] for r in steps[2:]]  # the first two warm the links and the caches
    val = [r["val_loss"] for r in records if "val_loss" in r]
    return statistics.median(timed), crossed / args.steps, val[-1] if val else float("nan"), steps[-1]["tokens"] * args.steps


def crossover(args, sites, work):
    sizes_kb = [16, 64, 256, 1024]
    times = {}
    for repeat in range(args.repeats):
        for kb in sizes_kb:
            for label, extra in (("flat", []), ("two levels", ['parallel.dp_groups="site"'])):
                tag = f"x{kb}-{label.replace(' ', '-')}-{repeat}"
                strategy = f'parallel.strategy={{"plugin": "ddp", "bucket_mb": {kb / 1024}, "hierarchical_min_kb": 0}}'
                times.setdefault((kb, label), []).append(run(args, sites, work, tag, [strategy] + extra)[0])
    print(f"ddp step time by bucket size, 8 ranks on 2 sites, {args.steps} steps, median of {args.repeats} runs")
    print(f"{'bucket':>8} {'flat ms':>9} {'two levels ms':>14} {'ratio':>6}")
    for kb in sizes_kb:
        flat = statistics.median(times[(kb, "flat")])
        levels = statistics.median(times[(kb, "two levels")])
        print(f"{kb:>5} KiB {flat:>9.1f} {levels:>14.1f} {flat / levels:>6.2f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", default=os.path.join(ROOT, "build", "bin", "keel"))
    parser.add_argument("--config", default=os.path.join(ROOT, "examples", "quickstart.json"))
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--crossover", action="store_true", help="the small-message sweep instead")
    parser.add_argument("--map-by", default="node", choices=["node", "slot"],
                        help="rank placement: node (round-robin over hosts, Slurm's cyclic) or slot (each host's "
                             "ranks consecutive)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the namespaces are taken down
    reason = netns_sites.unavailable()
    if reason:
        sys.exit(f"no namespace cluster here: {reason}")
    results = {}
    with netns_sites.Sites(2, 2, rate="100mbit", delay_ms=20) as sites, tempfile.TemporaryDirectory() as work:
        if args.crossover:
            return crossover(args, sites, work)
        for repeat in range(args.repeats):  # interleaved, so drift on this machine hits every layout alike
            for label, settings in LAYOUTS:
                tag = f"{label.replace(' ', '-')}-{repeat}"
                results.setdefault(label, []).append(run(args, sites, work, tag, settings))
    print(f"8 ranks on 2 sites x 2 hosts x 2 ranks; between sites 100 Mbit/s and 20 ms each way; "
          f"{args.steps} steps, median over {args.repeats} runs of each run's median step (steps 3 on)")
    print(f"{'layout':<18} {'step ms':>9} {'runs (ms)':>26} {'MB across/step':>15} {'val loss':>9} {'tokens':>8}")
    medians = {}
    for label, runs in results.items():
        medians[label] = statistics.median(r[0] for r in runs)
        across = statistics.median(r[1] for r in runs) / 1e6
        print(f"{label:<18} {medians[label]:>9.1f} {' '.join(f'{r[0]:.0f}' for r in runs):>26} {across:>15.3f} "
              f"{runs[0][2]:>9.4f} {runs[0][3]:>8}")
    flat_bytes = statistics.median(r[1] for r in results["flat ddp"])
    diloco_bytes = statistics.median(r[1] for r in results["DiLoCo across"])
    val_flat, val_diloco = results["flat ddp"][0][2], results["DiLoCo across"][0][2]
    print(f"DiLoCo across: {100 * diloco_bytes / flat_bytes:.1f}% of flat ddp's bytes across the sites, val loss "
          f"{100 * (val_diloco - val_flat) / val_flat:+.2f}% against flat ddp's at equal tokens")
    flat, levels = medians["flat ddp"], medians["hierarchical ddp"]
    print(f"multisite: flat {flat:.1f} ms per step, hierarchical {levels:.1f} ms per step, ratio {flat / levels:.2f}")


if __name__ == "__main__":
    main()
