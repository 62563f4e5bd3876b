#!/usr/bin/env python3
"""Keel under a real Slurm (Debian's slurmctld, slurmd and munged, started on this machine as a
one-node cluster by slurm_cluster.py), checked against one rank started without any launcher:
- srun_parity: `srun --mpi=pmix -n 2 keel run` with ddp and with ZeRO-3 matches one rank within
  parallel_checks' tolerances (1e-5 relative per-step loss over 20 steps, 5e-5 on the final
  weights); the start-up output shows a world of 2 launched by srun; and `srun -l keel validate`
  shows each task the rank and local rank srun numbered it by (its -l label).
- sbatch_example: examples/slurm/train.sbatch, steered by the environment variables it honours,
  runs 10 steps on 2 tasks to completion: its losses fall and match the one-rank run, its
  checkpoint passes `keel inspect` and holds the one-rank weights; resubmitted with 20 steps, it
  resumes from step 10 and steps 11-20 match too.
- srun_without_mpi_refused: `srun -n 2 keel run` without --mpi=pmix (each task a world of one)
  fails at start-up on every task with the message saying to use --mpi=pmix, before any step or
  checkpoint; `srun -n 1` without it trains, and a batch script running keel directly in a job of
  2 tasks trains as one process and warns so.
Skips (exit 77) with the reason where the daemons are not installed or cannot start (not root),
or this Slurm offers no pmix."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
# An outer launcher's or job's variables must not leak into the runs (ctest may itself run in a job).
for name in list(os.environ):
    if name.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "PMIX_", "PMI_", "OMPI_COMM_WORLD")):
        del os.environ[name]
import parallel_checks as pc  # noqa: E402
import slurm_cluster  # noqa: E402

WORLD_OF_2 = re.compile(r"joined a world of 2 ranks")
REFUSAL = ("srun started 2 tasks (SLURM_NTASKS=2) but comm 'mpi' joined a world of 1: each task would train alone "
           "and overwrite the others' checkpoints; run srun with --mpi=pmix (srun --mpi=list shows what this Slurm "
           "offers)")


def srun_launcher(cluster, work):
    """An mpirun for parallel_checks.run (LAUNCHER --oversubscribe -np N cmd...) that is srun."""
    path = os.path.join(work, "srun-pmix")
    with open(path, "w") as f:
        f.write(f"#!/bin/sh\nexport SLURM_CONF={cluster.env['SLURM_CONF']}\n"
                "[ \"$1\" = --oversubscribe ] && shift\n"
                "[ \"$1\" = -np ] || { echo \"$0: expected -np N, got $1\" >&2; exit 2; }\n"
                "n=$2; shift 2\n"
                "exec srun --mpi=pmix -n \"$n\" --kill-on-bad-exit=1 \"$@\"\n")
    os.chmod(path, 0o755)
    return path


def sets(values):
    return [a for s in values for a in ("--set", s)]


def check_srun_parity(args, cluster, work):
    pc.run(args, 1, "ddp", work, "single")  # no launcher: the oracle
    reference, ref_params = pc.losses(work, "single"), pc.final_params(f"{work}/single/step-00000020")
    assert len(reference) == 20, f"the one-rank run logged {len(reference)} steps"
    args.mpirun = srun_launcher(cluster, work)
    for strategy in ("ddp", "zero3"):
        tag = f"srun-{strategy}"
        p = pc.run(args, 2, strategy, work, tag)
        out = p.stdout + p.stderr
        assert WORLD_OF_2.search(out), f"{tag}: no start-up line showing a world of 2:\n{out[-2000:]}"
        launched = re.search(r"launched by srun: rank 0 of 2 \(SLURM_PROCID=0, SLURM_NTASKS=2\), local rank 0 of 2", out)
        assert launched, f"{tag}: no start-up line naming srun as the launcher:\n{out[-2000:]}"
        print(f"{tag}: {WORLD_OF_2.search(out).group(0)}; {launched.group(0)}")
        pc.compare_losses(reference, pc.losses(work, tag), f"{tag} under srun", 1e-5)
        pc.compare_params(ref_params, pc.final_params(f"{work}/{tag}/step-00000020"), f"{tag} under srun", 5e-5)
    # What each task took from Slurm, against srun's own numbering of its tasks (-l labels lines).
    p = cluster.run(["srun", "--mpi=pmix", "-n", "2", "-l", args.keel, "validate", args.config] +
                    sets(pc.TINY + ["data.micro_batch=6"]), env_extra=pc.ENV)
    for task in (0, 1):
        line = (f"{task}: launched by srun: rank {task} of 2 (SLURM_PROCID={task}, SLURM_NTASKS=2), "
                f"local rank {task} of 2")
        assert line in p.stdout.splitlines(), f"task {task}: expected '{line}' in:\n{p.stdout}"
        assert f"{task}: {args.config}: valid (" in p.stdout and "2 ranks = tp 1 × dp 2 × pp 1" in p.stdout, p.stdout
        print(line)


def job_state(cluster, job_id):
    shown = cluster.run(["scontrol", "-o", "show", "job", str(job_id)]).stdout
    return re.search(r"JobState=(\S+)", shown).group(1), re.search(r"ExitCode=(\S+)", shown).group(1)


def submit(args, cluster, work, run_dir, steps):
    """train.sbatch on 1 node × 2 tasks with a tiny model for `steps` steps; returns its output."""
    keel_set = [s for s in pc.TINY if not s.startswith("data.global_batch=")]  # the script derives it
    keel_set += [f"train.steps={steps}", "lr_schedule.decay_steps=20", "train.checkpoint.every=5"]
    env = {"KEEL": args.keel, "KEEL_CONFIG": args.config, "KEEL_RUN_DIR": run_dir, "KEEL_MICRO_BATCH": "6",
           "KEEL_SET": "\n".join(keel_set), "OMP_NUM_THREADS": "1"}
    submitted = cluster.run(["sbatch", "--parsable", "--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1",
                             "--time=5", f"--output={work}/job-%j.out", args.script], env_extra=env)
    job_id = int(submitted.stdout.strip().split(";")[0])
    took = cluster.wait_job(job_id, timeout=240)
    with open(f"{work}/job-{job_id}.out", errors="replace") as f:
        out = f.read()
    state, code = job_state(cluster, job_id)
    assert (state, code) == ("COMPLETED", "0:0"), f"job {job_id}: {state}, exit {code}:\n{out[-3000:]}"
    print(f"job {job_id} ({steps} steps): {state} after {took:.1f}s")
    return out


def inspect_step(args, folder):
    p = subprocess.run([args.keel, "inspect", folder], capture_output=True, text=True)
    assert p.returncode == 0, f"keel inspect {folder}: {p.stderr}"
    return int(re.search(r"step (\d+),", p.stdout).group(1))


def check_sbatch_example(args, cluster, work):
    pc.run(args, 1, "ddp", work, "single", ["lr_schedule.decay_steps=20", "train.checkpoint.every=5"])
    reference = pc.losses(work, "single")
    run_dir = f"{work}/slurm-run"
    out = submit(args, cluster, work, run_dir, steps=10)
    # The batch script validates for the job's 2 tasks, then srun starts them as one world.
    assert "valid (" in out and "2 ranks = tp 1 × dp 2 × pp 1" in out, f"no validation for 2 ranks:\n{out[-2000:]}"
    assert WORLD_OF_2.search(out) and "launched by srun: rank 0 of 2" in out, f"not a world of 2:\n{out[-2000:]}"
    assert "resuming" not in out, f"the first job resumed from something:\n{out[-2000:]}"
    first = pc.losses(run_dir, "metrics")
    assert sorted(first) == list(range(1, 11)), f"the job logged steps {sorted(first)}, expected 1-10"
    assert first[10] < 0.8 * first[1], f"the loss did not fall: step 1 {first[1]:.4f}, step 10 {first[10]:.4f}"
    print(f"loss fell from {first[1]:.4f} to {first[10]:.4f}")
    pc.compare_losses(reference, first, "train.sbatch (2 tasks) against one rank", 1e-5)
    assert inspect_step(args, f"{run_dir}/checkpoints") == 10
    pc.compare_params(pc.final_params(f"{work}/single/step-00000010"),
                      pc.final_params(f"{run_dir}/checkpoints/step-00000010"), "train.sbatch's checkpoint", 5e-5)
    # Resubmitted with more steps, as after a requeue: it resumes from step 10 and trains on.
    out = submit(args, cluster, work, run_dir, steps=20)
    resumed = re.search(r"resuming from \S+step-00000010 at step 10", out)
    assert resumed, f"the second job did not resume from step 10:\n{out[-2000:]}"
    print(resumed.group(0))
    both = pc.losses(run_dir, "metrics")
    assert sorted(both) == list(range(1, 21)), f"after resuming the metrics hold steps {sorted(both)}, expected 1-20"
    pc.compare_losses(reference, both, "train.sbatch, 10 steps + resubmitted to 20, against one rank", 1e-5)
    assert inspect_step(args, f"{run_dir}/checkpoints") == 20
    pc.compare_params(pc.final_params(f"{work}/single/step-00000020"),
                      pc.final_params(f"{run_dir}/checkpoints/step-00000020"), "the resumed job's checkpoint", 5e-5)


def steps_logged(path):
    return sum(1 for line in open(path) if line.strip()) if os.path.exists(path) else 0


def run_sets(work, tag, steps):
    return sets(pc.TINY + ["data.micro_batch=6", f"train.steps={steps}", f"train.metrics_path=\"{work}/{tag}.jsonl\"",
                           f"train.checkpoint.dir=\"{work}/{tag}\""])


def check_srun_without_mpi_refused(args, cluster, work):
    start = time.time()
    p = cluster.run(["srun", "-n", "2", args.keel, "run", args.config] + run_sets(work, "nompi", 3),
                    check=False, timeout=120, env_extra=pc.ENV)
    elapsed = time.time() - start
    assert p.returncode != 0, f"srun -n 2 without --mpi exited 0:\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}"
    assert p.stderr.count(REFUSAL) == 2, f"expected the refusal from both tasks, got:\n{p.stderr[-3000:]}"
    assert steps_logged(f"{work}/nompi.jsonl") == 0, "a step ran before the refusal"
    assert not os.path.exists(f"{work}/nompi") or not os.listdir(f"{work}/nompi"), "a checkpoint was written"
    print(f"srun -n 2 without --mpi: exit {p.returncode} after {elapsed:.1f}s on both tasks: {REFUSAL}")
    # One task without --mpi is a world of one, as launched: it trains.
    p = cluster.run(["srun", "-n", "1", args.keel, "run", args.config] + run_sets(work, "one-task", 2),
                    check=False, timeout=120, env_extra=pc.ENV)
    assert p.returncode == 0 and steps_logged(f"{work}/one-task.jsonl") == 2, f"srun -n 1 failed:\n{p.stderr[-2000:]}"
    print("srun -n 1 without --mpi: 2 steps")
    # A batch script is no launcher: keel run there is one process, and says the job has 2 tasks.
    script = os.path.join(work, "direct.sh")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in [args.keel, "run", args.config] +
                                            run_sets(work, "direct", 2)) + "\n")
    job = cluster.run(["sbatch", "--parsable", "-n", "2", f"--output={work}/direct.out", script], env_extra=pc.ENV)
    job_id = int(job.stdout.strip().split(";")[0])
    cluster.wait_job(job_id, timeout=120)
    out = open(f"{work}/direct.out", errors="replace").read()
    assert job_state(cluster, job_id) == ("COMPLETED", "0:0"), f"the batch script's keel run failed:\n{out[-2000:]}"
    assert steps_logged(f"{work}/direct.jsonl") == 2, out[-2000:]
    warned = re.search(r"this Slurm job has 2 tasks \(SLURM_NTASKS\), but keel runs as one process in its batch "
                       r"script; start it with `srun --mpi=pmix keel run \.\.\.` to train on all of them", out)
    assert warned, f"no warning that the job's 2 tasks went unused:\n{out[-2000:]}"
    print("keel run directly in a 2-task batch script: one process, 2 steps, warned")


CHECKS = {"srun_parity": check_srun_parity, "sbatch_example": check_sbatch_example,
          "srun_without_mpi_refused": check_srun_without_mpi_refused}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--script", help="examples/slurm/train.sbatch")
    args = parser.parse_args()
    args.mpirun = None
    why = slurm_cluster.unavailable()
    if why:
        print(f"SKIP: {why}")
        return 77
    try:
        cluster = slurm_cluster.SlurmCluster().__enter__()  # stops what it started if it fails
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"SKIP: the Slurm daemons could not start here: {e}")
        return 77
    try:
        listed = cluster.run(["srun", "--mpi=list"], check=False)
        if "pmix" not in listed.stdout + listed.stderr:
            print(f"SKIP: this Slurm offers no pmix (srun --mpi=list: {(listed.stdout + listed.stderr).strip()})")
            return 77
        with tempfile.TemporaryDirectory(prefix="keel-slurm-work-") as work:
            start = time.time()
            CHECKS[args.check](args, cluster, work)
            print(f"{args.check}: passed in {time.time() - start:.1f}s")
    except (AssertionError, RuntimeError) as e:
        print(f"FAIL: {e}")
        print(cluster.logs())
        return 1
    finally:
        cluster.__exit__(None, None, None)  # every job cancelled, every daemon stopped
    return 0


if __name__ == "__main__":
    sys.exit(main())
