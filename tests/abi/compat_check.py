#!/usr/bin/env python3
"""The ABI compatibility test: plugins as an older release built them (declaring its minor and
passing its struct sizes, or against the frozen 0.18 headers; tests/abi/CMakeLists.txt) load into
today's core and train exactly like the built-in plugins with the same rule:
- frozen_sgd against sgd with momentum 0 and no weight decay: identical losses;
- the strategy frozen_resident (whole, resident parameters; it walks the core's spec array with
  its release's size of keel_param_spec, which grew in 0.6) against the built-in ddp on one
  rank, with AdamW (two state slots, weight decay by the optimizer's decay flags) and with SGD
  (momentum, coupled L2): identical per-step losses, 0 difference. Both call the same
  elementwise optimizer on the same elements, ddp over runs of neighbouring parameters and
  frozen_resident once per parameter, which gives the same bits; only grad_sq_norm's double sum
  is grouped differently, so clipping stays off (train.grad_clip=0) and the norm is not compared;
- a checkpoint saved with frozen_resident resumes with ddp, and the reverse, and the resumed
  steps' losses equal the uninterrupted run's;
a strategy built before 0.7 is refused at pp 2 by keel validate, naming its ABI; the packed-state
optimizer adamw8bit (0.12) with frozen_resident is refused with the reason. Once, not per minor: a
plugin claiming a newer minor than the core's is refused with both versions named (`newer`).
The built-in plugins' runs do not depend on the minor: `references` (ctest abi.compat.references,
a fixture of every minor's test) makes them once into REFERENCES (their losses in
references.json, the ddp AdamW run's checkpoints beside), and each minor's run (`old`) reads them.
Every run names a configured peak (backend.peak_tflops) so the cpu backend skips its one-second
sgemm measurement, which only the logged MFU uses.
Usage: compat_check.py KEEL CONFIG references REFERENCES
       compat_check.py KEEL CONFIG newer NEWER_DIR
       compat_check.py KEEL CONFIG old REFERENCES PLUGIN_DIR MINOR LABEL"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

keel, config, mode = sys.argv[1:4]
references = sys.argv[4] if mode in ("references", "old") else ""
newer_dir = sys.argv[4] if mode == "newer" else ""
frozen_dir, minor, version = "", 0, ""  # the old plugins' folder, their declared minor, "0.N (LABEL)"
if mode == "old":
    frozen_dir, minor = sys.argv[5], int(sys.argv[6])
    version = f"0.{minor} ({sys.argv[7]})"
PEAK = "backend.peak_tflops=1"
SETS = [PEAK, "train.steps=4", "train.log_every=1", "train.sample_tokens=0", "train.tensorboard_dir=\"none\"",
        "data.micro_batch=4", "data.global_batch=4", "data.seq_len=64", "data.val_batches=1", "train.grad_clip=0",
        "lr_schedule.warmup_steps=0", "lr_schedule.decay=\"constant\""]
FROZEN_STRATEGY = '{"plugin": "frozen_resident"}'
BUILTIN_STRATEGY = '{"plugin": "ddp"}'
ADAMW = '{"plugin": "adamw", "lr": 2e-3, "betas": [0.9, 0.95], "weight_decay": 0.1}'
SGD_MOMENTUM = '{"plugin": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}'
SAVE_AT = 2  # the checkpoint the cross-strategy resumes start from; runs are 4 steps


def run(work, tag, optimizer, strategy=BUILTIN_STRATEGY, extra=(), resume=None):
    """Trains and returns {step: loss} from the run's metrics file."""
    sets = SETS + [f"optimizer={optimizer}", f"parallel.strategy={strategy}", f"train.metrics_path=\"{work}/{tag}.jsonl\"",
                   f"train.checkpoint.dir=\"{work}/{tag}\""] + ([f"plugin_path=\"{frozen_dir}\""] if frozen_dir else [])
    sets += list(extra)
    cmd = [keel, "run", config] + [a for s in sets for a in ("--set", s)] + (["--resume", resume] if resume else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"FAIL: {tag} ({strategy}, {optimizer}{', resumed from ' + resume if resume else ''}) exited "
                 f"{p.returncode}\n{p.stderr}")
    return {r["step"]: r["loss"] for r in (json.loads(line) for line in open(f"{work}/{tag}.jsonl") if line.strip())}


def expect_equal(what, expected, found):
    """Per-step losses, bit for bit; the message names the version, the runs and the first step that differs."""
    print(f"ABI {version} {what}:\n  expected {[expected[s] for s in sorted(expected)]}\n  found    {[found[s] for s in sorted(found)]}")
    assert sorted(found) == sorted(expected), f"ABI {version} {what}: steps {sorted(found)}, expected {sorted(expected)}"
    for step in sorted(expected):
        assert found[step] == expected[step], (f"ABI {version} {what}: step {step} loss {found[step]!r}, expected "
                                               f"{expected[step]!r} (difference {found[step] - expected[step]:.3g})")


EVERY = [f"train.checkpoint.every={SAVE_AT}"]


def make_references():
    """The built-in plugins' runs every minor is compared with, once, into REFERENCES (made anew)."""
    shutil.rmtree(references, ignore_errors=True)
    os.makedirs(references)
    losses = {"builtin_sgd": run(references, "builtin_sgd", '{"plugin": "sgd", "lr": 0.05}'),
              "ddp_adamw": run(references, "ddp_adamw", ADAMW, BUILTIN_STRATEGY, EVERY),
              "ddp_sgd": run(references, "ddp_sgd", SGD_MOMENTUM, BUILTIN_STRATEGY, EVERY),
              "ddp_adamw_straight": run(references, "ddp_adamw_straight", ADAMW)}
    for tag, found in losses.items():
        assert found[4] < found[1], f"reference {tag}: no training happened ({found})"
    with open(os.path.join(references, "references.json.tmp"), "w") as f:
        json.dump({tag: {str(s): l for s, l in found.items()} for tag, found in losses.items()}, f)
    os.replace(os.path.join(references, "references.json.tmp"), os.path.join(references, "references.json"))
    print(f"references: {sorted(losses)} in {references}")


def reference(tag):
    with open(os.path.join(references, "references.json")) as f:
        return {int(s): l for s, l in json.load(f)[tag].items()}


def check_frozen_optimizer(work):
    frozen = run(work, "frozen_sgd", '{"plugin": "frozen_sgd", "lr": 0.05}')
    expect_equal("optimizer frozen_sgd against built-in sgd", reference("builtin_sgd"), frozen)
    assert frozen[4] < frozen[1], "no training happened"


def check_frozen_strategy(work):
    for label, optimizer in (("adamw", ADAMW), ("sgd", SGD_MOMENTUM)):
        frozen = run(work, f"frozen_{label}", optimizer, FROZEN_STRATEGY, EVERY)
        expect_equal(f"strategy frozen_resident against built-in ddp, {label}", reference(f"ddp_{label}"), frozen)
        assert frozen[4] < frozen[1], f"ABI {version} frozen_resident with {label}: no training happened ({frozen})"
    # AdamW's checkpoint holds parameters and both moments: each strategy resumes the other's,
    # and the steps after it equal a run that was never interrupted.
    later = {s: l for s, l in reference("ddp_adamw_straight").items() if s > SAVE_AT}
    for source, strategy in ((os.path.join(work, "frozen_adamw"), BUILTIN_STRATEGY),
                             (os.path.join(references, "ddp_adamw"), FROZEN_STRATEGY)):
        checkpoint = os.path.join(source, f"step-{SAVE_AT:08d}")
        resumed = run(work, f"resumed_from_{os.path.basename(source)}", ADAMW, strategy, resume=checkpoint)
        expect_equal(f"{os.path.basename(source)}'s step {SAVE_AT} checkpoint resumed with {strategy}", later, resumed)


def check_newer_minor_refused():
    p = subprocess.run([keel, "validate", config, "--set", PEAK, "--set", f"plugin_path=\"{newer_dir}\"", "--set",
                        "optimizer={\"plugin\": \"from_the_future\"}"], capture_output=True, text=True, timeout=120)
    print(p.stderr.strip()[-400:])
    assert p.returncode != 0 and re.search(r"built for Keel ABI \d+\.\d+, newer than this core's ABI", p.stderr), p.stderr


def check_pipeline_needs_0_7():
    """A strategy built before 0.7 knows nothing of chunks or of begin_microbatch before each
    backward: keel validate refuses it at pp 2 and names the plugin, its ABI and the one needed."""
    if minor >= 7:
        return
    p = subprocess.run([keel, "validate", config, "--ranks", "2", "--set", PEAK, "--set", f"plugin_path=\"{frozen_dir}\"",
                        "--set", "parallel.pp=2", "--set", f"parallel.strategy={FROZEN_STRATEGY}"],
                       capture_output=True, text=True, timeout=120)
    print(p.stderr.strip()[-400:])
    assert p.returncode != 0 and re.search(r"parallel\.strategy\.plugin 'frozen_resident' was built against ABI "
                                           r"0\.\d+, but parallel\.pp > 1 needs 0\.7", p.stderr), p.stderr


def check_packed_optimizer_refused(work):
    """An optimizer with packed state (0.12) and a strategy that cannot hand it its buffers: one
    built before 0.12 is refused at start-up naming both plugins and their ABIs; frozen_resident
    built against 0.12 (which ignores KEEL_OPTIMIZER_PACKED_STATE) is refused at its first step."""
    sets = SETS + [f"plugin_path=\"{frozen_dir}\"", f"parallel.strategy={FROZEN_STRATEGY}",
                   "optimizer={\"plugin\": \"adamw8bit\"}", f"train.metrics_path=\"{work}/packed.jsonl\"",
                   f"train.checkpoint.dir=\"{work}/packed\""]
    p = subprocess.run([keel, "run", config] + [a for s in sets for a in ("--set", s)], capture_output=True, text=True,
                       timeout=300)
    print(p.stderr.strip()[-400:])
    before = minor < 12
    expected = (r"optimizer\.plugin 'adamw8bit' keeps its state packed \(ABI 0\.12\), and parallel\.strategy\.plugin "
                r"'frozen_resident' was built against 0\.\d+" if before else
                r"keeps its state packed \(ABI 0\.12\), and the strategy passed no packed_state")
    assert p.returncode != 0 and re.search(expected, p.stderr), p.stderr


if mode == "references":
    make_references()
elif mode == "newer":
    check_newer_minor_refused()
elif mode == "old":
    with tempfile.TemporaryDirectory() as work:
        check_frozen_optimizer(work)
        check_frozen_strategy(work)
        check_packed_optimizer_refused(work)
    check_pipeline_needs_0_7()
else:
    sys.exit(f"compat_check.py: mode {mode!r}: expected references, newer or old")
print("PASS")
