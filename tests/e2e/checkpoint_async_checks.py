#!/usr/bin/env python3
"""Asynchronous checkpoints (train.checkpoint.async) keep every promise of synchronous ones.
- same_as_sync: on 2 ranks with ZeRO-1, ZeRO-3, tp 2 and pp 2, a run saving every 2 steps
  asynchronously writes rank files byte for byte equal to a synchronous run's, manifests equal
  but for the two runs' own paths and the async flag, and the same losses; a resume from the
  asynchronous step-4 checkpoint trains steps 5-8 bit for bit as the run that never stopped.
- kill_while_saving: rank 0 (which publishes) and then rank 1 are killed by SIGKILL while the
  background write of step 6 has written its file but not published the checkpoint: the job
  ends non-zero, `latest` still names step 4, which passes `keel inspect`, and resuming from it
  trains steps 5-8 bit for bit as the run that never stopped.
Under mpirun --oversubscribe; skipped (77) without it."""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

COMMON = ["train.checkpoint.every=2", "train.checkpoint.keep=10", "lr_schedule.decay_steps=8"]
ASYNC = ["train.checkpoint.async=true"]
LAYOUTS = {  # tag: strategy, settings
    "zero1": ("zero1", []),
    "zero3": ("zero3", []),
    "tp2": ("ddp", ["parallel.tp=2", f"data.micro_batch={pc.G}"]),
    "pp2": ("ddp", ["parallel.pp=2", f"data.micro_batch={pc.G // 4}"]),
}


def own_paths_removed(manifest):
    train = manifest["config"]["train"]
    for key in ("metrics_path",):
        train.pop(key, None)
    train.get("checkpoint", {}).pop("dir", None)
    train.get("checkpoint", {}).pop("async", None)
    return manifest


def check_same_as_sync(args, work):
    for tag, (strategy, sets) in LAYOUTS.items():
        pc.run(args, 2, strategy, work, f"{tag}-sync", COMMON + sets, steps=8)
        p = pc.run(args, 2, strategy, work, f"{tag}-async", COMMON + sets + ASYNC, steps=8)
        assert "writing in the background" in p.stdout, f"{tag}: no background save reported:\n{p.stdout[-1500:]}"
        assert pc.losses(work, f"{tag}-sync") == pc.losses(work, f"{tag}-async"), f"{tag}: losses differ"
        for step in (2, 4, 6, 8):
            a, b = f"{work}/{tag}-sync/step-{step:08d}", f"{work}/{tag}-async/step-{step:08d}"
            files = sorted(f for f in os.listdir(a) if f.endswith(".safetensors"))
            assert files and files == sorted(f for f in os.listdir(b) if f.endswith(".safetensors")), \
                f"{tag} step {step}: rank files {files} vs {os.listdir(b)}"
            for f in files:
                assert filecmp.cmp(f"{a}/{f}", f"{b}/{f}", shallow=False), f"{tag} step {step}: {f} differs"
            ma, mb = (own_paths_removed(json.load(open(f"{d}/manifest.json"))) for d in (a, b))
            assert ma == mb, f"{tag} step {step}: manifests differ beyond the runs' own paths"
        print(f"{tag}: 4 asynchronous saves byte for byte equal to synchronous ones, losses equal")
    # Resume from the asynchronous checkpoint of step 4.
    shutil.copytree(f"{work}/zero1-async/step-00000004", f"{work}/resumed/step-00000004")
    pc.run(args, 2, "zero1", work, "resumed", COMMON + ASYNC, steps=8, resume="latest")
    straight, resumed = pc.losses(work, "zero1-async"), pc.losses(work, "resumed")
    assert sorted(resumed) == [5, 6, 7, 8] and all(resumed[s] == straight[s] for s in resumed), \
        f"resumed losses {resumed} differ from {straight}"
    print("resumed from the asynchronous step-4 checkpoint: steps 5-8 bit for bit")


def check_kill_while_saving(args, work):
    pc.run(args, 2, "zero1", work, "straight", COMMON + ASYNC, steps=8)
    straight = pc.losses(work, "straight")
    for rank in (0, 1):
        tag = f"killed-rank{rank}"
        p = pc.run(args, 2, "zero1", work, tag, COMMON + ASYNC, steps=8, check=False,
                   env_extra={"KEEL_FAULT_INJECT": f"rank={rank},step=6,mode=kill_while_saving"})
        assert p.returncode != 0, f"{tag}: the job exited 0 although rank {rank} was killed"
        root = f"{work}/{tag}"
        left = sorted(os.listdir(root))
        temporaries = [d for d in left if d.startswith(".tmp-step-00000006")]
        assert temporaries and any(f.endswith(".safetensors") for f in os.listdir(f"{root}/{temporaries[0]}")), \
            f"{tag}: the kill did not land during the background write of step 6: {left}"
        assert not os.path.exists(f"{root}/step-00000006"), f"{tag}: step 6 was published: {left}"
        assert open(f"{root}/latest").read().strip() == "step-00000004", f"{tag}: latest is not step 4"
        inspect = subprocess.run([args.keel, "inspect", root], capture_output=True, text=True)
        assert inspect.returncode == 0 and "step 4," in inspect.stdout, f"{tag}: {inspect.stdout}{inspect.stderr}"
        print(f"{tag}: killed mid-write of step 6 (left {left}); latest = step 4, which inspects clean")
        pc.run(args, 2, "zero1", work, tag, COMMON + ASYNC, steps=8, resume="latest")
        resumed = pc.losses(work, tag)
        assert all(resumed[s] == straight[s] for s in (5, 6, 7, 8)), f"{tag}: resumed {resumed} vs {straight}"
        assert not any(d.startswith(".tmp-") for d in os.listdir(root)), f"{tag}: the stale temporary folder remains"
        print(f"{tag}: resumed from step 4, steps 5-8 bit for bit as the run that never stopped")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["same_as_sync", "kill_while_saving"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    args = parser.parse_args()
    if not args.mpirun:
        print("SKIPPED: mpirun is not installed (apt-get install openmpi-bin)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as work:
        {"same_as_sync": check_same_as_sync, "kill_while_saving": check_kill_while_saving}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()
