#!/usr/bin/env python3
"""Keel's cuda backend against PyTorch on one GPU, in one session: GPT-2 124M and Llama 3.2 1B's
shape in bf16, and attention alone, written to OUT/cuda-YYYY-MM-DD.json (UTC) with a table.

  cuda_models.py peak                       the dense bf16 peak: an 8192³ torch.matmul (cuBLASLt)
  cuda_models.py keel MODEL KEEL --peak P   Keel on MODEL's config (benchmarks/*_cuda.json) at the
                                            first of its micro-batches that fits, op profile on
  cuda_models.py torch MODEL --batch B      the PyTorch baseline (cuda_bench/torch_models.py)
  cuda_models.py attention KEEL --peak P    forward and backward TFLOP/s at head sizes 64 and 128,
                                            T 1024 and 4096, and llama-1b's grouped-query shape:
                                            Keel's op profile against F.scaled_dot_product_attention
  cuda_models.py all KEEL --out OUT         the peak, then each of --parts, each under its own time
                                            limit, the report rewritten after each; exit 1 if any
                                            row has an error
  cuda_models.py table REPORT               the compact table of a report

MODEL is gpt2-124m or llama-1b. Keel's tokens/s is the median of the steps after the third;
PyTorch's the median of its timed steps after 3 warm-up steps; MFU and the FLOP counts are
cuda_bench/shapes.py's. Each part prints one JSON line last. Needs a CUDA GPU, except `table`;
the PyTorch parts need torch (2.5 or newer: enable_gqa, nn.RMSNorm).
"""
import argparse
import json
import os
import subprocess
import sys
import time

from cuda_bench import commands, keel_runs, report, shapes

ME = os.path.abspath(__file__)
SHOWN = "python3 benchmarks/cuda_models.py"
CUT_SHORT = "started, but stopped before it finished (its phase's time limit?)"


def last_json(text):
    """The last line that parses as JSON (torch's own log lines may start with "[" too)."""
    for line in reversed(text.strip().splitlines()):
        if line.startswith(("{", "[")):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def python_part(argv, log_path, timeout_s):
    """This script's `argv` in its own process (so no torch holds GPU memory past its part):
    (its last JSON line or None, the CommandResult)."""
    result = commands.run_command([sys.executable, ME, *argv], log_path, timeout_s)
    return (last_json(result.output) if result.rc == 0 else None), result


def failure(result):
    if result.timed_out:
        return f"past its limit of {result.seconds:.0f} s"
    return f"exit {result.rc}: {result.reason()}"


def torch_part(model, first_batch, workdir, timeout_s):
    """PyTorch on `model` from micro-batch `first_batch` down its list while time is left."""
    deadline = time.time() + timeout_s
    batches = [b for b in model.micro_batches if b <= first_batch] or list(model.micro_batches)
    out = {"attempts": []}
    for batch in batches:
        left = deadline - time.time()
        if left < 20:
            break
        argv = ["torch", model.name, "--batch", str(batch)]
        data, result = python_part(argv, os.path.join(workdir, f"torch-{model.name}-b{batch}.log"), left)
        attempt = {"micro_batch": batch, "rc": result.rc, "seconds": round(result.seconds, 1),
                   "command": f"{SHOWN} {' '.join(argv)}"}
        out["attempts"].append(attempt)
        if data:
            out.update(data, command=attempt["command"], device_memory_bytes=result.device_memory_bytes, error=None)
            return out
        attempt["error"] = failure(result)
        if result.timed_out:
            break
    out["error"] = "; ".join(f"micro-batch {a['micro_batch']}: {a['error']}" for a in out["attempts"]) or \
        "no time left to run"
    return out


def attention_part(keel, peak_tflops, workdir, timeout_s, record):
    """Calls record(shape, keel row, torch row) for every shape, again as each shape's Keel row
    comes in: PyTorch's reference first (one process, quick), then Keel's shapes in order while
    time is left."""
    deadline = time.time() + timeout_s
    data, result = python_part(["sdpa"], os.path.join(workdir, "sdpa.log"), min(25, timeout_s / 2))
    torch_rows = data or [{"error": failure(result)}] * len(shapes.ATTENTION_SHAPES)
    for shape, torch_row in zip(shapes.ATTENTION_SHAPES, torch_rows):
        record(shape, {"error": "not run: the part's time was spent"}, torch_row)
    for shape, torch_row in zip(shapes.ATTENTION_SHAPES, torch_rows):
        left = deadline - time.time()
        if left > 8:
            record(shape, keel_runs.attention_row(keel, shape, peak_tflops, workdir, left), torch_row)


def environment():
    """The GPU's name and driver, from nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        name, driver = (s.strip() for s in out.split(",", 1))
        return {"gpu": name, "driver": driver}
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return {}


def measure_peak(rep, workdir, timeout_s):
    """The peak and the versions PyTorch reports, into the report (or why not)."""
    data, result = python_part(["peak"], os.path.join(workdir, "peak.log"), timeout_s)
    if data:
        rep.update(peak_tflops=data["peak_tflops"], cuda=data["cuda"], cudnn=data["cudnn"], torch=data["torch"],
                   gpu=rep.get("gpu") or data["device"], peak_command=f"{SHOWN} peak")
        rep.pop("peak_error", None)
    else:
        rep["peak_error"] = failure(result)


def all_parts(args):
    parts = args.parts.split(",")
    unknown = [p for p in parts if p not in shapes.MODELS and p != "attention"]
    if unknown:
        raise SystemExit(f"unknown part(s) {', '.join(unknown)}: the parts are {', '.join(shapes.MODELS)} "
                         "and attention")
    out = os.path.abspath(args.out)
    workdir = os.path.join(out, "work")
    os.makedirs(workdir, exist_ok=True)
    path = report.report_path(out)
    rep = report.load_or_new(path)
    rep.update({k: v for k, v in environment().items() if v})
    if rep.get("peak_tflops") is None and args.peak_timeout > 0:
        measure_peak(rep, workdir, args.peak_timeout)
    report.write(path, rep)
    peak, peak_error = rep.get("peak_tflops"), rep.get("peak_error")
    print(f"peak: {peak} TFLOP/s bf16 {peak_error or ''} -> {path}", flush=True)
    timeouts = {"gpt2-124m": args.gpt2_timeout, "llama-1b": args.llama_timeout}
    # The report is written as each side of each part comes in, so a part its phase cuts short
    # still leaves what it measured.
    def record_model(model, keel_result, torch_result):
        report.put_row(rep, "rows", report.model_row(model, keel_result, torch_result, peak), "model")
        report.write(path, rep)

    def record_attention(shape, keel_row, torch_row):
        report.put_row(rep, "attention", report.attention_row(shape, keel_row, torch_row), "shape")
        report.write(path, rep)

    for part in parts:
        start = time.time()
        if part in shapes.MODELS:
            model = shapes.MODELS[part]
            deadline = start + timeouts[part]
            record_model(model, {"error": CUT_SHORT}, None)
            keel_seconds = min(model.keel_seconds, timeouts[part])
            keel_result = keel_runs.model_bench(args.keel, model, peak, workdir, keel_seconds)
            record_model(model, keel_result, {"error": CUT_SHORT})
            first = keel_result.get("micro_batch") or model.micro_batches[0]
            record_model(model, keel_result, torch_part(model, first, workdir, deadline - time.time()))
        else:
            for shape in shapes.ATTENTION_SHAPES:
                record_attention(shape, {"error": CUT_SHORT}, {"error": CUT_SHORT})
            attention_part(args.keel, peak, workdir, args.attention_timeout, record_attention)
        print(f"[{part}: {time.time() - start:.0f} s]", flush=True)
    print(report.format_table(rep), flush=True)
    wanted = [r for r in rep["rows"] if r["model"] in parts]
    if "attention" in parts:
        wanted += rep["attention"]
    return 1 if any(r.get("error") for r in wanted) or peak_error else 0


def print_json(value):
    print(json.dumps(value), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    sub.add_parser("peak")
    pk = sub.add_parser("keel")
    pk.add_argument("model", choices=shapes.MODELS)
    pk.add_argument("keel")
    pk.add_argument("--peak", type=float, default=0.0)
    pk.add_argument("--timeout", type=float, default=75)
    pk.add_argument("--workdir", default="runs/cuda_models")
    pt = sub.add_parser("torch")
    pt.add_argument("model", choices=shapes.MODELS)
    pt.add_argument("--batch", type=int, required=True)
    pt.add_argument("--steps", type=int, default=0, help="timed steps (the model's own count)")
    pa = sub.add_parser("attention")
    pa.add_argument("keel")
    pa.add_argument("--peak", type=float, default=0.0)
    pa.add_argument("--timeout", type=float, default=48)
    pa.add_argument("--workdir", default="runs/cuda_models")
    sub.add_parser("sdpa", help="PyTorch's side of `attention` alone")
    pl = sub.add_parser("all")
    pl.add_argument("keel")
    pl.add_argument("--out", default="runs/cuda_models")
    pl.add_argument("--parts", default="gpt2-124m,llama-1b,attention")
    pl.add_argument("--peak-timeout", type=float, default=30, help="0: take the report's peak, measure none")
    pl.add_argument("--gpt2-timeout", type=float, default=140)
    pl.add_argument("--llama-timeout", type=float, default=130)
    pl.add_argument("--attention-timeout", type=float, default=48)
    ptab = sub.add_parser("table")
    ptab.add_argument("report")
    args = parser.parse_args()
    commands.stop_on_sigterm()
    if args.part == "peak":
        from cuda_bench import torch_models
        print_json(torch_models.peak())
    elif args.part == "keel":
        os.makedirs(args.workdir, exist_ok=True)
        model = shapes.MODELS[args.model]
        print_json(keel_runs.model_bench(os.path.abspath(args.keel), model, args.peak, os.path.abspath(args.workdir),
                                         args.timeout))
    elif args.part == "torch":
        from cuda_bench import torch_models
        model = shapes.MODELS[args.model]
        print_json(torch_models.train_bench(model, args.batch, args.steps or model.torch_steps))
    elif args.part == "sdpa":
        print_json(sdpa_all())
    elif args.part == "attention":
        os.makedirs(args.workdir, exist_ok=True)
        rows = {}
        attention_part(os.path.abspath(args.keel), args.peak, os.path.abspath(args.workdir), args.timeout,
                       lambda shape, keel, torch: rows.update({shape.name: report.attention_row(shape, keel, torch)}))
        print_json(list(rows.values()))
    elif args.part == "all":
        args.keel = os.path.abspath(args.keel)
        sys.exit(all_parts(args))
    else:
        with open(args.report) as f:
            print(report.format_table(json.load(f)))


def sdpa_all():
    """PyTorch's attention rates at every shape; a shape that fails carries its error."""
    from cuda_bench import torch_models
    rows = []
    for shape in shapes.ATTENTION_SHAPES:
        try:
            flops = shapes.attention_flops(shape), shapes.attention_flops(shape, backward=True)
            rows.append(torch_models.sdpa_rates(shape, *flops))
        except Exception as e:  # noqa: BLE001 (an out-of-memory at one shape leaves the others their rows)
            rows.append({"error": f"{type(e).__name__}: {str(e)[:300]}"})
    return rows


if __name__ == "__main__":
    main()
