#!/usr/bin/env python3
"""The ABI compatibility test: a plugin built against a frozen header set (abi/vX.Y) loads into
today's core and trains exactly like the built-in plugin with the same rule (frozen_sgd against
sgd with momentum 0 and no weight decay: identical losses); a plugin claiming a newer minor is
refused with both versions named."""
import json
import re
import subprocess
import sys
import tempfile

keel, config, frozen_dir, newer_dir, version = sys.argv[1:6]
SETS = ["train.steps=4", "train.log_every=1", "train.sample_tokens=0", "train.tensorboard_dir=\"none\"",
        "data.micro_batch=4", "data.global_batch=4", "data.seq_len=64", "data.val_batches=1", "train.grad_clip=0",
        "lr_schedule.warmup_steps=0", "lr_schedule.decay=\"constant\""]


def losses(work, tag, optimizer, plugin_path):
    sets = SETS + [f"optimizer={optimizer}", f"train.metrics_path=\"{work}/{tag}.jsonl\"",
                   f"train.checkpoint.dir=\"{work}/{tag}\"", f"plugin_path=\"{plugin_path}\""]
    p = subprocess.run([keel, "run", config] + [a for s in sets for a in ("--set", s)], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: {tag} exited {p.returncode}\n{p.stderr}")
    return [json.loads(line)["loss"] for line in open(f"{work}/{tag}.jsonl")]


with tempfile.TemporaryDirectory() as work:
    frozen = losses(work, "frozen", '{"plugin": "frozen_sgd", "lr": 0.05}', frozen_dir)
    builtin = losses(work, "builtin", '{"plugin": "sgd", "lr": 0.05}', frozen_dir)
    print(f"ABI {version} frozen_sgd: {frozen}\nbuilt-in sgd:        {builtin}")
    assert frozen == builtin, "a plugin built against the frozen headers trains differently"
    assert frozen[-1] < frozen[0], "no training happened"
p = subprocess.run([keel, "validate", config, "--set", f"plugin_path=\"{newer_dir}\"", "--set",
                    "optimizer={\"plugin\": \"from_the_future\"}"], capture_output=True, text=True)
print(p.stderr.strip()[-400:])
assert p.returncode != 0 and re.search(r"built for Keel ABI \d+\.\d+, newer than this core's ABI", p.stderr), p.stderr
print("PASS")
