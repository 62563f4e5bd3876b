#!/usr/bin/env python3
"""Checkpoint end-to-end checks of the keel executable (stdlib only):
- resume: 2N steps in one run equal N steps, save, resume, N steps — identical losses and
  identical parameters and optimizer state, bit for bit;
- a resume whose model config differs is refused, naming the key;
- corrupted checkpoints (truncated file, wrong manifest version, checksum mismatch) are refused
  with a clear error and nothing already saved is lost;
- SIGKILL at random moments, saving every step: `latest` always names a complete, verified
  checkpoint, the step never goes backwards, and the run resumes;
- non-finite values stop the run or skip the step, and are never checkpointed;
- a `latest` pointer that cannot be written fails the save, naming it, and leaves no
  latest.tmp-* behind;
- on_interrupt: Ctrl-C with train.checkpoint.on_interrupt saves at the step it stopped after,
  and resuming from that checkpoint gives the uninterrupted run's losses bit for bit."""
import argparse
import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

SMALL = ["data.micro_batch=4", "data.global_batch=4", "data.seq_len=64", "train.sample_tokens=0", "train.log_every=1",
         "data.val_batches=1", "train.tensorboard_dir=\"none\"", "lr_schedule.warmup_steps=2"]


def keel_run(keel, config, sets, resume=None, check=True):
    cmd = [keel, "run", config] + [a for s in sets for a in ("--set", s)]
    if resume:
        cmd += ["--resume", resume]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def metrics(path):
    return {r["step"]: r for r in (json.loads(line) for line in open(path) if line.strip())}


def tensors(checkpoint_file):
    """name -> raw bytes of every tensor in a safetensors file."""
    with open(checkpoint_file, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]] for k, v in header.items() if k != "__metadata__"}


def run_dir(work, name):
    return [f"train.checkpoint.dir=\"{work}/{name}\"", f"train.metrics_path=\"{work}/{name}.jsonl\""]


def check_resume(keel, config, work):
    n = 4
    # The first half stops at n steps; decay_steps pins the schedule's horizon to 2n in both runs.
    common = SMALL + [f"lr_schedule.decay_steps={2 * n}", f"train.checkpoint.every={n}"]
    keel_run(keel, config, common + run_dir(work, "straight") + [f"train.steps={2 * n}"])
    keel_run(keel, config, common + run_dir(work, "split") + [f"train.steps={n}"])
    p = keel_run(keel, config, common + run_dir(work, "split") + [f"train.steps={2 * n}"], resume="latest")
    assert f"at step {n}" in p.stdout, p.stdout
    straight, split = metrics(f"{work}/straight.jsonl"), metrics(f"{work}/split.jsonl")
    for step in range(1, 2 * n + 1):
        a, b = straight[step]["loss"], split[step]["loss"]
        print(f"step {step}: uninterrupted {a!r}  resumed {b!r}")
        assert a == b, f"step {step}: losses differ ({a} vs {b})"
    final = f"step-{2 * n:08d}/rank00000.safetensors"
    ta, tb = tensors(f"{work}/straight/{final}"), tensors(f"{work}/split/{final}")
    assert ta.keys() == tb.keys() and any(k.startswith("state1/") for k in ta), sorted(ta)[:5]
    different = [k for k in ta if ta[k] != tb[k]]
    assert not different, f"final tensors differ: {different[:5]}"
    print(f"{len(ta)} tensors (parameters and both AdamW moments) identical bit for bit")


def expect_failure(cmd, pattern):
    p = subprocess.run(cmd, capture_output=True, text=True)
    print(p.stderr.strip()[-400:])
    assert p.returncode != 0, f"{' '.join(cmd)} exited 0"
    assert re.search(pattern, p.stderr), f"stderr does not match {pattern!r}:\n{p.stderr}"


def check_refusals(keel, config, work):
    keel_run(keel, config, SMALL + run_dir(work, "base") + ["train.steps=3", "train.checkpoint.every=1", "train.checkpoint.keep=3"])
    root = f"{work}/base"
    sets = [a for s in SMALL + run_dir(work, "base") + ["train.steps=4"] for a in ("--set", s)]
    expect_failure([keel, "run", config] + sets + ["--set", "model.n_layer=2", "--resume", "latest"],
                   r"model\.n_layer is 4 in the checkpoint but 2 in this config")

    # Damage copies of the newest checkpoint three ways; the originals must stay loadable.
    def damaged(name, damage):
        folder = f"{work}/{name}"
        shutil.copytree(f"{root}/step-00000003", folder)
        damage(folder)
        return folder

    def truncate(folder):
        path = f"{folder}/rank00000.safetensors"
        os.truncate(path, os.path.getsize(path) // 2)

    def flip_byte(folder):
        path = f"{folder}/rank00000.safetensors"
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) - 10)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))

    def future_version(folder):
        manifest = json.load(open(f"{folder}/manifest.json"))
        manifest["format_version"] = 99
        json.dump(manifest, open(f"{folder}/manifest.json", "w"))

    for name, damage, pattern in (("truncated", truncate, r"truncated or altered"),
                                  ("flipped", flip_byte, r"checksum mismatch"),
                                  ("future", future_version, r"format_version 99 is not one this Keel reads")):
        folder = damaged(name, damage)
        expect_failure([keel, "run", config] + sets + ["--resume", folder], pattern)
        expect_failure([keel, "inspect", folder], pattern)
    for step in (1, 2, 3):  # keep=3: all three saved checkpoints are intact
        p = subprocess.run([keel, "inspect", f"{root}/step-{step:08d}"], capture_output=True, text=True)
        assert p.returncode == 0 and "checksums verified" in p.stdout, p.stderr

    # keep=2 on the next saves: only the two newest remain, and latest names the newest.
    keel_run(keel, config, SMALL + run_dir(work, "base") + ["train.steps=5", "train.checkpoint.every=1",
                                                            "train.checkpoint.keep=2"], resume="latest")
    left = sorted(n for n in os.listdir(root) if n.startswith("step-"))
    assert left == ["step-00000004", "step-00000005"], left
    assert open(f"{root}/latest").read().strip() == "step-00000005"


def check_nonfinite(keel, config, work):
    # lr 1e36 makes the first update finite but enormous (about 1e37), and the next loss overflow.
    blowup = SMALL + ["optimizer.lr=1e36", "train.grad_clip=0", "lr_schedule.warmup_steps=0", "train.checkpoint.every=1",
                      "train.steps=4"]
    stop = subprocess.run([keel, "run", config] + [a for s in blowup + run_dir(work, "stop") for a in ("--set", s)],
                          capture_output=True, text=True)
    print(stop.stderr.strip()[-300:])
    assert stop.returncode != 0 and re.search(r"step 2: the loss is not finite", stop.stderr), stop.stderr
    assert not os.path.exists(f"{work}/stop/step-00000002"), "a checkpoint was written after the non-finite step"
    skip = keel_run(keel, config, blowup + run_dir(work, "skip") + ["train.on_nonfinite=\"skip\""])
    records = metrics(f"{work}/skip.jsonl")
    skipped = [s for s, r in records.items() if r.get("skipped")]
    print("skipped steps:", skipped)
    assert skipped == [2, 3, 4], skipped
    assert "update skipped" in skip.stdout


def check_latest_write_failure(keel, config, work):
    # A folder squats on the name `latest`: the pointer's temporary file is written, then its
    # rename over a folder fails. Nothing of that attempt may stay in the root.
    root = f"{work}/squatted"
    os.makedirs(f"{root}/latest/occupied")
    p = keel_run(keel, config, SMALL + run_dir(work, "squatted") + ["train.steps=1", "train.checkpoint.every=1"],
                 check=False)
    print(p.stderr.strip()[-300:])
    assert p.returncode == 1, f"the run exited {p.returncode} although `latest` could not be written:\n{p.stderr}"
    assert re.search(r"cannot rename .*/latest\.tmp-\d+ to .*/squatted/latest: Is a directory", p.stderr), p.stderr
    leftovers = [n for n in os.listdir(root) if n.startswith("latest.tmp-")]
    assert not leftovers, f"the failed pointer write left {leftovers} in {root}"


def wait_for_save_to_start(root, proc, timeout_s=30):
    # Skip a save already in progress when we start looking, so the kill lands at a random depth
    # into a fresh one.
    deadline = time.time() + timeout_s
    seen_before = set(n for n in os.listdir(root) if n.startswith(".tmp-")) if os.path.isdir(root) else set()
    while time.time() < deadline and proc.poll() is None:
        current = set(n for n in os.listdir(root) if n.startswith(".tmp-")) if os.path.isdir(root) else set()
        if current - seen_before:
            return
        seen_before &= current
        time.sleep(0.001)


def wait_for_first_checkpoint(root, proc, timeout_s=120):
    # On a loaded machine a run may need longer than the random kill delay to finish its first
    # save; without one, every later trial would start from scratch and the resume path would go
    # untested. So the first trial lets one complete.
    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None and not os.path.exists(f"{root}/latest"):
        time.sleep(0.01)


def check_sigkill(keel, config, work, trials, seed):
    rng = random.Random(seed)
    root = f"{work}/crash"
    # A wide model so that a save (parameters + two AdamW moments) takes a good share of each step.
    sets = SMALL + run_dir(work, "crash") + ["model.d_model=384", "model.n_head=6", "model.n_layer=2",
                                             "train.steps=100000", "train.checkpoint.every=1", "train.checkpoint.keep=2"]
    args = [a for s in sets for a in ("--set", s)]
    last_step, mid_save_kills = -1, 0
    for trial in range(trials):
        cmd = [keel, "run", config] + args + (["--resume", "latest"] if os.path.exists(f"{root}/latest") else [])
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if trial == 0:
            wait_for_first_checkpoint(root, proc)
            time.sleep(rng.uniform(0.0, 1.0))
        elif trial % 2 == 0:
            time.sleep(rng.uniform(0.8, 3.0))  # anywhere: startup, a step, or a save
        else:
            wait_for_save_to_start(root, proc)  # aimed: inside a save, at a random depth
            time.sleep(rng.uniform(0.0, 0.03))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        leftovers = [n for n in os.listdir(root) if n.startswith(".tmp-")] if os.path.isdir(root) else []
        mid_save_kills += bool(leftovers)
        if not os.path.exists(f"{root}/latest"):
            assert not any(n.startswith("step-") for n in os.listdir(root)) if os.path.isdir(root) else True
            print(f"trial {trial}: killed before the first save")
            continue
        p = subprocess.run([keel, "inspect", root], capture_output=True, text=True)
        assert p.returncode == 0, f"trial {trial}: latest is not a complete checkpoint:\n{p.stderr}"
        step = int(re.search(r"step (\d+),", p.stdout).group(1))
        print(f"trial {trial}: killed {'during a save' if leftovers else 'between saves'}; latest = step {step}")
        assert step >= last_step, f"latest went backwards: {last_step} -> {step}"
        last_step = step
    print(f"{mid_save_kills} of {trials} kills landed during a save (seed {seed})")
    assert mid_save_kills >= trials // 4, "too few kills landed during a save: the test did not test crash safety"
    final = subprocess.run([keel, "run", config] + args[:-6] + ["--set", f"train.steps={last_step + 2}", "--set",
                                                                "train.checkpoint.every=1", "--resume", "latest"],
                           capture_output=True, text=True)
    assert final.returncode == 0 and f"at step {last_step}" in final.stdout, final.stdout + final.stderr


def check_on_interrupt(keel, config, work):
    sets = SMALL + run_dir(work, "interrupted") + ["train.steps=100000", "lr_schedule.decay_steps=100000",
                                                   "train.checkpoint.on_interrupt=true"]
    proc = subprocess.Popen([keel, "run", config] + [a for s in sets for a in ("--set", s)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (os.path.exists(f"{work}/interrupted.jsonl") and len(metrics(f"{work}/interrupted.jsonl")) >= 3):
        assert proc.poll() is None and time.time() < deadline, "the run ended or logged no 3 steps in 120 s"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    stopped = re.search(r"stopped by SIGINT after step (\d+) of 100000; this run's last checkpoint is step (\d+)", err)
    assert proc.returncode == 130 and stopped, f"exit {proc.returncode}\n{err[-2000:]}"
    step = int(stopped.group(1))
    assert int(stopped.group(2)) == step, f"saved step {stopped.group(2)}, stopped after {step}"
    assert open(f"{work}/interrupted/latest").read().strip() == f"step-{step:08d}"
    print(f"SIGINT: stopped after step {step} and saved it")
    # Two more steps from that checkpoint against one uninterrupted run of step + 2.
    horizon = ["lr_schedule.decay_steps=100000", f"train.steps={step + 2}"]
    keel_run(keel, config, SMALL + run_dir(work, "interrupted") + horizon, resume="latest")
    keel_run(keel, config, SMALL + run_dir(work, "straight") + horizon)
    resumed, straight = metrics(f"{work}/interrupted.jsonl"), metrics(f"{work}/straight.jsonl")
    for s in (step + 1, step + 2):
        print(f"step {s}: uninterrupted {straight[s]['loss']!r}  resumed {resumed[s]['loss']!r}")
        assert straight[s]["loss"] == resumed[s]["loss"], f"step {s}: losses differ"
    # Without on_interrupt a stop saves nothing new.
    proc = subprocess.Popen([keel, "run", config] + [a for s in SMALL + run_dir(work, "plain") + ["train.steps=100000"]
                                                     for a in ("--set", s)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while not (os.path.exists(f"{work}/plain.jsonl") and metrics(f"{work}/plain.jsonl")):
        assert proc.poll() is None and time.time() < deadline + 120, "the second run logged nothing"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "this run saved no checkpoint" in err, err[-2000:]
    assert not os.path.exists(f"{work}/plain/latest")


def check_sample_interrupt(keel, config, work):
    """Ctrl-C during the closing sample (a million tokens asked) ends it after the token in
    progress: exit 130, the tokens so far printed and the stop said (the first Ctrl-C used to be
    ignored until the sample finished)."""
    sets = SMALL + run_dir(work, "sampling") + ["train.steps=2", "train.sample_tokens=1000000"]
    proc = subprocess.Popen([keel, "run", config] + [a for s in sets for a in ("--set", s)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    chunks = []  # bytes as they are streamed (a byte-level model's sample need not be UTF-8)
    reader = threading.Thread(target=lambda: chunks.extend(iter(lambda: proc.stdout.read1(4096), b"")), daemon=True)
    reader.start()
    header = b"--- sample (1000000 tokens) ---\n"
    deadline = time.time() + 120
    while header not in b"".join(chunks) or len(b"".join(chunks).split(header, 1)[1]) < 20:
        assert proc.poll() is None and time.time() < deadline, f"no sample streamed in 120 s:\n{b''.join(chunks)[-1000:]}"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read().decode(errors="replace")
    proc.wait(timeout=60)
    reader.join(timeout=60)
    out = b"".join(chunks)
    stopped = re.search(r"stopped by SIGINT during the closing sample, after (\d+) of 1000000 tokens", err)
    assert proc.returncode == 130 and stopped, f"exit {proc.returncode}\n{err[-2000:]}"
    streamed = out.split(header, 1)[1].split(b"\n---", 1)[0]
    assert out.rstrip().endswith(b"---"), "the sample's closing line is missing"
    print(f"SIGINT during the sample: stopped after {stopped.group(1)} tokens, {len(streamed)} bytes printed")
    # The signal came once 20 bytes (the prompt and the first tokens) were out: the tokens
    # printed are the ones counted, one byte each after the prompt.
    assert 1 <= int(stopped.group(1)) < 1000000 and len(streamed) >= int(stopped.group(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        {"resume": lambda: check_resume(args.keel, args.config, work),
         "refusals": lambda: check_refusals(args.keel, args.config, work),
         "nonfinite": lambda: check_nonfinite(args.keel, args.config, work),
         "latest_write_failure": lambda: check_latest_write_failure(args.keel, args.config, work),
         "sample_interrupt": lambda: check_sample_interrupt(args.keel, args.config, work),
         "on_interrupt": lambda: check_on_interrupt(args.keel, args.config, work),
         "sigkill": lambda: check_sigkill(args.keel, args.config, work, args.trials, args.seed)}[args.check]()
    print("PASS")


if __name__ == "__main__":
    main()
