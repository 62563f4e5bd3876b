#!/usr/bin/env python3
"""The communication-efficient strategies end to end, 4 (or 2) real ranks under mpirun, each
against its base on the same seed and data (stdlib only):
- limits: topk at ratio 1.0 is ddp bit for bit; powersgd at full rank (rank ≥ every matrix's
  smaller side) is ddp within 1e-5 relative on every loss; diloco syncing every step with inner
  sgd and outer sgd (lr 1, no momentum) is ddp with sgd within 1e-5, and so is edit with its
  penalty off;
- savings: topk 0.1 and powersgd rank 2 move fewer bytes a step than ddp (the metrics'
  comm_bytes_per_step) and still learn; diloco and edit communicate only on sync steps;
- resume: a run stopped mid-way (mid-interval for diloco) and resumed is bit for bit the one that
  never stopped, error-feedback residuals and outer state included;
- noise_scale: the gradient noise scale logged every step at dp 2, the same from ddp's bucket-by-
  bucket local norms as from ZeRO-1's (two code paths), continued bit for bit by a resume, and
  absent with the reason where the strategy cannot report a local norm (ZeRO-2);
- batch_schedule: the global batch doubles exactly when the rule says, recomputed here from the
  logged noise scale; the learning rate is the plain run's × sqrt(B/B0); a resume after the batch
  grew continues bit for bit; one rank and ZeRO-2 are refused with the reason;
- optimizers: adamw8bit and adafactor (packed state, ABI 0.12): optimizer-state bytes against
  their formulas from the checkpoint's shapes and at most 0.3x / 0.1x adamw's; a resume bit for
  bit (adamw8bit on ZeRO-1 and under diloco, adafactor with beta1 on ddp); a ZeRO-1 x2
  checkpoint resumed at one rank; adafactor refused where tensors are split, adamw8bit with
  offload. (Their updates against PyTorch: tests/python/compact_optimizers_vs_torch.py.)"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

import json  # noqa: E402

SGD = ["optimizer={\"plugin\": \"sgd\", \"lr\": 0.05, \"momentum\": 0.0, \"weight_decay\": 0.0}",
       "train.grad_clip=0"]


def strategy(spec):
    return [f"parallel.strategy={json.dumps(spec)}"]


def records(work, tag):
    return [json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip()]


def comm_bytes(work, tag):
    """Bytes per step summed over the collectives, averaged over the run's steps."""
    rows = records(work, tag)
    return sum(sum(r.get("comm_bytes_per_step", {}).values()) for r in rows) / len(rows)


def params_differ(a, b):
    return max(abs(x - y) for name in a for x, y in zip(a[name], b[name]))


def check_limits(args, work):
    pc.run(args, 4, "ddp", work, "ddp")
    ref, ref_params = pc.losses(work, "ddp"), pc.final_params(f"{work}/ddp/step-00000020")
    pc.run(args, 4, "ddp", work, "topk1", strategy({"plugin": "topk", "ratio": 1.0}))
    same = pc.losses(work, "topk1")
    assert same == ref, f"topk ratio 1.0 is not ddp bit for bit: {same} vs {ref}"
    assert pc.final_params(f"{work}/topk1/step-00000020") == ref_params, "topk ratio 1.0: parameters differ from ddp"
    print("topk ratio 1.0 x4: 20 losses and every parameter equal to ddp's, bit for bit")
    pc.run(args, 4, "ddp", work, "powersgd-full", strategy({"plugin": "powersgd", "rank": 1024}))
    pc.compare_losses(ref, pc.losses(work, "powersgd-full"), "powersgd at full rank x4 vs ddp", 1e-5)
    # 20 AdamW steps from rounding-level differences in the mean: the weights agree to ~1e-5.
    pc.compare_params(ref_params, pc.final_params(f"{work}/powersgd-full/step-00000020"), "powersgd full rank", 5e-5)
    pc.run(args, 4, "ddp", work, "ddp-sgd", SGD)
    diloco = {"plugin": "diloco", "sync_every": 1, "outer_optimizer": "sgd", "outer_lr": 1.0, "outer_momentum": 0.0}
    pc.run(args, 4, "ddp", work, "diloco-1", SGD + strategy(diloco))
    pc.compare_losses(pc.losses(work, "ddp-sgd"), pc.losses(work, "diloco-1"), "diloco every step, sgd/sgd x4 vs ddp sgd",
                      1e-5)
    pc.compare_params(pc.final_params(f"{work}/ddp-sgd/step-00000020"), pc.final_params(f"{work}/diloco-1/step-00000020"),
                      "diloco every step", 1e-5)
    # EDiT with its penalty off is DiLoCo synced layer by layer in the next forward.
    edit = dict(diloco, plugin="edit", anomaly_z=0, weighted_average=False)
    pc.run(args, 4, "ddp", work, "edit-1", SGD + strategy(edit))
    pc.compare_losses(pc.losses(work, "ddp-sgd"), pc.losses(work, "edit-1"),
                      "edit every step, penalty off, sgd/sgd x4 vs ddp sgd", 1e-5)
    pc.compare_params(pc.final_params(f"{work}/ddp-sgd/step-00000020"), pc.final_params(f"{work}/edit-1/step-00000020"),
                      "edit every step", 1e-5)


def check_savings(args, work):
    pc.run(args, 4, "ddp", work, "ddp")
    base = comm_bytes(work, "ddp")
    first = records(work, "ddp")[0]["loss"]
    for tag, spec, most in (("topk", {"plugin": "topk", "ratio": 0.1}, 0.5),
                            ("powersgd", {"plugin": "powersgd", "rank": 2}, 0.5),
                            ("diloco", {"plugin": "diloco", "sync_every": 5}, 0.3),
                            ("edit", {"plugin": "edit", "sync_every": 5, "clip_norm": 1.0}, 0.3)):
        pc.run(args, 4, "ddp", work, tag, strategy(spec))
        sent, rows = comm_bytes(work, tag), records(work, tag)
        print(f"{tag}: {sent:.0f} bytes a step against ddp's {base:.0f} ({sent / base:.3f}x); loss {rows[0]['loss']:.3f} "
              f"-> {rows[-1]['loss']:.3f}")
        assert 0 < sent <= most * base, f"{tag}: {sent:.0f} bytes a step is not at most {most} x ddp's {base:.0f}"
        assert rows[-1]["loss"] < first - 0.3, f"{tag}: the loss did not fall ({rows[0]['loss']} -> {rows[-1]['loss']})"


def assert_resume_exact(args, work, tag, ranks, sets):
    """10 steps straight against 6, a resume from the step-6 checkpoint, and 4 more: the same
    losses and final parameters, bit for bit."""
    pc.run(args, ranks, "ddp", work, f"{tag}-straight", sets, steps=10)
    pc.run(args, ranks, "ddp", work, f"{tag}-split", sets, steps=6)
    pc.run(args, ranks, "ddp", work, f"{tag}-split", sets, steps=10, resume="latest")
    a, b = pc.losses(work, f"{tag}-straight"), pc.losses(work, f"{tag}-split")
    assert sorted(b) == list(range(1, 11)) and all(a[s] == b[s] for s in range(1, 11)), \
        f"{tag}: resumed losses differ: {a} vs {b}"
    pa = pc.final_params(f"{work}/{tag}-straight/step-00000010")
    pb = pc.final_params(f"{work}/{tag}-split/step-00000010")
    assert pa == pb, f"{tag}: resumed parameters differ by {params_differ(pa, pb):.2e}"
    print(f"{tag} x{ranks}: 10 steps straight == 6 + resume + 4, bit for bit")


def check_resume(args, work):
    common = ["lr_schedule.decay_steps=10", "train.checkpoint.every=3"]
    for tag, spec in (("topk", {"plugin": "topk", "ratio": 0.1}), ("powersgd", {"plugin": "powersgd", "rank": 2}),
                      ("diloco", {"plugin": "diloco", "sync_every": 4, "outer_optimizer": "nesterov"}),
                      # saved at step 6, a sync step (its layers wait for the next forward); elimination from the 4th sync
                      ("edit", {"plugin": "edit", "sync_every": 2, "anomaly_z": 1.0, "clip_norm": 0.5})):
        assert_resume_exact(args, work, tag, 2, common + strategy(spec))  # diloco: saved at step 6, mid-interval


def check_noise_scale(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    scales = {}
    for tag, spec in (("ddp", {"plugin": "ddp"}), ("zero1", {"plugin": "zero", "stage": 1})):
        pc.run(args, 2, "ddp", work, tag, common + strategy(spec), steps=8)
        scales[tag] = [r.get("noise_scale") for r in records(work, tag)]
        assert len(scales[tag]) == 8 and all(isinstance(x, float) and x == x for x in scales[tag]), \
            f"{tag}: noise_scale missing from some steps: {scales[tag]}"
    worst = max(abs(a - b) / abs(a) for a, b in zip(scales["ddp"], scales["zero1"]))
    print(f"noise_scale over 8 steps, ddp vs zero-1: {[round(x, 2) for x in scales['ddp']]}; worst relative "
          f"difference {worst:.1e}")
    assert worst <= 1e-5, f"ddp and zero-1 disagree on the noise scale by {worst:.1e}"
    pc.run(args, 2, "ddp", work, "split", common, steps=4)
    pc.run(args, 2, "ddp", work, "split", common, steps=8, resume="latest")
    resumed = {r["step"]: r["noise_scale"] for r in records(work, "split")}
    assert [resumed[s] for s in range(1, 9)] == scales["ddp"], f"the resumed noise scale differs: {resumed}"
    print("noise_scale: 4 + resume + 4 equals 8 straight, bit for bit")
    p = pc.run(args, 2, "ddp", work, "zero2", strategy({"plugin": "zero", "stage": 2}), steps=3)
    assert all("noise_scale" not in r for r in records(work, "zero2")), "zero-2 logged a noise scale"
    assert "no gradient noise scale: strategy zero: local_grad_sq_norm: ZeRO stage 2" in p.stderr + p.stdout, \
        (p.stderr + p.stdout)[-2000:]
    print("zero-2: no noise_scale, and the log says why")


def check_batch_schedule(args, work):
    base, largest, every, steps = 2, 16, 5, 60
    sets = ["data.global_batch=2", "data.micro_batch=1", "lr_schedule.decay_steps=60", "train.checkpoint.every=45"]
    schedule = [f'data.batch_schedule={{"max_global_batch": {largest}, "check_every": {every}}}']
    pc.run(args, 2, "ddp", work, "plain", sets, steps=steps)
    pc.run(args, 2, "ddp", work, "grown", sets + schedule, steps=steps)
    plain, grown = records(work, "plain"), records(work, "grown")
    # The rule, from the logged noise scale: after a check step, double while 2B <= max and B_simple >= 2B.
    batch, expected = base, []
    for r in grown:
        expected.append(batch)
        if r["step"] % every == 0:
            while 2 * batch <= largest and r["noise_scale"] >= 2 * batch:
                batch *= 2
    logged = [r["global_batch"] for r in grown]
    assert logged == expected, f"global_batch {logged} is not the rule's {expected}"
    assert len(set(logged)) >= 3, f"the batch grew fewer than twice: {logged}"
    for p, g in zip(plain, grown):
        factor = (g["global_batch"] / base) ** 0.5
        assert abs(g["lr"] - p["lr"] * factor) <= 1e-6 * p["lr"] * factor, f"step {g['step']}: lr {g['lr']} is not " \
            f"{p['lr']} x sqrt({g['global_batch']}/{base})"
    print(f"batch_schedule: global batch {sorted(set(logged))} at steps "
          f"{[r['step'] for a, r in zip([None] + grown, grown) if a and a['global_batch'] != r['global_batch']]}, "
          f"the rule's and lr x sqrt(B/B0) on every step")
    pc.run(args, 2, "ddp", work, "split", sets + schedule, steps=45)
    pc.run(args, 2, "ddp", work, "split", sets + schedule, steps=steps, resume="latest")
    split = {r["step"]: (r["loss"], r["global_batch"]) for r in records(work, "split")}
    assert [split[r["step"]] for r in grown] == [(r["loss"], r["global_batch"]) for r in grown], \
        "a resume after the batch grew differs from the run that never stopped"
    print("batch_schedule: 45 + resume + 15 equals 60 straight, bit for bit")
    p = pc.run(args, 1, "ddp", work, "one", ["data.global_batch=2", "data.micro_batch=1"] + schedule, steps=2, check=False)
    assert p.returncode != 0 and "data.batch_schedule: follows the gradient noise scale" in p.stderr and \
        "at least 2 data-parallel ranks" in p.stderr, p.stderr[-1500:]
    p = pc.run(args, 2, "ddp", work, "z2", sets + schedule + strategy({"plugin": "zero", "stage": 2}), steps=2, check=False)
    assert p.returncode != 0 and "strategy zero cannot give" in p.stderr, p.stderr[-1500:]
    print("batch_schedule: one rank and ZeRO-2 refused, saying why")


ADAMW8BIT = {"plugin": "adamw8bit", "lr": 3e-3}
ADAFACTOR = {"plugin": "adafactor", "lr": 3e-2, "beta1": 0.9, "weight_decay": 0.01}


def optimizer(spec):
    return [f"optimizer={json.dumps(spec)}"]


def state_bytes(work, tag):
    return records(work, tag)[-1]["strategy_bytes"]["optimizer_state"]


def packed_formulas(checkpoint):
    """adamw8bit's and adafactor's (no beta1) state bytes from the checkpoint's tensor shapes."""
    shapes = [p["shape"] for p in json.load(open(f"{checkpoint}/manifest.json"))["params"]]
    eight_bit = factored = elements = 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        elements += n
        eight_bit += 2 * n + 8 * ((n + 2047) // 2048)  # two codes per element, two absmax per block
        if len(shape) >= 2:
            lead = n // (shape[-2] * shape[-1])
            factored += 4 * lead * (shape[-2] + shape[-1])  # row and column statistics
        else:
            factored += 4 * n  # a vector keeps v whole
    return elements, eight_bit, factored


def check_optimizers(args, work):
    common = ["lr_schedule.decay_steps=10", "train.checkpoint.every=3"]
    # State bytes, one rank: what the metrics report is the formula, and far below adamw's.
    for tag, spec in (("adamw", {"plugin": "adamw"}), ("adamw8bit", ADAMW8BIT),
                      ("adafactor", dict(ADAFACTOR, beta1=None))):
        pc.run(args, 1, "ddp", work, f"bytes-{tag}", common + optimizer(spec), steps=3)
    elements, eight_bit, factored = packed_formulas(f"{work}/bytes-adamw/step-00000003")
    adamw = state_bytes(work, "bytes-adamw")
    assert adamw == 8 * elements, f"adamw's state is {adamw} bytes, not 8 x {elements}"
    got8, got_af = state_bytes(work, "bytes-adamw8bit"), state_bytes(work, "bytes-adafactor")
    print(f"optimizer state, {elements} parameters: adamw {adamw} B, adamw8bit {got8} B ({got8 / adamw:.3f}x), "
          f"adafactor {got_af} B ({got_af / adamw:.4f}x)")
    assert got8 == eight_bit, f"adamw8bit holds {got8} bytes; the formula says {eight_bit}"
    assert got_af == factored, f"adafactor holds {got_af} bytes; the formula says {factored}"
    assert got8 <= 0.3 * adamw and got_af <= 0.1 * adamw, "packed state not below 0.3x / 0.1x of adamw's"
    for tag in ("bytes-adamw8bit", "bytes-adafactor"):
        steps = pc.losses(work, tag)
        assert steps[3] < steps[1], f"{tag} does not learn: {steps}"
    # Resume bit for bit: packed state through the checkpoint's exchange form and back.
    for tag, ranks, sets in (("8bit-zero1", 2, optimizer(ADAMW8BIT) + strategy({"plugin": "zero", "stage": 1})),
                             ("8bit-diloco", 2, optimizer(ADAMW8BIT) + strategy({"plugin": "diloco", "sync_every": 4})),
                             ("adafactor-ddp", 2, optimizer(ADAFACTOR))):
        assert_resume_exact(args, work, tag, ranks, common + sets)
    # Another layout: ZeRO-1 x2's blocks are each rank's part; one rank re-quantises them whole.
    sets = common + optimizer(ADAMW8BIT)
    shutil.copytree(f"{work}/8bit-zero1-split/step-00000006", f"{work}/reshard/step-00000006")
    pc.run(args, 1, "ddp", work, "reshard", sets, steps=10, resume=f"{work}/reshard/step-00000006")
    straight, resharded = pc.losses(work, "8bit-zero1-straight"), pc.losses(work, "reshard")
    pc.compare_losses({s: straight[s] for s in range(7, 11)}, {s: resharded[s] for s in range(7, 11)},
                      "adamw8bit ZeRO-1 x2 resumed at 1 rank", 1e-3)
    # Refusals, with the reason.
    for tag, ranks, sets, expected, resume in (
            ("af-zero1", 2, optimizer(ADAFACTOR) + strategy({"plugin": "zero", "stage": 1}),
             "is sharded across data-parallel ranks (expected parallel.strategy ddp, diloco or edit at parallel.tp 1)",
             None),
            ("af-tp2", 2, optimizer(ADAFACTOR) + ["parallel.tp=2"], "is split across tensor-parallel ranks", None),
            ("8bit-offload", 1, optimizer(ADAMW8BIT) + strategy({"plugin": "zero", "stage": 1}) +
             ["offload={\"plugin\": \"cpu\", \"optimizer_state\": true}"], "it cannot be offloaded", None),
            # adamw's m and v read as adafactor's row and column statistics would be nonsense
            ("af-from-adamw", 1, common + optimizer(dict(ADAFACTOR, beta1=None)),
             "its optimizer state was kept by 'adamw', and this run's optimizer.plugin is 'adafactor'",
             f"{work}/bytes-adamw/step-00000003")):
        p = pc.run(args, ranks, "ddp", work, tag, sets, steps=2, check=False, resume=resume)
        assert p.returncode != 0 and expected in p.stdout + p.stderr, \
            f"{tag}: expected a refusal naming '{expected}', got exit {p.returncode}: {(p.stdout + p.stderr)[-1500:]}"
        print(f"{tag}: refused ({expected})")


def interval_rows(work, tag):
    return {r["step"]: r for r in records(work, tag)}


def check_async(args, work):
    """A-EDiT: edit with sync_seconds, replicas stepping on their own between syncs (ABI 0.14)."""
    tokens_per_step = 6 * 32  # data.micro_batch 6 at 2 ranks, T 32: one replica step
    log = ["train.log_every=1", "train.grad_clip=0"]  # clipping by the replica's own norm differs from edit's dp mean
    # 1. Every replica equally fast (simulated 1 s a step, 4 s intervals) is edit with sync_every 4:
    #    each interval's loss is the mean of edit's 4 step losses, and the parameters are equal.
    edit = {"plugin": "edit", "sync_every": 4, "anomaly_z": 1.0}
    pc.run(args, 2, "ddp", work, "edit-4", log + strategy(edit))
    same = dict(edit, sync_seconds=4, simulated_step_seconds=[1])
    del same["sync_every"]
    pc.run(args, 2, "ddp", work, "async-equal", log + strategy(same))
    lockstep, intervals = pc.losses(work, "edit-4"), interval_rows(work, "async-equal")
    assert sorted(intervals) == [4, 8, 12, 16, 20], f"equal speeds: intervals end at steps {sorted(intervals)}"
    for step, row in intervals.items():
        mean = sum(lockstep[s] for s in range(step - 3, step + 1)) / 4
        assert abs(row["loss"] - mean) <= 1e-12 * abs(mean), f"step {step}: interval loss {row['loss']} vs edit's {mean}"
        assert row["replica_steps"] == [4, 4] and row["tokens"] == step * 2 * tokens_per_step, row
    final = records(work, "edit-4")[-1]
    assert intervals[20]["val_loss"] == final["val_loss"], f"val_loss {intervals[20]['val_loss']} vs {final['val_loss']}"
    assert pc.final_params(f"{work}/async-equal/step-00000020") == pc.final_params(f"{work}/edit-4/step-00000020"), \
        "equal speeds: parameters differ from edit sync_every 4"
    print("a-edit at equal speeds x2: 5 interval losses = edit sync_every 4's means, val_loss and parameters equal")

    # 2. Rank 1 half as fast: 4 and 2 steps an interval, the run's step 3 further each time; a run
    #    saved at step 12 (a sync, every layer's sync pending) and resumed is the straight one.
    slow = {"plugin": "edit", "sync_seconds": 4, "simulated_step_seconds": [1, 2], "anomaly_z": 1.0, "clip_norm": 0.5}
    sets = log + strategy(slow) + ["lr_schedule.decay_steps=21", "train.checkpoint.every=6"]
    pc.run(args, 2, "ddp", work, "async-straight", sets, steps=21)
    pc.run(args, 2, "ddp", work, "async-split", sets, steps=12)
    manifest = json.load(open(f"{work}/async-split/step-00000012/manifest.json"))
    assert manifest["replica_positions"] == [{"dp_rank": 0, "replica_step": 16, "samples_taken": 96},
                                             {"dp_rank": 1, "replica_step": 8, "samples_taken": 48}], \
        f"replica positions: {manifest['replica_positions']}"
    pc.run(args, 2, "ddp", work, "async-split", sets, steps=21, resume="latest")
    straight, split = interval_rows(work, "async-straight"), interval_rows(work, "async-split")
    assert sorted(straight) == list(range(3, 22, 3)) == sorted(split), f"steps {sorted(straight)} / {sorted(split)}"
    for step, row in straight.items():
        assert row["replica_steps"] == [4, 2], f"step {step}: replica steps {row['replica_steps']}, expected [4, 2]"
        assert row["tokens"] == step // 3 * 6 * tokens_per_step, f"step {step}: tokens {row['tokens']}"
        assert split[step]["loss"] == row["loss"], f"step {step}: resumed loss {split[step]['loss']} vs {row['loss']}"
    pa, pb = pc.final_params(f"{work}/async-straight/step-00000021"), pc.final_params(f"{work}/async-split/step-00000021")
    assert pa == pb, f"resumed a-edit parameters differ by {params_differ(pa, pb):.2e}"
    assert params_differ(pa, pc.final_params(f"{work}/edit-4/step-00000020")) > 1e-3, "unequal speeds changed nothing"
    print("a-edit with rank 1 at half speed x2: [4, 2] steps an interval; 21 steps straight == 12 + resume + 9, "
          "bit for bit")

    # 3. The clock's own time at 3 ranks: the replicas' counts add up, the run ends at the first sync
    #    past train.steps, it learns, and a resume at 2 ranks continues from the run's position.
    clock = log + strategy({"plugin": "edit", "sync_seconds": 0.03}) + ["data.micro_batch=4"]
    pc.run(args, 3, "ddp", work, "async-clock", clock, steps=30)
    rows, done, previous = records(work, "async-clock"), 0, 0
    for row in rows:  # the run's step: the replicas' steps over 3, at least one further each sync
        done += sum(row["replica_steps"])
        assert row["step"] == max(previous + 1, done // 3), f"step {row['step']} after {done} replica steps"
        previous = row["step"]
        assert row["tokens"] == done * 4 * 32, f"tokens {row['tokens']} after {done} replica steps"
    assert rows[-1]["step"] >= 30 and rows[-2]["step"] < 30, f"ended at {rows[-1]['step']} (previous {rows[-2]['step']})"
    assert rows[-1]["loss"] < rows[0]["loss"] - 0.3, f"the loss did not fall: {rows[0]['loss']} -> {rows[-1]['loss']}"
    last = rows[-1]["step"]
    p = pc.run(args, 2, "ddp", work, "async-clock", clock[:-1] + ["data.micro_batch=6"], steps=last + 10,
               resume="latest")
    assert "saved by another strategy or layout: every replica of this run continues from the run's step" in p.stderr, \
        p.stderr[-1500:]
    assert records(work, "async-clock")[-1]["step"] >= last + 10
    print(f"a-edit on the clock x3: intervals of {[r['replica_steps'] for r in rows]} steps, ended at step {last}; "
          "resumed at 2 ranks")

    # 4. Non-finite steps: "stop" on one replica ends every rank with that replica's reason at the
    #    next sync; "skip" goes on, each interval's loss over the steps whose update ran.
    boom = log + strategy(slow) + ['optimizer={"plugin": "sgd", "lr": 1e6}']
    p = pc.run(args, 2, "ddp", work, "async-stop", boom, steps=21, check=False)
    # Every rank stops with the same reason, agreed at the sync: rank 0 says it once for both.
    reason = re.findall(r"keel: (every rank of 2|rank \d of 2): replica \d: step \d+: the (?:loss|gradient norm) is not "
                        r"finite", p.stderr)
    assert p.returncode != 0 and reason == ["every rank of 2"], f"exit {p.returncode}: {p.stderr[-1500:]}"
    pc.run(args, 2, "ddp", work, "async-skip", boom + ["train.on_nonfinite=\"skip\""], steps=9)
    rows = records(work, "async-skip")
    assert [r["step"] for r in rows] == [3, 6, 9] and all(r.get("skipped") for r in rows), rows
    print("a-edit non-finite: 'stop' ends both ranks with one replica's reason, 'skip' trains on to step 9")

    # 5. Refusals, with the reason.
    for tag, ranks, sets, expected in (
            ("both", 2, strategy({"plugin": "edit", "sync_every": 4, "sync_seconds": 1}), "not both"),
            ("sim-only", 2, strategy({"plugin": "edit", "simulated_step_seconds": [1]}), "only with sync_seconds"),
            ("sim-bad", 2, strategy({"plugin": "edit", "sync_seconds": 1, "simulated_step_seconds": [0]}),
             "simulated_step_seconds[0]: expected seconds in (0, 86400]"),
            ("schedule", 2, strategy({"plugin": "edit", "sync_seconds": 1}) +
             ["data.batch_schedule={\"max_global_batch\": 48}"], "remove data.batch_schedule"),
            ("tp-clock", 2, strategy({"plugin": "edit", "sync_seconds": 1}) + ["parallel.tp=2"],
             "sync_seconds on the clock needs parallel.tp 1")):
        p = pc.run(args, ranks, "ddp", work, f"refused-{tag}", sets, steps=2, check=False)
        assert p.returncode != 0 and expected in p.stdout + p.stderr, \
            f"{tag}: expected a refusal naming '{expected}', got exit {p.returncode}: {(p.stdout + p.stderr)[-1500:]}"
        print(f"{tag}: refused ({expected})")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["limits", "savings", "resume", "noise_scale", "batch_schedule", "optimizers",
                                          "async"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    args.mpirun = shutil.which("mpirun")
    if not args.mpirun:
        print("mpirun not found: skipped")
        sys.exit(77)
    work = tempfile.mkdtemp(prefix="keel-comm-efficient-")
    try:
        {"limits": check_limits, "savings": check_savings, "resume": check_resume,
         "noise_scale": check_noise_scale, "batch_schedule": check_batch_schedule,
         "optimizers": check_optimizers, "async": check_async}[args.check](args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    main()
