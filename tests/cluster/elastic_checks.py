#!/usr/bin/env python3
"""`keel launch`, the elastic supervisor, on the namespace cluster (netns_cluster.py).
- restart: 2 hosts × 2 ranks train ZeRO-1 (global batch 12 in micro-batches of 3), saving every
  5 steps. After step 12 one host is lost: its link goes down and every process on it is
  killed. The job fails, the supervisor finds that host silent, plans 2 ranks on the host left
  (dp 4 → 2, the global batch kept by 2 micro-batches per rank), resumes from the newest
  checkpoint published (step 10, or 5 or 15 when the machine is loaded) and trains to step 30. Its losses after the resume must equal, bit for bit, a run
  that resumed the same checkpoint by hand at that layout; the time from the failure to the
  first step after the restart is printed.
- refusals (no namespaces needed): a layout that cannot fit the hosts that answer is refused
  with its numbers; a malformed hosts file is refused naming the file and line.
- stops (no namespaces or mpirun needed; a fake launcher script): SIGINT while a probe hangs ends
  probing at once and exits 130, not after --probe-timeout; a job whose launcher ignores SIGTERM
  is killed after --stop-grace, with nothing of its group left, and keel launch exits 143; a
  launcher that exits 1 on Ctrl-C (as mpirun does) still leaves keel launch exiting 130.
The restart check skips (77) where namespaces cannot be made."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
import netns_cluster  # noqa: E402
import parallel_checks as pc  # noqa: E402

SETS = pc.TINY + pc.strategy_sets("zero1") + ["data.micro_batch=3", "train.steps=30", "train.checkpoint.every=5",
                                              "comm.timeout_s=5", "lr_schedule.decay_steps=30",
                                              "train.checkpoint.keep=10"]


def records(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def check_restart(args, work):
    reason = netns_cluster.unavailable()
    if reason:
        print(f"SKIPPED: no namespace cluster here: {reason}")
        sys.exit(77)
    with netns_cluster.Cluster(2) as cluster:
        hosts = os.path.join(work, "hosts")
        with open(hosts, "w") as f:
            f.write("# the namespace cluster\n" + "".join(f"{addr} slots=2\n" for _, addr in cluster.hosts))
        metrics = f"{work}/elastic.jsonl"
        sets = SETS + [f"train.metrics_path=\"{metrics}\"", f"train.checkpoint.dir=\"{work}/elastic\""]
        cmd = [args.keel, "launch", args.config, "--hosts", hosts, "--launcher", cluster.mpirun, "--max-restarts", "2",
               "--probe-timeout", "10"] + [a for s in sets for a in ("--set", s)]
        supervisor = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      errors="replace", env=pc.ENV)
        deadline = time.time() + 180
        while not any(r["step"] >= 12 for r in records(metrics)):
            assert supervisor.poll() is None, f"keel launch ended before step 12:\n{supervisor.communicate()[0][-3000:]}"
            assert time.time() < deadline, "12 steps took over 3 minutes"
            time.sleep(0.05)
        lost_at_step = max(r["step"] for r in records(metrics))
        cluster.cut("keel-h2")
        for pid in cluster.pids("keel-h2"):
            os.kill(pid, 9)
        failed_at = time.time()
        logged_before = records(metrics)
        first_after = None
        while supervisor.poll() is None and time.time() - failed_at < 300:
            # The restarted run's first record. The resumed run drops the records past its
            # checkpoint before it appends, so its first record replaces one logged before the
            # failure; or, where nothing was dropped, it is appended with a step at or below the
            # last one logged before (the dying job may still have logged a later one).
            now = records(metrics)
            replaced = any(a != b for a, b in zip(now, logged_before))
            appended = any(r["step"] <= lost_at_step for r in now[len(logged_before):])
            if first_after is None and (replaced or appended):
                first_after = time.time() - failed_at
            time.sleep(0.05)
        if supervisor.poll() is None:
            supervisor.kill()
        out = supervisor.communicate()[0]
    print("\n".join(line for line in out.splitlines() if line.startswith("keel launch") or "keel: rank" in line))
    assert supervisor.returncode == 0, f"keel launch exited {supervisor.returncode}:\n{out[-4000:]}"
    assert re.search(r"keel launch: host 10\.77\.0\.12 does not answer", out), "the lost host was not reported"
    restart = re.search(r"keel launch: restart 1 of 2: 2 rank\(s\) on 10\.77\.0\.11:2 \((.*?)\), resuming", out)
    assert restart, f"no restart on the remaining host's 2 ranks:\n{out[-3000:]}"
    resumed_from = re.findall(r"resuming from (\S+)/step-(\d+) at step (\d+)", out)
    assert resumed_from, "the restarted job did not resume from a checkpoint"
    checkpoint_step = int(resumed_from[-1][1])
    # The newest checkpoint published before the host was lost. Under load the job runs on past
    # step 12 between the poll that saw it and the cut (step 15's checkpoint may then exist), and
    # an asynchronous write of step 10 may still be pending at the kill (step 5's is the newest):
    # expecting the step-10 checkpoint alone made this check fail under load.
    last_logged = max(r["step"] for r in logged_before)
    assert checkpoint_step % 5 == 0 and 5 <= checkpoint_step <= max(lost_at_step, last_logged), \
        f"resumed from step {checkpoint_step}: not a checkpoint the lost job could have published " \
        f"(saved every 5 steps, lost after step {lost_at_step}, {last_logged} logged)"
    assert checkpoint_step >= lost_at_step - 10, \
        f"resumed from step {checkpoint_step}, more than one pending checkpoint behind step {lost_at_step}"
    print(f"host lost after step {lost_at_step}; restarted on 2 ranks ({restart.group(1)}) from step {checkpoint_step}; "
          f"{lost_at_step - checkpoint_step} step(s) of work lost")
    assert first_after is not None, "the restarted run's first step was never seen while keel launch ran"
    print(f"time from the failure to the first step after the restart: {first_after:.1f} s")
    elastic = {}
    for r in records(metrics):
        elastic[r["step"]] = r["loss"]  # the resumed run's records come last and win
    assert sorted(s for s in elastic if s > checkpoint_step) == list(range(checkpoint_step + 1, 31)), sorted(elastic)

    # By hand: the same checkpoint resumed at that layout (2 ranks, one host, no supervisor).
    shutil.copytree(f"{work}/elastic/step-{checkpoint_step:08d}", f"{work}/by-hand/step-{checkpoint_step:08d}")
    hand = [args.keel, "run", args.config, "--resume", "latest"] + [
        a for s in SETS + [f"train.metrics_path=\"{work}/by-hand.jsonl\"", f"train.checkpoint.dir=\"{work}/by-hand\""]
        for a in ("--set", s)]
    p = subprocess.run([shutil.which("mpirun"), "--oversubscribe", "-np", "2"] + hand, capture_output=True, text=True,
                       env=pc.ENV, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    by_hand = {r["step"]: r["loss"] for r in records(f"{work}/by-hand.jsonl")}
    assert sorted(by_hand) == list(range(checkpoint_step + 1, 31)), sorted(by_hand)
    differ = [s for s in by_hand if by_hand[s] != elastic[s]]
    assert not differ, f"steps {differ} differ: elastic {[elastic[s] for s in differ]} vs by hand {[by_hand[s] for s in differ]}"
    print(f"steps {checkpoint_step + 1}-30 after the restart equal the by-hand resume bit for bit")


def check_refusals(args, work):
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost slots=1\n")
    sets = SETS + ["parallel.tp=2", f"train.checkpoint.dir=\"{work}/c\"", f"train.metrics_path=\"{work}/m.jsonl\""]
    p = subprocess.run([args.keel, "launch", args.config, "--hosts", hosts, "--launcher", "mpirun --oversubscribe"] +
                       [a for s in sets for a in ("--set", s)], capture_output=True, text=True, env=pc.ENV, timeout=120)
    print(p.stderr.strip())
    assert p.returncode != 0 and re.search(r"no layout of .* fits the 1 slot\(s\) of the hosts that answer: at 1 ranks, "
                                           r".*tp", p.stderr), p.stdout + p.stderr
    for text, expected in (("node1 slots=0\n", r"hosts:1: slots must be a whole number from 1 to 4096, found '0'"),
                           ("node1\n-x\n", r"hosts:2: expected a host name or IPv4 address .* found '-x'"),
                           ("node1:64\n", r"hosts:1: expected a host name or IPv4 address .*slots=N\), found 'node1:64'"),
                           ("node1 cpus=2\n", r"hosts:1: expected slots=N or site=NAME after the host name, found 'cpus=2'"),
                           ("node1 site=-x\n", r"hosts:1: expected a site name after site="),
                           ("node1 site=a\nnode2\n", r"host node2 names no site= while others do"),
                           ("a\na\n", r"hosts:2: host a is listed twice"),
                           ("localhost\nLOCALHOST\n", r"hosts:2: host LOCALHOST is listed twice \(as localhost before; "
                                                        r"host names ignore case\)"),
                           ("# nothing\n", r"hosts: the hosts file names no host")):
        with open(hosts, "w") as f:
            f.write(text)
        p = subprocess.run([args.keel, "launch", args.config, "--hosts", hosts], capture_output=True, text=True,
                           env=pc.ENV, timeout=60)
        assert p.returncode != 0 and re.search(expected, p.stderr), f"{text!r}: {p.stderr}"
        print(f"hosts file {text!r}: refused: {p.stderr.strip()}")


# A launcher standing in for mpirun: it records its pid, answers probes (`... keel --version`)
# or runs the job as its mode says, and ignores SIGINT and SIGTERM where asked (its sleep too:
# an ignored signal stays ignored across exec).
# Its pid is written once its traps are set, so a signal sent after the pid appears finds them.
FAKE_LAUNCHER = """#!/bin/sh
mode=$(cat "$(dirname "$0")/mode")
case "$*" in *--version*) kind=probe ;; *) kind=job ;; esac
case "$kind:$mode" in
  probe:hang|job:deaf) trap '' INT TERM ;;
  job:mpirun-like) trap 'exit 1' INT ;;
  probe:*) exit 0 ;;
esac
echo $$ >> "$(dirname "$0")/$kind.pids"
while :; do sleep 1; done
"""


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is ended, not yet reaped
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def check_stops(args, work):
    import signal
    launcher = os.path.join(work, "launcher")
    with open(launcher, "w") as f:
        f.write(FAKE_LAUNCHER)
    os.chmod(launcher, 0o755)
    hosts = os.path.join(work, "hosts")
    with open(hosts, "w") as f:
        f.write("localhost slots=1\n")
    sets = pc.TINY + ["data.micro_batch=3", f"train.checkpoint.dir=\"{work}/c\"",
                      f"train.metrics_path=\"{work}/m.jsonl\""]
    for mode, stop, extra, expected in (("hang", signal.SIGINT, ["--probe-timeout", "600"], 130),
                                        ("deaf", signal.SIGTERM, ["--stop-grace", "1"], 143),
                                        ("mpirun-like", signal.SIGINT, [], 130)):
        for name in ("probe.pids", "job.pids"):
            if os.path.exists(os.path.join(work, name)):
                os.remove(os.path.join(work, name))
        with open(os.path.join(work, "mode"), "w") as f:
            f.write(mode)
        waits_for = os.path.join(work, "probe.pids" if mode == "hang" else "job.pids")
        p = subprocess.Popen([args.keel, "launch", args.config, "--hosts", hosts, "--launcher", launcher] + extra +
                             [a for s in sets for a in ("--set", s)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, env=pc.ENV)
        deadline = time.time() + 60
        while not os.path.exists(waits_for) and p.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert os.path.exists(waits_for), f"{mode}: the fake launcher never started:\n{p.communicate()[0]}"
        p.send_signal(stop)
        try:
            out = p.communicate(timeout=120)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            raise AssertionError(f"{mode}: keel launch did not end after {stop.name}:\n{p.communicate()[0]}")
        print(f"{mode}, {stop.name}: exit {p.returncode}\n{out.strip()}")
        assert p.returncode == expected, f"{mode}: exit {p.returncode}, expected {expected}:\n{out}"
        with open(waits_for) as f:
            left = [int(pid) for pid in f.read().split() if alive(int(pid))]
        assert not left, f"{mode}: launcher process(es) {left} outlived keel launch"
        if mode == "deaf":
            assert "killing its process group" in out, out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=["restart", "refusals", "stops"])
    parser.add_argument("--keel", required=True)
    parser.add_argument("--config", required=True)
    args = parser.parse_args()
    if args.check != "stops" and not shutil.which("mpirun"):
        print("SKIPPED: mpirun is not installed")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as work:
        {"restart": check_restart, "refusals": check_refusals, "stops": check_stops}[args.check](args, work)
    print("PASS")


if __name__ == "__main__":
    main()
