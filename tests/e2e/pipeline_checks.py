#!/usr/bin/env python3
"""Pipeline parallelism end to end, real processes under mpirun --oversubscribe (stdlib only; the
run, loss and parameter helpers are parallel_checks.py's). The oracle is one rank at the same
global batch, seed and data:
- parity: pp 2 with each schedule (gpipe, 1f1b, interleaved with 2 chunks per rank, zero-bubble),
  pp 4 with an uneven explicit placement, pp 2 x dp 2 with ddp and ZeRO-1/2/3, pp 2 x tp 2, and
  pp 2 x dp 2 x tp 2 on 8 ranks: 20 steps, losses within 1e-5 relative, final parameters within 5e-5;
- resume: a pp 2 x dp 2 run stopped at step 4 and resumed gives steps 5-8 bit for bit;
- reshard: a (pp 2, dp 2, ZeRO-1) checkpoint resumes as one rank and as pp 4, and a (pp 2, tp 2)
  one as (pp 1, tp 4): steps 5-8 match the run that never stopped (1e-5 relative);
- end of run: evaluation, the final save and the sample finish on every stage, and the sample
  is the one-rank sample, token for token;
- failure: a rank that fails between steps ends every stage (those waiting on it mid-schedule
  included) with its message, and nothing hangs; a bad layout is refused by keel validate;
- broken_schedules: third-party schedules with one mistake each (tests/fixtures/plugins/
  broken_schedules.c: a receive without its send, LAST_FOR_CHUNK on the first backward, a backward
  before its forward) are refused by keel validate and by keel run at start-up, naming the plugin
  and the first bad action, where they used to hang every rank or train on wrong gradients.
Every check needs mpirun: without it the script exits 77 (skipped)."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import parallel_checks as pc  # noqa: E402

# Four blocks, so pp 4 and pp 2 with 2 chunks per rank have a block per chunk; four heads for tp.
pc.TINY = [s for s in pc.TINY if not s.startswith(("model.n_head", "model.n_layer"))] + \
    ["model.n_head=4", "model.n_layer=4"]


def run_pp(args, ranks, pp, strategy, work, tag, extra=(), tp=1, schedule="1f1b", v=1, microbatches=4, **kw):
    """Micro-batches per step are chosen (micro_batch = G / (dp * m)) so every schedule can run."""
    dp = ranks // (tp * pp)
    micro = pc.G // (dp * microbatches)
    assert micro * dp * microbatches == pc.G, (ranks, pp, tp, microbatches)
    sets = [f"parallel.pp={pp}", f"parallel.tp={tp}", f"parallel.schedule={{\"plugin\": \"{schedule}\"}}",
            f"parallel.virtual_stages={v}"] + list(extra) + [f"data.micro_batch={micro}"]
    return pc.run(args, ranks, strategy, work, tag, sets, **kw)


def check_parity(args, work):
    pc.run(args, 1, "ddp", work, "single")
    reference, ref_params = pc.losses(work, "single"), pc.final_params(f"{work}/single/step-00000020")
    # interleaved needs 2 or more chunks per rank (with one it is 1f1b)
    cases = [dict(ranks=2, pp=2, schedule=s, v=2 if s == "interleaved" else 1) for s in args.schedules]
    cases += [dict(ranks=4, pp=4, extra=["parallel.layers_per_stage=[1,2,0,1]"], expect_error=True)]
    cases += [dict(ranks=4, pp=4, extra=["parallel.layers_per_stage=[1,1,1,1]"])]
    cases += [dict(ranks=4, pp=2, strategy=s, microbatches=2) for s in args.strategies]
    cases += [dict(ranks=4, pp=2, tp=2), dict(ranks=8, pp=2, tp=2, strategy="zero1", microbatches=2)]
    compared = 0
    for case in cases:
        ranks, pp, tp, v = case["ranks"], case["pp"], case.get("tp", 1), case.get("v", 1)
        strategy, schedule = case.get("strategy", "ddp"), case.get("schedule", "1f1b")
        tag = f"pp{pp}-tp{tp}-dp{ranks // (pp * tp)}-{strategy}-{schedule}-v{v}-{len(case.get('extra', []))}"
        if case.get("expect_error"):
            p = run_pp(args, ranks, pp, strategy, work, tag, case["extra"], tp=tp, check=False)
            assert p.returncode != 0 and "layers_per_stage" in p.stderr and "0" in p.stderr, p.stderr[-1500:]
            line = next(l for l in p.stderr.splitlines() if "layers_per_stage" in l)
            print(f"{tag}: a chunk of 0 blocks refused: {line[:200]}")
            continue
        run_pp(args, ranks, pp, strategy, work, tag, case.get("extra", ()), tp=tp, schedule=schedule, v=v,
               microbatches=case.get("microbatches", 4))
        pc.compare_losses(reference, pc.losses(work, tag), tag, 1e-5)
        params = pc.final_params(f"{work}/{tag}/step-00000020")
        assert sorted(params) == sorted(ref_params), f"{tag}: parameter names differ: " \
                                                     f"{sorted(set(params) ^ set(ref_params))}"
        pc.compare_params(ref_params, params, tag, 5e-5)
        compared += 1
    assert compared == len(cases) - 1, f"only {compared} layouts were compared"


def check_resume(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    run_pp(args, 4, 2, "zero1", work, "straight", common, microbatches=2, steps=8)
    run_pp(args, 4, 2, "zero1", work, "stopped", common, microbatches=2, steps=4)
    run_pp(args, 4, 2, "zero1", work, "stopped", common, microbatches=2, steps=8, resume="latest")
    a, b = pc.losses(work, "straight"), pc.losses(work, "stopped")
    assert sorted(b) == list(range(1, 9)), sorted(b)
    differ = [s for s in range(5, 9) if a[s] != b[s]]
    assert not differ, f"resumed steps differ from the straight run: {[(s, a[s], b[s]) for s in differ]}"
    print("pp 2 x dp 2 resumed at step 4: steps 5-8 bit for bit")


def check_reshard(args, work):
    common = ["lr_schedule.decay_steps=8", "train.checkpoint.every=4"]
    pc.run(args, 1, "ddp", work, "never-stopped", common, steps=8)
    reference = pc.losses(work, "never-stopped")
    run_pp(args, 4, 2, "zero1", work, "saved-pp2", common, microbatches=2, steps=4)
    run_pp(args, 4, 2, "ddp", work, "saved-pp2-tp2", common, tp=2, steps=4)
    for source, ranks, pp, tp, strategy in (("saved-pp2", 1, 1, 1, "ddp"), ("saved-pp2", 4, 4, 1, "zero3"),
                                            ("saved-pp2-tp2", 4, 1, 4, "ddp")):
        tag = f"resumed-{source}-as-pp{pp}-tp{tp}-{strategy}"
        shutil.copytree(f"{work}/{source}", f"{work}/{tag}")
        run_pp(args, ranks, pp, strategy, work, tag, common, tp=tp, steps=8, resume="latest",
               microbatches=4 if ranks // (pp * tp) == 1 else 2)
        resumed = pc.losses(work, tag)
        assert sorted(resumed) == [5, 6, 7, 8], sorted(resumed)
        pc.compare_losses(reference, resumed, f"{source} -> (pp {pp}, tp {tp}, {strategy})", 1e-5)


def sample_of(stdout):
    match = re.search(r"--- sample \(24 tokens\) ---\n(.*?)\n---", stdout, re.S)
    assert match, f"no sample printed:\n{stdout[-1500:]}"
    return match.group(1)


def check_end_of_run(args, work):
    extra = ["train.sample_tokens=24", "train.eval_every=2", "train.checkpoint.every=2", "comm.timeout_s=30"]
    # Validation reads data.micro_batch sequences per batch: the one-rank run uses the pipelines' 3.
    one = pc.run(args, 1, "ddp", work, "end-one", extra + ["data.micro_batch=3"], steps=3)
    one_val = [r["val_loss"] for r in (json.loads(l) for l in open(f"{work}/end-one.jsonl") if l.strip())
               if "val_loss" in r]
    for ranks, pp, schedule, v in ((2, 2, "1f1b", 1), (4, 4, "gpipe", 1), (2, 2, "interleaved", 2)):
        tag = f"end-pp{pp}-{schedule}-v{v}"
        start = time.time()
        p = run_pp(args, ranks, pp, "ddp", work, tag, extra, schedule=schedule, v=v, steps=3)
        elapsed = time.time() - start
        assert p.stdout.count("--- sample (24 tokens) ---") == 1, f"{tag}: one sample expected"
        assert sample_of(p.stdout) == sample_of(one.stdout), f"{tag}: the sample differs from one rank's"
        assert os.path.isfile(f"{work}/{tag}/step-00000003/manifest.json"), f"{tag}: no final checkpoint"
        records = [json.loads(l) for l in open(f"{work}/{tag}.jsonl") if l.strip()]
        val = [r["val_loss"] for r in records if "val_loss" in r]
        assert len(val) == len(one_val) and all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(val, one_val)), \
            f"{tag}: validation losses {val} vs one rank's {one_val}"
        sent = [r.get("pp_comm_bytes_per_step", {}).get("send", 0) for r in records]
        assert all(s > 0 for s in sent), f"{tag}: no pipeline traffic recorded: {sent}"
        assert elapsed < 40, f"{tag}: took {elapsed:.0f}s: a rank waited for the others"
        print(f"{tag}: evaluation {val} (one rank {one_val}), save and the one-rank sample, {elapsed:.1f}s")


def check_failure(args, work):
    keel_validate = [args.keel, "validate", args.config]
    for sets, ranks, pattern in (
            (["parallel.pp=2", "parallel.tp=2"], 6, r"6 ranks do not divide into tp 2 × pp 2"),
            # 8 blocks, so the model takes its 8 chunks and the schedule is what refuses (validate asks the
            # model first, as a run creates it before the schedule runs).
            (["parallel.pp=4", "parallel.schedule={\"plugin\": \"interleaved\"}", "parallel.virtual_stages=2",
              "data.global_batch=12", "data.micro_batch=2", "model.n_layer=8"], 4,
             r"interleaved.*6|6.*interleaved|multiple"),
            (["parallel.pp=3"], 3, r"parallel\.pp|blocks|3")):
        cmd = keel_validate + [a for s in pc.TINY + ["data.micro_batch=3"] + sets for a in ("--set", s)] + \
            ["--ranks", str(ranks)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=pc.ENV, timeout=120)
        assert p.returncode != 0 and re.search(pattern, p.stderr), f"{sets}: {p.returncode}\n{p.stderr[-1500:]}"
        print(f"keel validate {' '.join(sets)} --ranks {ranks}: {p.stderr.strip()[:300]}")
    good = keel_validate + [a for s in pc.TINY + ["data.micro_batch=3", "parallel.pp=2"] for a in ("--set", s)] + \
        ["--ranks", "4"]
    p = subprocess.run(good, capture_output=True, text=True, env=pc.ENV, timeout=120)
    assert p.returncode == 0 and "4 ranks = tp 1 × dp 2 × pp 2" in p.stdout, p.stdout + p.stderr[-1500:]
    for mode, pattern in (("error", r"injected fault after step 2"), ("kill", r"rank 1|signal 9|killed")):
        start = time.time()
        p = run_pp(args, 2, 2, "ddp", work, f"fail-{mode}", ["comm.timeout_s=30"], steps=50, check=False,
                   env_extra={"KEEL_FAULT_INJECT": f"rank=1,step=2,mode={mode}"})
        elapsed = time.time() - start
        assert p.returncode != 0, "the job exited 0 although a stage failed"
        assert re.search(pattern, p.stderr + p.stdout), f"{mode}: no message naming the failure:\n{p.stderr[-2000:]}"
        assert elapsed < 90, f"{mode}: took {elapsed:.0f}s: the other stage hung"
        print(f"{mode} on stage 1 after step 2: exit {p.returncode} in {elapsed:.1f}s")


BROKEN_SCHEDULES = (
    ("unmatched-recv", r"deadlock: stage 0 waits at action \d+ RECV_GRAD\(mb 0, chunk 0, from 1\)"),
    ("early-last", r"stage 0, chunk 0: last_for_chunk is not on the last weight-gradient action"),
    ("backward-first", r"stage 1, action 1 B\(mb 0, chunk 1\): backward before the forward"))


def check_broken_schedules(args, work):
    plugin_path = f"plugin_path=\"{args.fixtures}/broken_schedules\""
    for name, problem in BROKEN_SCHEDULES:
        pattern = rf"parallel\.schedule\.plugin '{name}' built action lists that cannot run \(pp 2, 4 " \
                  rf"micro-batches per step, virtual_stages 1\): {problem}"
        sets = pc.TINY + [plugin_path, "parallel.pp=2", f"parallel.schedule={{\"plugin\": \"{name}\"}}",
                          f"data.micro_batch={pc.G // 4}"]
        cmd = [args.keel, "validate", args.config] + [a for s in sets for a in ("--set", s)] + ["--ranks", "2"]
        p = subprocess.run(cmd, capture_output=True, text=True, env=pc.ENV, timeout=120)
        assert p.returncode == 1 and re.search(pattern, p.stderr), \
            f"keel validate with schedule {name}: exit {p.returncode}\n{p.stdout}{p.stderr[-1500:]}"
        print(f"keel validate, schedule {name}: {p.stderr.strip()[:400]}")
        start = time.time()
        p = run_pp(args, 2, 2, "ddp", work, f"broken-{name}", [plugin_path, "comm.timeout_s=60"], schedule=name,
                   steps=3, check=False)
        elapsed = time.time() - start
        assert p.returncode != 0, f"keel run with schedule {name} exited 0:\n{p.stdout[-1500:]}"
        assert re.search(pattern, p.stderr), f"keel run with schedule {name}: no message naming it:\n{p.stderr[-2000:]}"
        assert "step 1 " not in p.stdout and "step     1" not in p.stdout, f"{name}: trained a step:\n{p.stdout}"
        assert elapsed < 60, f"keel run with schedule {name}: took {elapsed:.0f}s"
        print(f"keel run, schedule {name}: exit {p.returncode} in {elapsed:.1f}s")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["parity", "resume", "reshard", "end_of_run", "failure",
                                            "broken_schedules"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--strategies", default="ddp,zero1,zero2,zero3")
    parser.add_argument("--schedules", default="gpipe,1f1b,interleaved,zero-bubble")
    parser.add_argument("--fixtures", help="the build's fixtures folder (broken_schedules)")
    args = parser.parse_args()
    args.strategies = args.strategies.split(",")
    args.schedules = args.schedules.split(",")
    args.mpirun = shutil.which("mpirun")
    if not args.mpirun:
        print("mpirun not found: skipped")
        return 77
    with tempfile.TemporaryDirectory() as work:
        {"parity": check_parity, "resume": check_resume, "reshard": check_reshard,
         "end_of_run": check_end_of_run, "failure": check_failure,
         "broken_schedules": check_broken_schedules}[args.check](args, work)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
