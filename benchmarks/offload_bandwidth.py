#!/usr/bin/env python3
"""Sequential write and read bandwidth of the nvme offload engine against fio on the same folder,
in the same run (Keel issue 11's yardstick: the engine should reach at least 80% of fio).

Both sides use the same recipe: O_DIRECT, io_uring, 1 MiB requests, queue depth 16, one file of
--bytes (2 GiB by default, less when the disk has little room). The engine's side is the
keel-offload-bench driver (plugins/offload-engines), streaming its extent with a few 16 MiB
requests outstanding, cut by the engine into 1 MiB blocks. The two sides alternate --repeats
times and the median of each is reported, so a noisy neighbour hits both alike.

Run by hand after building the driver:
  flock /tmp/keel-cpu.lock cmake --build build --target keel-offload-bench
  /usr/bin/python3 benchmarks/offload_bandwidth.py [--folder DIR] [--bytes N] [--repeats 3]
Needs fio (scripts/install-deps.sh installs it); prints a table, with no pass/fail."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9
MIB = 1 << 20


def fail(message):
    print(f"offload_bandwidth: {message}", file=sys.stderr)
    sys.exit(2)


def run_json(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        fail(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stderr.strip()}")
    # fio may print notices before its JSON; the JSON starts at the first '{'.
    return json.loads(result.stdout[result.stdout.index("{"):])


def engine_run(bench, folder, size, queue_depth, block_bytes):
    report = run_json([bench, "--folder", folder, "--bytes", str(size), "--queue-depth", str(queue_depth),
                       "--block-bytes", str(block_bytes)])
    if not report["read_back_verified"]:
        fail("keel-offload-bench read back other bytes than it wrote")
    return size / report["write_seconds"] / GB, size / report["read_seconds"] / GB


def fio_run(folder, size, queue_depth, block_bytes):
    data_file = f"keel-offload-fio-{os.getpid()}.dat"  # never mistaken for a checkpoint
    speeds = []
    try:
        for mode in ("write", "read"):
            report = run_json(["fio", "--name=keel-offload-" + mode, f"--directory={folder}",
                               f"--filename={data_file}", "--ioengine=io_uring", "--direct=1",
                               f"--bs={block_bytes}", f"--iodepth={queue_depth}", f"--rw={mode}",
                               f"--size={size}", "--numjobs=1", "--output-format=json"])
            speeds.append(report["jobs"][0][mode]["bw_bytes"] / GB)
    finally:
        path = os.path.join(folder, data_file)
        if os.path.exists(path):
            os.remove(path)
    return tuple(speeds)


def filesystem_of(folder):
    result = subprocess.run(["df", "--output=source,fstype", folder], capture_output=True, text=True)
    lines = result.stdout.strip().splitlines()
    return " ".join(lines[-1].split()) if result.returncode == 0 and lines else "unknown"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", help="where both write their file (default: a new folder under build/)")
    parser.add_argument("--bytes", type=int, default=2 << 30, help="file size (default 2 GiB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--queue-depth", type=int, default=16)
    parser.add_argument("--block-bytes", type=int, default=MIB)
    parser.add_argument("--bench", default=os.path.join(ROOT, "build/plugins/offload-engines/keel-offload-bench"))
    args = parser.parse_args()

    if shutil.which("fio") is None:
        fail("fio is not installed; scripts/install-deps.sh installs it (or: apt-get install fio)")
    if not os.access(args.bench, os.X_OK):
        fail(f"{args.bench} is missing; build it: cmake --build build --target keel-offload-bench")

    parent = args.folder or os.path.join(ROOT, "build")
    os.makedirs(parent, exist_ok=True)
    folder = tempfile.mkdtemp(prefix="offload-bandwidth-", dir=parent)
    try:
        stats = os.statvfs(folder)
        free = stats.f_bavail * stats.f_frsize
        size = min(args.bytes, (free // 3) // MIB * MIB)  # room for the engine's and fio's file, and slack
        if size < 64 * MIB:
            fail(f"{folder} has only {free} bytes free; the benchmark needs at least {3 * 64 * MIB}")
        engine_writes, engine_reads, fio_writes, fio_reads = [], [], [], []
        for _ in range(args.repeats):
            write, read = engine_run(args.bench, folder, size, args.queue_depth, args.block_bytes)
            engine_writes.append(write)
            engine_reads.append(read)
            write, read = fio_run(folder, size, args.queue_depth, args.block_bytes)
            fio_writes.append(write)
            fio_reads.append(read)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print(f"folder {folder} on {filesystem_of(parent)}; file {size / GB:.2f} GB, "
          f"{args.block_bytes // 1024} KiB requests, queue depth {args.queue_depth}, O_DIRECT, io_uring; "
          f"median of {args.repeats} alternating runs")
    print(f"{'':18}{'engine GB/s':>12}{'fio GB/s':>10}{'ratio':>8}   (target >= 0.80)")
    for label, engine, fio in (("sequential write", engine_writes, fio_writes),
                               ("sequential read", engine_reads, fio_reads)):
        engine_median, fio_median = statistics.median(engine), statistics.median(fio)
        print(f"{label:18}{engine_median:12.2f}{fio_median:10.2f}{engine_median / fio_median:8.2f}")
    print("all runs (engine write, engine read, fio write, fio read):")
    for row in zip(engine_writes, engine_reads, fio_writes, fio_reads):
        print("  " + "  ".join(f"{value:.2f}" for value in row))


if __name__ == "__main__":
    main()
