#!/usr/bin/env python3
"""End to end, the keel executable with arrays in the offload tier gives the resident run's bits
(Keel issue 11): a short quickstart run per case, resident and offloaded, must log the same loss
and grad_norm at every step, save byte-identical checkpoint tensors (read_param/read_state
straight from the tier), and a run resumed from the RESIDENT checkpoint into the offloaded
layout must go on with the same losses. The nvme tier's folder is left empty.

  offload_store_checks.py --keel BIN --config quickstart.json --work DIR
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

CASES = [  # name, parallel.strategy, the offload section
    ("zero3_nvme_all", {"plugin": "zero", "stage": 3},
     {"plugin": "nvme", "path": "{tier}", "optimizer_state": True, "params": True, "gradients": True}),
    ("zero2_cpu_state_grads", {"plugin": "zero", "stage": 2},
     {"plugin": "cpu", "optimizer_state": True, "gradients": True}),
    ("ddp_nvme_state", {"plugin": "ddp"}, {"plugin": "nvme", "path": "{tier}", "optimizer_state": True}),
]
STEPS = 6


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(keel, config, out, strategy, offload=None, resume=None):
    os.makedirs(out, exist_ok=True)
    cmd = [keel, "run", config,
           "--set", "parallel.strategy=" + json.dumps(strategy),
           "--set", f"train.steps={STEPS}", "--set", "train.log_every=1", "--set", "train.eval_every=1000",
           "--set", "train.sample_tokens=0",
           "--set", "train.metrics_path=" + json.dumps(os.path.join(out, "metrics.jsonl")),
           "--set", "train.checkpoint=" + json.dumps({"dir": os.path.join(out, "ckpt"), "every": 3})]
    if offload:
        cmd += ["--set", "offload=" + json.dumps(offload)]
    if resume:
        cmd += ["--resume", resume]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        fail(f"{' '.join(cmd)} exited {result.returncode}: {result.stderr.strip()[-600:]}")
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, f) if "loss" in r}


def tensors(out, step):
    folder = os.path.join(out, "ckpt", f"step-{step:08d}")
    names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    if not names:
        fail(f"{folder}: no .safetensors file")
    return {n: open(os.path.join(folder, n), "rb").read() for n in names}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    tier = os.path.join(args.work, "tier")  # the build folder: a real disk, as O_DIRECT needs
    os.makedirs(tier)
    for name, strategy, section in CASES:
        offload = {k: (v.format(tier=tier) if isinstance(v, str) else v) for k, v in section.items()}
        resident_dir = os.path.join(args.work, name, "resident")
        resident = run(args.keel, args.config, resident_dir, strategy)
        offloaded_dir = os.path.join(args.work, name, "offloaded")
        offloaded = run(args.keel, args.config, offloaded_dir, strategy, offload)
        if sorted(resident) != list(range(1, STEPS + 1)):
            fail(f"{name}: the resident run logged steps {sorted(resident)}, expected 1..{STEPS}")
        for step in resident:
            if offloaded.get(step) != resident[step]:
                fail(f"{name}: step {step}: offloaded (loss, grad_norm) {offloaded.get(step)} != resident {resident[step]}")
        if tensors(offloaded_dir, STEPS) != tensors(resident_dir, STEPS):
            fail(f"{name}: the offloaded run's step-{STEPS} checkpoint tensors differ from the resident run's")
        resumed = run(args.keel, args.config, os.path.join(args.work, name, "resumed"), strategy, offload,
                      resume=os.path.join(resident_dir, "ckpt", "step-00000003"))
        if sorted(resumed) != list(range(4, STEPS + 1)):
            fail(f"{name}: the resumed run logged steps {sorted(resumed)}, expected 4..{STEPS}")
        for step in resumed:
            if resumed[step] != resident[step]:
                fail(f"{name}: resumed into the tier, step {step}: {resumed[step]} != resident {resident[step]}")
        print(f"ok {name}: {STEPS} steps bit-identical, checkpoint identical, resume from resident identical")
    left = [os.path.join(root, f) for root, _, files in os.walk(tier) for f in files]
    if left:
        fail(f"the nvme tier left files behind: {left[:5]}")
    print("PASS")


if __name__ == "__main__":
    main()
