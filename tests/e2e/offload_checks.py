#!/usr/bin/env python3
"""The offload tier end to end (tests/e2e/offload.cmake), real runs of the keel executable with an
"offload" section (stdlib only):
- refusals: the core's keys and the tier plugin's, each named by its JSON path (keel validate);
- bad_paths: a missing folder, a read-only one, a file instead of a folder, a tmpfs folder for
  the nvme tier: each refused at start-up, non-zero, naming offload.path and the problem, before
  any step;
- full_disk: a capacity past the folder's free space, a state larger than offload.capacity_bytes,
  and (where a small filesystem can be mounted) a disk too small for the state: refused at
  start-up naming the numbers;
- parity: offloaded against resident, the same losses and the same checkpoint files byte for
  byte (parameters and optimizer state), for ddp and ZeRO-1/2/3 × {cpu, nvme} × the arrays each
  stage can offload, on 1 and 2 ranks; the arrays a stage cannot offload are refused by name;
- resume: a run resumed with offload is bit-exact to one that never stopped, also when only one
  of its halves had the tier;
- metrics: each JSONL record has "offload" (bytes per step, busy time, rates) and the progress
  line shows the tier's read and write rates; neither appears without a tier;
- sigkill: a run killed mid-training leaves its last checkpoint valid, the tier's files are never
  in the checkpoint folder, and the run resumes from it."""
import argparse
import json
import os
import re
import shutil
import socket
import signal
import subprocess
import sys
import tempfile
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
G = 4  # the global batch: divides over 1 and 2 ranks
TINY = ["model.n_layer=2", "model.n_head=2", "model.d_model=32", "model.seq_len=16", "data.seq_len=16",
        f"data.global_batch={G}", "data.text_max_bytes=262144", "data.val_batches=1", "train.log_every=1",
        "train.sample_tokens=0", "train.tensorboard_dir=\"none\"", "lr_schedule.warmup_steps=2", "optimizer.lr=3e-3"]
STRATEGIES = {"ddp": '{"plugin": "ddp"}', "zero1": '{"plugin": "zero", "stage": 1}',
              "zero2": '{"plugin": "zero", "stage": 2}', "zero3": '{"plugin": "zero", "stage": 3}'}
# What each strategy can keep in the tier (strategy.h offload_arrays), and what it must refuse.
OFFLOADABLE = {"ddp": [["optimizer_state"]], "zero1": [["optimizer_state"]],
               "zero2": [["optimizer_state"], ["optimizer_state", "gradients"]],
               "zero3": [["optimizer_state"], ["optimizer_state", "params"], ["optimizer_state", "params", "gradients"]]}
REFUSED = {"ddp": ["params", "gradients"], "zero1": ["params", "gradients"], "zero2": ["params"], "zero3": []}


def sets(assignments):
    return [a for s in assignments for a in ("--set", s)]


def offload_section(tier, folder, arrays=("optimizer_state",), **engine_keys):
    section = {"plugin": tier}
    for key in ("optimizer_state", "params", "gradients"):
        section[key] = key in arrays
    if tier == "nvme":
        section["path"] = folder
    section.update(engine_keys)
    return "offload=" + json.dumps(section)


def keel_cmd(args, work, tag, strategy="ddp", extra=(), ranks=1, steps=4, resume=None):
    micro = G // ranks
    cmd = [args.keel, "run", args.config] + sets(
        TINY + [f"parallel.strategy={STRATEGIES[strategy]}", f"data.micro_batch={micro}", f"train.steps={steps}",
                f"train.metrics_path=\"{work}/{tag}.jsonl\"", f"train.checkpoint.dir=\"{work}/{tag}\""] + list(extra))
    if resume:
        cmd += ["--resume", resume]
    if ranks > 1:
        cmd = [args.mpirun, "--oversubscribe", "-np", str(ranks)] + cmd
    return cmd


def run(args, work, tag, check=True, **kw):
    cmd = keel_cmd(args, work, tag, **kw)
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=ENV, timeout=300, cwd=work)
    if check and p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    return p


def expect_refusal(p, pattern, what):
    """A refusal: a normal non-zero exit, stderr matching pattern, and no step trained."""
    print(f"{what}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''}")
    assert p.returncode > 0, f"{what}: exit status {p.returncode}, expected a refusal\n{p.stdout}\n{p.stderr}"
    assert re.search(pattern, p.stderr), f"{what}: stderr does not match {pattern!r}:\n{p.stderr}"
    assert "step 1/" not in p.stdout, f"{what}: the run trained before refusing:\n{p.stdout}"


def records(work, tag):
    return [json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip()]


def losses(work, tag):
    return {r["step"]: r["loss"] for r in records(work, tag)}


def checkpoint_files(folder):
    """name -> bytes of every rank file of a checkpoint (the manifest holds the config, which differs)."""
    names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
    assert names, f"{folder}: no rank files"
    return {n: open(os.path.join(folder, n), "rb").read() for n in names}


def validate(args, assignments):
    return subprocess.run([args.keel, "validate", args.config] + sets(assignments), capture_output=True, text=True,
                          timeout=120)


# --- refusals ---

def check_refusals(args, work):
    cases = [
        ('offload={"params": true}', r"offload\.plugin: required key is missing"),
        ('offload={"plugin": "cpu", "params": "yes"}', r"offload\.params: expected a boolean, found a string \"yes\""),
        ('offload={"plugin": "cpu", "optimizer_state": false}',
         r"offload: optimizer_state, params and gradients are all false, so nothing would live in the tier"),
        ('offload={"plugin": "nvmee", "path": "/x"}',
         r"offload\.plugin: no offload plugin named 'nvmee' \(did you mean 'nvme'\?\)"),
        ('offload={"plugin": "nvme"}', r"offload nvme: offload\.path: required key is missing"),
        ('offload={"plugin": "nvme", "path": "/x", "queue_dept": 8}',
         r"offload nvme: offload\.queue_dept: unknown key \(did you mean \"queue_depth\"\?\)"),
        ('offload={"plugin": "nvme", "path": "/x", "block_bytes": 1000}',
         r"offload nvme: offload\.block_bytes: expected a value in \[4096, 1073741824\], found 1000"),
        ('offload={"plugin": "cpu", "path": "/x"}', r"offload cpu: offload\.path: unknown key"),
        ('offload=[1]', r"offload: expected an object, found an array"),
    ]
    for assignment, pattern in cases:
        p = validate(args, [assignment])
        print(f"{assignment}: exit {p.returncode}: {p.stderr.strip()[-300:]}")
        assert p.returncode > 0 and re.search(pattern, p.stderr), f"{assignment}: expected {pattern!r}:\n{p.stderr}"
    ok = validate(args, ['offload={"plugin": "cpu", "params": false, "capacity_bytes": 1048576}'])
    assert ok.returncode == 0, f"a valid offload section was refused:\n{ok.stderr}"


# --- bad_paths ---

class ReadOnlyFolder:
    """A folder no file can be created in: mode 0555, or for root (who ignores modes) a read-only
    bind mount. `reason` says why there is none."""

    def __init__(self, work):
        self.path, self.mounted, self.reason = os.path.join(work, "read-only"), False, ""
        source = os.path.join(work, "read-only-source")
        os.makedirs(source)
        os.makedirs(self.path)
        if os.geteuid() != 0:
            os.chmod(self.path, 0o555)
            return
        steps = [["mount", "--bind", source, self.path], ["mount", "-o", "remount,ro,bind", self.path]]
        for step in steps:
            p = subprocess.run(step, capture_output=True, text=True)
            if p.returncode != 0:
                self.reason = f"{' '.join(step)} failed: {p.stderr.strip()}"
                self.close()
                self.path = None
                return
            self.mounted = True

    def close(self):
        if self.mounted:
            subprocess.run(["umount", self.path], capture_output=True)
            self.mounted = False


def tmpfs_folder(work):
    """A folder on tmpfs: /dev/shm where it is one, else a tmpfs mounted here; (path, cleanup, reason)."""
    if os.path.isdir("/dev/shm") and "tmpfs" in subprocess.run(["stat", "-f", "-c", "%T", "/dev/shm"],
                                                               capture_output=True, text=True).stdout:
        folder = tempfile.mkdtemp(dir="/dev/shm", prefix="keel-offload-test-")
        return folder, lambda: shutil.rmtree(folder, ignore_errors=True), ""
    folder = os.path.join(work, "tmpfs")
    os.makedirs(folder)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", folder], capture_output=True, text=True)
    if p.returncode != 0:
        return None, lambda: None, f"no tmpfs: /dev/shm is not one and mounting one failed: {p.stderr.strip()}"
    return folder, lambda: subprocess.run(["umount", folder], capture_output=True), ""


def check_bad_paths(args, work):
    a_file = os.path.join(work, "a-file")
    open(a_file, "w").write("not a folder\n")
    missing = os.path.join(work, "missing")
    cases = [(missing, "does not exist"), (a_file, "is not a directory")]
    read_only = ReadOnlyFolder(work)
    tmpfs, tmpfs_cleanup, tmpfs_reason = tmpfs_folder(work)
    try:
        if read_only.path:
            cases.append((read_only.path, "is not writable"))
        if tmpfs:
            cases.append((tmpfs, "is on tmpfs, which keeps its files in memory"))
        for folder, problem in cases:
            p = run(args, work, "bad-path", check=False, extra=[offload_section("nvme", folder)])
            expect_refusal(p, r"offload nvme: offload\.path: offload folder \"" + re.escape(folder) + "\" " + problem,
                           f"offload.path {folder}")
            assert not os.path.exists(f"{work}/bad-path/latest"), "a checkpoint was written by a refused run"
    finally:
        read_only.close()
        tmpfs_cleanup()
    # Every case must have run: a skipped bad path is a test that cannot fail.
    assert read_only.path, f"the read-only folder case could not run: {read_only.reason}"
    assert tmpfs, f"the tmpfs case could not run: {tmpfs_reason}"


# --- full_disk ---

def small_filesystem(work):
    """An 8 MiB ext4 filesystem mounted in work (root, mkfs.ext4 and a loop device needed);
    (path, cleanup, reason)."""
    image, mountpoint = os.path.join(work, "small.img"), os.path.join(work, "small-fs")
    os.makedirs(mountpoint)
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    for step in (["mkfs.ext4", "-q", "-F", image], ["mount", "-o", "loop", image, mountpoint]):
        try:
            p = subprocess.run(step, capture_output=True, text=True, timeout=60)
        except FileNotFoundError as e:
            return None, lambda: None, f"{step[0]}: {e}"
        if p.returncode != 0:
            return None, lambda: None, f"{' '.join(step)} failed: {p.stderr.strip()}"
    return mountpoint, lambda: subprocess.run(["umount", mountpoint], capture_output=True), ""


def check_full_disk(args, work):
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    # A capacity the disk does not have: refused when the tier is made.
    huge = 1 << 59
    p = run(args, work, "past-free-space", check=False, extra=[offload_section("nvme", folder, capacity_bytes=huge)])
    expect_refusal(p, r"offload\.path \(with offload\.capacity_bytes " + str(huge) + r"\): offload folder \"" +
                   re.escape(folder) + r"\" has \d+ bytes free \(statvfs\) but the engine reserves " + str(huge),
                   "capacity past the free space")
    # A state larger than the capacity: refused when the strategy reserves it, before any step.
    for tier in ("cpu", "nvme"):
        p = run(args, work, f"small-capacity-{tier}", check=False,
                extra=[offload_section(tier, folder, capacity_bytes=8192)])
        expect_refusal(p, r"offload " + tier + r": offload\.capacity_bytes: " + tier + r" engine: add_extent \"[^\"]+\" "
                       r"of \d+ bytes: the engine already holds \d+ bytes in \d+ extents, and this one would exceed its "
                       r"capacity_bytes 8192", f"state past offload.capacity_bytes ({tier})")
    assert not os.listdir(folder), f"a refused tier left files behind: {os.listdir(folder)}"
    # A disk too small for the state, with no capacity set (it defaults to the free space).
    small, cleanup, reason = small_filesystem(work)
    if not small:
        print(f"skipped the small-filesystem case: {reason}")
        return
    try:
        with open(os.path.join(small, "filler"), "wb") as f:  # leave less than the state needs
            free = os.statvfs(small).f_bavail * os.statvfs(small).f_frsize
            f.write(b"\0" * max(0, free - (64 << 10)))
        p = run(args, work, "small-disk", check=False, extra=[offload_section("nvme", small)],
                steps=2)
        expect_refusal(p, r"offload\.capacity_bytes \(not set: the free space in offload\.path at start-up\): nvme "
                       r"engine: add_extent \"[^\"]+\" of \d+ bytes: the engine already holds \d+ bytes in \d+ extents, "
                       r"and this one would exceed its capacity_bytes \d+", "a disk too small for the state")
        assert os.listdir(small) == ["filler"] or sorted(os.listdir(small)) == ["filler", "lost+found"], \
            f"a refused tier left files behind: {os.listdir(small)}"
    finally:
        cleanup()


# --- parity ---

def check_parity(args, work):
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    for ranks in (1, 2):
        for strategy in args.strategies:
            tag = f"resident-{strategy}-{ranks}"
            run(args, work, tag, strategy=strategy, ranks=ranks)
            reference, reference_files = losses(work, tag), checkpoint_files(f"{work}/{tag}/step-00000004")
            for tier in ("cpu", "nvme"):
                for arrays in OFFLOADABLE[strategy]:
                    what = f"{strategy} × {ranks} rank(s), {tier}: {'+'.join(arrays)}"
                    other = f"offload-{strategy}-{ranks}-{tier}-{'-'.join(arrays)}"
                    run(args, work, other, strategy=strategy, ranks=ranks, extra=[offload_section(tier, folder, arrays)])
                    assert losses(work, other) == reference, f"{what}: losses {losses(work, other)} != {reference}"
                    files = checkpoint_files(f"{work}/{other}/step-00000004")
                    assert files == reference_files, f"{what}: the checkpoint's parameters or optimizer state differ"
                    offload = [r["offload"] for r in records(work, other)]
                    assert all(o["read_bytes_per_step"] > 0 and o["write_bytes_per_step"] > 0 for o in offload), \
                        f"{what}: the tier moved no bytes in some step: {offload}"
                    assert not os.listdir(folder), f"{what}: the tier left files: {os.listdir(folder)}"
                    print(f"{what}: 4 losses and every checkpoint byte equal to resident")
            for key in REFUSED[strategy] if ranks == 1 else []:
                p = run(args, work, f"refused-{strategy}-{key}", check=False, strategy=strategy,
                        extra=[offload_section("cpu", folder, ["optimizer_state", key])])
                expect_refusal(p, r"strategy " + strategy[:4] + r": offload\." + key + ": ", f"{strategy} with offload.{key}")


# --- resume ---

def check_resume(args, work):
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    for strategy, tier, arrays in (("zero3", "nvme", ["optimizer_state", "params"]), ("ddp", "cpu", ["optimizer_state"])):
        # decay_steps pins the schedule's horizon to 6 steps in both halves of the cut run.
        extra = [offload_section(tier, folder, arrays), "lr_schedule.decay_steps=6"]
        whole, cut = f"whole-{strategy}", f"cut-{strategy}"
        run(args, work, whole, strategy=strategy, steps=6, extra=extra)
        run(args, work, cut, strategy=strategy, steps=3, extra=extra)
        p = run(args, work, cut, strategy=strategy, steps=6, extra=extra, resume="latest")
        assert "at step 3" in p.stdout, f"{strategy}/{tier}: the second half did not resume at step 3:\n{p.stdout}"
        assert sorted(losses(work, whole)) == list(range(1, 7)), losses(work, whole)
        assert losses(work, cut) == losses(work, whole), \
            f"{strategy}/{tier}: resumed losses {losses(work, cut)} != {losses(work, whole)}"
        assert checkpoint_files(f"{work}/{cut}/step-00000006") == checkpoint_files(f"{work}/{whole}/step-00000006"), \
            f"{strategy}/{tier}: the resumed run's final checkpoint differs from the uninterrupted run's"
        print(f"{strategy} with {tier} ({'+'.join(arrays)}): resumed at step 3, steps 4-6 and the final checkpoint "
              f"bit-exact")
        # A checkpoint holds no trace of the tier: a resident first half resumes offloaded, and back.
        for first, second, tag in ((extra[1:], extra, f"into-{strategy}"), (extra, extra[1:], f"out-of-{strategy}")):
            run(args, work, tag, strategy=strategy, steps=3, extra=first)
            run(args, work, tag, strategy=strategy, steps=6, extra=second, resume="latest")
            assert losses(work, tag) == losses(work, whole), f"{tag}: losses {losses(work, tag)} != {losses(work, whole)}"
            assert checkpoint_files(f"{work}/{tag}/step-00000006") == checkpoint_files(f"{work}/{whole}/step-00000006")
        print(f"{strategy}: resident to {tier} and {tier} to resident at step 3, bit-exact as well")


# --- reshard, and offload under pipeline parallelism ---

def check_reshard(args, work):
    """A checkpoint of 2 ranks with ZeRO-3 keeping state and parameters on nvme resumes on one rank
    with ZeRO-1 and the cpu tier, and on 2 resident ddp ranks: steps 4-6 match the run that never
    stopped (1e-5 relative: the data-parallel sums' order differs). A pp 2 run with ZeRO-1 keeping
    its state in the tier equals the resident pp 2 run bit for bit."""
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    common = ["lr_schedule.decay_steps=6"]
    nvme = offload_section("nvme", folder, ["optimizer_state", "params"])
    run(args, work, "whole", strategy="zero3", ranks=2, steps=6, extra=common + [nvme])
    whole = losses(work, "whole")
    run(args, work, "saved", strategy="zero3", ranks=2, steps=3, extra=common + [nvme])
    for tag, strategy, ranks, extra in (("as-one-zero1-cpu", "zero1", 1, [offload_section("cpu", folder)]),
                                        ("as-two-ddp-resident", "ddp", 2, [])):
        shutil.copytree(f"{work}/saved", f"{work}/{tag}")
        run(args, work, tag, strategy=strategy, ranks=ranks, steps=6, extra=common + extra, resume="latest")
        resumed = losses(work, tag)
        assert sorted(resumed) == [4, 5, 6], f"{tag}: resumed steps {sorted(resumed)}"
        worst = max(abs(resumed[s] - whole[s]) / abs(whole[s]) for s in resumed)
        assert worst <= 1e-5, f"{tag}: steps 4-6 {resumed} vs {whole} (worst relative {worst:.2e})"
        print(f"(2 ranks, ZeRO-3, nvme) checkpoint resumed {tag}: steps 4-6 within {worst:.1e}")
    pipeline = ["parallel.pp=2", "model.n_layer=2"]
    run(args, work, "pp-resident", strategy="zero1", ranks=2, steps=4, extra=pipeline)
    run(args, work, "pp-offloaded", strategy="zero1", ranks=2, steps=4,
        extra=pipeline + [offload_section("nvme", folder)])
    assert losses(work, "pp-offloaded") == losses(work, "pp-resident"), \
        f"pp 2 offloaded {losses(work, 'pp-offloaded')} != resident {losses(work, 'pp-resident')}"
    moved = [r["offload"]["read_bytes_per_step"] for r in records(work, "pp-offloaded")]
    assert all(m > 0 for m in moved), f"pp 2 offloaded: the tier moved nothing on some step: {moved}"
    print("pp 2 with ZeRO-1 state on nvme: bit for bit the resident pp 2 run")


# --- metrics ---

def check_metrics(args, work):
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    p = run(args, work, "with-tier", strategy="zero3", extra=[offload_section("nvme", folder, ["optimizer_state", "params"])])
    keys = {"read_bytes_per_step", "write_bytes_per_step", "busy_ms_per_step", "read_GBps", "write_GBps"}
    for r in records(work, "with-tier"):
        offload = r.get("offload")
        assert offload and set(offload) == keys, f"step {r['step']}: \"offload\" is {offload}, expected the keys {keys}"
        assert offload["read_bytes_per_step"] > 0 and offload["write_bytes_per_step"] > 0, f"step {r['step']}: {offload}"
        assert offload["read_GBps"] > 0 and offload["write_GBps"] > 0 and offload["busy_ms_per_step"] > 0, offload
    lines = [l for l in p.stdout.splitlines() if l.startswith("step ")]
    assert len(lines) == 4 and all(re.search(r"\| offload r \d+\.\d\d w \d+\.\d\d GB/s", l) for l in lines), \
        "the progress lines do not show the tier's rates:\n" + p.stdout
    # Without a tier: neither the field nor the rates.
    q = run(args, work, "without-tier", strategy="zero3")
    assert all("offload" not in r for r in records(work, "without-tier"))
    assert "offload r" not in q.stdout, q.stdout
    print(lines[-1])


# --- sigkill ---

def check_sigkill(args, work):
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    root = f"{work}/killed"
    cmd = keel_cmd(args, work, "killed", strategy="zero3", steps=100000,
                   extra=[offload_section("nvme", folder, ["optimizer_state", "params"]), "train.checkpoint.every=2",
                          "train.checkpoint.keep=2", "train.log_every=50"])
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV, cwd=work)
    try:
        deadline = time.time() + 120
        while not os.path.exists(f"{root}/latest"):
            assert proc.poll() is None, f"the run ended before its first checkpoint:\n{proc.stderr.read()}"
            assert time.time() < deadline, "no checkpoint within 120 s"
            time.sleep(0.05)
        time.sleep(1.0)  # into the following steps and saves
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    p = subprocess.run([args.keel, "inspect", root], capture_output=True, text=True)
    assert p.returncode == 0, f"after SIGKILL, latest is not a complete checkpoint:\n{p.stderr}"
    step = int(re.search(r"step (\d+),", p.stdout).group(1))
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            assert "keel-offload" not in name and not name.endswith(".extent"), \
                f"the tier's file {os.path.join(dirpath, name)} is in the checkpoint folder"
    # The killed process could not remove its tier folder; the resumed run removes it, saying so,
    # and its own at the end.
    left = os.listdir(folder)
    assert len(left) == 1 and left[0].startswith(f"keel-offload-rank0-{proc.pid}-"), f"unexpected tier files: {left}"
    resumed = subprocess.run(keel_cmd(args, work, "killed", strategy="zero3", steps=step + 2, resume="latest",
                                      extra=[offload_section("nvme", folder, ["optimizer_state", "params"])]),
                             capture_output=True, text=True, env=ENV, cwd=work, timeout=300)
    assert resumed.returncode == 0, f"resuming from the killed run's checkpoint failed:\n{resumed.stderr}"
    removed = f'removed "{folder}/{left[0]}" ('
    assert removed in resumed.stderr and f"left by process {proc.pid} of this host, which is no longer running" \
        in resumed.stderr, f"the resumed run did not say it removed the killed run's tier:\n{resumed.stderr}"
    assert os.listdir(folder) == [], f"tier files left after the resumed run: {os.listdir(folder)}"
    print(f"killed after step {step}'s checkpoint: it is complete, holds no tier files, the run resumed from it "
          f"and removed the killed run's tier")


def start_and_wait_for_steps(cmd, work, metrics, steps=2):
    """Starts cmd and returns the process once `metrics` holds `steps` records."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, cwd=work)
    deadline = time.time() + 120
    while not (os.path.exists(metrics) and len(open(metrics).read().splitlines()) >= steps):
        if proc.poll() is not None:
            sys.exit(f"FAIL: the run ended before step {steps}:\n{proc.stderr.read()}")
        assert time.time() < deadline, f"no step {steps} within 120 s"
        time.sleep(0.05)
    return proc


def tier_pids(folder):
    """Rank -> pid, from the tier folders' owner files."""
    pids = {}
    for name in os.listdir(folder):
        with open(os.path.join(folder, name, ".keel-owner")) as f:
            pids[int(re.match(r"keel-offload-rank(\d+)-", name).group(1))] = int(f.read().split()[3])
    return pids


def check_signals(args, work):
    """SIGINT and SIGTERM finish the step, remove the tier, say so and exit 130 / 143; on two ranks a
    SIGTERM to one rank stops both after the same step."""
    arrays = ["optimizer_state", "params"]
    for name, number, code in (("SIGINT", signal.SIGINT, 130), ("SIGTERM", signal.SIGTERM, 143)):
        folder = os.path.join(work, f"tier-{name}")
        os.makedirs(folder)
        tag = f"signal-{name}"
        proc = start_and_wait_for_steps(keel_cmd(args, work, tag, strategy="zero3", steps=100000,
                                                 extra=[offload_section("nvme", folder, arrays)]),
                                        work, f"{work}/{tag}.jsonl")
        assert len(os.listdir(folder)) == 1, os.listdir(folder)
        proc.send_signal(number)
        out, err = proc.communicate(timeout=120)
        stopped = re.search(rf"keel: stopped by {name} after step (\d+) of 100000; this run saved no checkpoint", err)
        assert proc.returncode == code and stopped, f"{name}: exit {proc.returncode}\n{err[-2000:]}"
        last = json.loads(open(f"{work}/{tag}.jsonl").read().splitlines()[-1])["step"]
        assert last == int(stopped.group(1)), f"{name}: the last logged step is {last}, the message says {stopped[1]}"
        assert os.listdir(folder) == [], f"{name}: the tier was left: {os.listdir(folder)}"
        print(f"{name}: stopped after step {last}, exit {code}, tier removed")
    if not args.mpirun:
        print("two ranks: skipped (no mpirun)")
        return
    folder = os.path.join(work, "tier-2ranks")
    os.makedirs(folder)
    proc = start_and_wait_for_steps(keel_cmd(args, work, "signal-2ranks", strategy="zero3", steps=100000, ranks=2,
                                             extra=[offload_section("nvme", folder, arrays)]),
                                    work, f"{work}/signal-2ranks.jsonl")
    os.kill(tier_pids(folder)[1], signal.SIGTERM)  # rank 1 alone, as a scheduler preempting one node would
    out, err = proc.communicate(timeout=120)
    assert proc.returncode != 0 and re.search(r"keel: stopped by SIGTERM after step \d+", err), \
        f"two ranks: exit {proc.returncode}\n{err[-2000:]}"
    assert "Exit code:    143" in err, f"rank 1 did not exit 143:\n{err[-2000:]}"
    assert os.listdir(folder) == [], f"two ranks: tiers left: {os.listdir(folder)}"
    print("two ranks, SIGTERM to rank 1: both stopped after the same step, both tiers removed")


def check_failure_teardown(args, work):
    """A rank that fails says why every time (its line is written before the abort, which waits for the
    launcher to pass it on) and removes its tier first; what a rank killed by the launcher leaves
    is removed by the next run, which says so."""
    if not args.mpirun:
        print("skipped: mpirun is not installed")
        sys.exit(77)
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    arrays = ["optimizer_state", "params"]
    env = dict(ENV, KEEL_FAULT_INJECT="rank=1,step=3,mode=error")
    for attempt in range(5):
        cmd = keel_cmd(args, work, f"fail-{attempt}", strategy="zero3", steps=50, ranks=2,
                       extra=[offload_section("nvme", folder, arrays)])
        p = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env, timeout=300, cwd=work)
        assert p.returncode != 0, "the job exited 0 although rank 1 failed"
        assert "keel: rank 1 of 2: injected fault after step 3 (KEEL_FAULT_INJECT)" in p.stderr, \
            f"attempt {attempt}: the failing rank's message did not reach the user:\n{p.stderr[-3000:]}"
        left = os.listdir(folder)
        assert not any(n.startswith("keel-offload-rank1-") for n in left), f"rank 1 left its tier: {left}"
        assert len(left) <= 1, f"more than rank 0's tier left: {left}"
        for pid in tier_pids(folder).values():  # the launcher may return before its SIGKILL has landed
            deadline = time.time() + 30
            while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
                time.sleep(0.1)
        p = run(args, work, f"after-{attempt}", strategy="zero3", steps=1,
                extra=[offload_section("nvme", folder, arrays)])
        for name in left:
            assert f'removed "{folder}/{name}"' in p.stderr, f"the next run did not remove {name}:\n{p.stderr}"
        assert os.listdir(folder) == [], f"tier files left after the next run: {os.listdir(folder)}"
    print("5 failures on rank 1: its message reached the user each time, its tier was removed, and what rank 0 "
          "left was removed by the next run")


def check_stale_folders(args, work):
    """Start-up removes only the tier folders of dead processes of this host, and only engine files."""
    folder = os.path.join(work, "tier")
    os.makedirs(folder)
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()

    def folder_with(name, owner, files=("0-params.extent",)):
        path = os.path.join(folder, name)
        os.makedirs(path)
        if owner is not None:
            with open(os.path.join(path, ".keel-owner"), "w") as f:
                f.write(f"host {owner[0]}\npid {owner[1]}\n")
        for file in files:
            with open(os.path.join(path, file), "wb") as f:
                f.write(b"\0" * 8192)
        return path

    stale = folder_with(f"keel-offload-rank0-{dead.pid}-0", (host, dead.pid), ("0-params.extent", "1-state0.extent"))
    other_host = folder_with(f"keel-offload-rank1-{dead.pid}-0", ("another-host.example", dead.pid))
    alive = folder_with(f"keel-offload-rank2-{os.getpid()}-0", (host, os.getpid()))
    old_style = folder_with(f"keel-offload-rank3-{dead.pid}-0", None)
    foreign = folder_with(f"keel-offload-rank4-{dead.pid}-0", (host, dead.pid), ("0-params.extent", "notes.txt"))
    p = run(args, work, "stale", strategy="zero3", steps=1,
            extra=[offload_section("nvme", folder, ["optimizer_state", "params"])])
    assert f'removed "{stale}" (3 files, ' in p.stderr and f"left by process {dead.pid} of this host" in p.stderr, \
        p.stderr
    assert not os.path.exists(stale)
    assert os.path.exists(other_host) and os.path.exists(alive), "a live or another host's tier was removed"
    assert os.path.exists(old_style) and f'"{old_style}" has no owner file' in p.stderr, p.stderr
    assert f'holds "notes.txt", which is not an engine file' in p.stderr, p.stderr
    assert any(n.startswith(os.path.basename(foreign) + ".removing-") for n in os.listdir(folder)), os.listdir(folder)
    for path in (other_host, alive, old_style):
        assert os.path.isfile(os.path.join(path, "0-params.extent")), f"{path} lost a file"
    print("removed the dead process's tier; left another host's, a live one's, an old unowned one (named) and one "
          "holding a foreign file (named)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check")
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--mpirun", default=shutil.which("mpirun"))
    parser.add_argument("--strategies", default="ddp,zero1,zero2,zero3")
    args = parser.parse_args()
    args.strategies = args.strategies.split(",")
    args.keel, args.config = os.path.abspath(args.keel), os.path.abspath(args.config)  # runs happen in the work folder
    if args.check in ("parity", "reshard") and not args.mpirun:
        print("skipped: mpirun is not installed (apt-get install openmpi-bin)")
        sys.exit(77)
    with tempfile.TemporaryDirectory(dir=os.environ.get("KEEL_OFFLOAD_TEST_FOLDER")) as work:
        {"refusals": check_refusals, "bad_paths": check_bad_paths, "full_disk": check_full_disk,
         "parity": check_parity, "resume": check_resume, "metrics": check_metrics, "sigkill": check_sigkill,
         "signals": check_signals, "failure_teardown": check_failure_teardown, "stale_folders": check_stale_folders,
         "reshard": check_reshard}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()
