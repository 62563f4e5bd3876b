#!/usr/bin/env python3
"""Which sgemm, threaded which way, for a CPU training step (Keel issue 25): the products of one
GPT-2 124M step (the four linear layers of its twelve blocks and the classifier, forward and both
backward products) at 256 rows (micro-batch 4 x 64) and 2048 (8 x 256), with each library this
machine offers, 2 threads, every product followed by a small OpenMP loop as in a real step
(build/bin/keel-gemm-libraries):

  openblas-threads  OpenBLAS's own pool threads each product (backend gemm_threading "openblas")
  openblas-blocks   Keel cuts each product into one block per OpenMP thread, one single-threaded
                    OpenBLAS call each (gemm_threading "partition", the default)
  blis-threads      BLIS with OpenMP (Debian's libblis4-openmp)
  blis-blocks       single-threaded BLIS (libblis4-serial) under Keel's blocks
  onednn            oneDNN's dnnl_sgemm (Debian's libdnnl2), threaded with OpenMP
  mkl               MKL (--mkl DIR: the lib folder of PyPI's `mkl` wheel; GNU OpenMP threading)

Libraries that are not installed are listed as absent. The % column is against the OpenBLAS
sgemm peak measured in the same process (2048², its own threads, best of 5).

Run by hand, after scripts/build.sh:
  /usr/bin/python3 benchmarks/gemm_libraries.py [--mkl DIR] [--rows 256,2048] [--repeats R]
(OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset, as on a user's machine). No pass/fail.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "build", "bin", "keel-gemm-libraries")
WAYS = ("openblas-threads", "openblas-blocks", "blis-threads", "blis-blocks", "onednn", "mkl")
KINDS = ("forward", "dinput", "dweight")


def run(rows, repeats, mkl_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OMP_NUM_THREADS"] = "2"
    cmd = [TOOL, "--rows", str(rows), "--repeats", str(repeats), "--threads", "2"]
    if mkl_dir:
        env["MKL_THREADING_LAYER"] = "GNU"  # libgomp, the OpenMP the kernels use
        env["LD_LIBRARY_PATH"] = mkl_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        cmd += ["--mkl", os.path.join(mkl_dir, "libmkl_rt.so.3")]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"keel-gemm-libraries failed:\n{p.stderr}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mkl", help="folder holding libmkl_rt.so.3 (pip download mkl; unzip the wheel)")
    parser.add_argument("--rows", default="256,2048")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    all_rows = [int(r) for r in args.rows.split(",")]
    results = {rows: run(rows, args.repeats, args.mkl) for rows in all_rows}
    header = f"{'way':18s}"
    for rows in all_rows:
        header += f" | {rows:>5d} rows: {'ms':>7s} {'GFLOP/s':>8s} {'%peak':>6s}"
    print("GPT-2 124M, one step's linear-layer products, 2 threads, each followed by an OpenMP loop")
    print(header)
    for way in WAYS:
        line = f"{way:18s}"
        for rows in all_rows:
            records = [r for r in results[rows] if r.get("way") == way]
            peak = next(r["peak_gflops"] for r in results[rows] if "peak_gflops" in r)
            if not records or "absent" in records[0]:
                why = records[0]["absent"] if records else "not run"
                line += f" | {why[:34]:>34s}"
                continue
            seconds = sum(r["step_s"] for r in records)
            flops = sum(r["step_s"] * r["gflops"] for r in records)
            line += f" | {'':11s}{1e3 * seconds:7.1f} {flops / seconds:8.1f} {100 * flops / seconds / peak:5.1f}%"
        print(line)
    for rows in all_rows:
        meta = next(r for r in results[rows] if "peak_gflops" in r)
        print(f"{rows} rows: OpenBLAS kernels {meta['openblas_kernels']}, sgemm peak {meta['peak_gflops']:.1f} GFLOP/s; "
              f"the OpenMP loops alone {1e3 * meta['ops_between_s']:.1f} ms of each row's time")
    print("\nby kind (GFLOP/s): " + ", ".join(KINDS))
    for rows in all_rows:
        for way in WAYS:
            records = {r["kind"]: r["gflops"] for r in results[rows] if r.get("way") == way and "kind" in r}
            if records:
                print(f"  {rows:>5d} rows {way:18s} " + " ".join(f"{records[k]:8.1f}" for k in KINDS))


if __name__ == "__main__":
    main()
