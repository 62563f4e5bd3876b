#!/usr/bin/env python3
"""CPU AdamW update throughput against the memory bandwidth measured in the same run, and
against PyTorch's CPU AdamW (Keel issue 11; DeepSpeed reports its CPU Adam at 5-7x PyTorch's).

For 1 and 2 OpenMP threads, in the environment a user's machine has (OPENBLAS_CORETYPE and
OPENBLAS_L2_SIZE unset):
  triad  STREAM's a[i] = b[i] + s*c[i] on N doubles (default: 3 x 128 MiB, far past any cache),
         best of R; STREAM's byte count, 24 bytes per element (the write-allocate read of a is
         not counted, so the bytes really moved are 4/3 of it).
  keel   the adamw plugin's step through its ABI table over one range of N fp32 elements
         (build/bin/keel-optimizer-bandwidth), best of R; 28 bytes per element: reads p, g, m, v,
         writes p, m, v.
  torch  torch.optim.AdamW on one tensor of N elements, same hyperparameters and thread count,
         for each implementation this torch offers (foreach=False, foreach=True, and fused=True
         where it exists on the CPU), best of R after one step that creates the state; counted
         with the same 28 bytes per element though its several passes move more.

Run by hand after building keel-optimizer-bandwidth and keel-adamw:
  /usr/bin/python3 benchmarks/cpu_optimizer_bandwidth.py [--n N] [--repeats R] [--plugin SO]
(--plugin: another libkeel-adamw.so, e.g. a build before a change, for a before/after).
Prints a table; no pass/fail: these machines are noisy and shared.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "bin", "keel-optimizer-bandwidth")
PLUGIN = os.path.join(ROOT, "build", "lib", "keel", "plugins", "libkeel-adamw.so")
PRESET_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
BYTES_PER_ELEMENT = 28

TORCH_CHILD = r"""
import inspect, json, sys, time
import torch
threads, n, repeats, variant = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(threads)
signature = inspect.signature(torch.optim.AdamW.__init__).parameters
options = {"foreach": {"foreach": True}, "for-loop": {"foreach": False}, "fused": {"fused": True}}[variant]
if any(key not in signature for key in options):
    print(json.dumps({"unavailable": f"torch {torch.__version__} AdamW has no {list(options)[0]} option"}))
    sys.exit(0)
p = torch.nn.Parameter((torch.arange(n, dtype=torch.float32) % 97) * 0.01)
p.grad = (torch.arange(n, dtype=torch.float32) % 89) * 0.001 - 0.04
try:
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **options)
    opt.step()  # creates exp_avg and exp_avg_sq
except RuntimeError as error:
    print(json.dumps({"unavailable": f"torch {torch.__version__} {variant}: {error}".splitlines()[0]}))
    sys.exit(0)
best = 1e30
for _ in range(repeats):
    start = time.perf_counter()
    opt.step()
    best = min(best, time.perf_counter() - start)
print(json.dumps({"seconds": best, "version": torch.__version__}))
"""
TORCH_VARIANTS = ("for-loop", "foreach", "fused")


def run_json(cmd, env, what):
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env)
    if p.returncode != 0:
        sys.exit(f"{what} failed (exit {p.returncode}):\n{p.stdout}\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1 << 24, help="elements (default 2^24: 64 MiB per fp32 array)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--plugin", default=PLUGIN, help="the libkeel-adamw.so to time")
    parser.add_argument("--threads", default="1,2")
    args = parser.parse_args()
    for path in (TOOL, args.plugin):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: build keel-optimizer-bandwidth and keel-adamw first")

    presets = [k for k in PRESET_VARIABLES if os.environ.get(k)]
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        env = {k: v for k, v in os.environ.items() if k not in PRESET_VARIABLES}
        env["OMP_NUM_THREADS"] = str(threads)
        keel = run_json([TOOL, "--plugin", args.plugin, "--n", str(args.n), "--repeats", str(args.repeats)], env,
                        "keel-optimizer-bandwidth")
        torch_gbs, notes = {}, []
        for variant in TORCH_VARIANTS:
            result = run_json(["/usr/bin/python3", "-c", TORCH_CHILD, str(threads), str(args.n), str(args.repeats),
                               variant], env, f"torch AdamW ({variant})")
            if "unavailable" in result:
                notes.append(result["unavailable"])
            else:
                torch_gbs[variant] = BYTES_PER_ELEMENT * args.n / result["seconds"] / 1e9
        rows.append((threads, keel, torch_gbs, notes))

    print(f"AdamW update over N = {args.n} fp32 elements ({BYTES_PER_ELEMENT} bytes each), best of {args.repeats}; "
          f"{' and '.join(PRESET_VARIABLES)} unset" + (f" (this shell presets {', '.join(presets)})" if presets else ""))
    print(f"plugin: {args.plugin}")
    header = f"{'threads':>7s} {'triad GB/s':>10s} {'keel GB/s':>9s}"
    header += "".join(f" {'torch ' + v + ' GB/s':>20s}" for v in TORCH_VARIANTS)
    header += f" {'keel/triad':>10s} {'keel/torch best':>15s}"
    print(header)
    for threads, keel, torch_gbs, notes in rows:
        line = f"{threads:7d} {keel['triad_gbs']:10.2f} {keel['adamw_gbs']:9.2f}"
        line += "".join(f" {torch_gbs[v]:20.2f}" if v in torch_gbs else f" {'n/a':>20s}" for v in TORCH_VARIANTS)
        best_torch = max(torch_gbs.values()) if torch_gbs else float("nan")
        line += f" {keel['adamw_gbs'] / keel['triad_gbs']:9.0%} {keel['adamw_gbs'] / best_torch:14.2f}x"
        print(line)
    print("note: keel/triad can pass 100%: triad is counted as STREAM counts it, 24 of the 32 bytes it "
          "moves (the write-allocate read of a is left out); keel's 28 bytes are all it moves")
    for note in sorted({note for *_, notes in rows for note in notes}):
        print(f"note: {note}")


if __name__ == "__main__":
    main()
