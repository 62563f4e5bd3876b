"""Keel's side of the cuda benchmark: `keel run` on a model's config at the first micro-batch that
fits, and the one-layer runs that time attention alone.

Every run logs the cuda backend's op profile ("op_profile": true). Its CUDA events around each
slot cost the host a few microseconds a slot, under 1% of a GPT-2 step, so the timed run is also
the profiled one. The final checkpoint that `keel run` always writes (fsync'ed) goes to
/dev/shm when that has room, else beside the logs; either way it is deleted after the run.

Attention is timed by difference, as benchmarks/cpu_op_profile.py does: a short run and a long
one of the same shape, and the slot's extra calls divided by its extra GPU time. What both runs
pay once (a first call's set-up, such as building cuDNN's plans, which the events around that
call include) cancels; the long run is sized from the short one's step time to about 1.5 s of
steps, so the calls that remain outweigh the noise of that set-up.
"""
import json
import os
import shutil
import statistics
import tempfile
import time

from . import commands, op_profile, shapes

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMED_AFTER_STEP = 3


def keel_command(keel, config, settings):
    cmd = [keel, "run", os.path.join(BENCHMARKS, config)]
    for key, value in settings.items():
        cmd += ["--set", f"{key}={value}"]
    return cmd


def read_steps(metrics_path):
    """The step records of a metrics file; a line cut short by a kill is skipped."""
    records = []
    try:
        with open(metrics_path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if "step" in record and "tokens_per_s" in record:
                    records.append(record)
    except OSError:
        pass
    return records


def summarize_steps(records):
    """Medians over the steps after the third; None when there are none."""
    timed = [r for r in records if r["step"] > TIMED_AFTER_STEP]
    if not timed:
        return None
    return {"tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed),
            "step_ms": statistics.median(r["step_ms"] for r in timed),
            "mfu_progress_line": statistics.median(r.get("mfu", 0.0) for r in timed),
            "timed_steps": len(timed),
            "phase_ms": {k: statistics.median(r["time_ms"][k] for r in timed) for k in timed[0].get("time_ms", {})},
            "host_resident_bytes": timed[-1].get("memory_bytes"),
            "strategy_bytes": timed[-1].get("strategy_bytes"),
            "losses": [r["loss"] for r in records]}


def state_bytes(model):
    """About what a checkpoint holds: fp32 weights and AdamW's two moments."""
    params = shapes.matmul_weights(model) + model.seq_len * model.d_model + 4 * model.n_layer * model.d_model
    return 12 * params


def checkpoint_folder(bytes_needed, fallback):
    """A fresh folder in /dev/shm when it has twice the room, else `fallback`."""
    try:
        if shutil.disk_usage("/dev/shm").free > 2 * bytes_needed:
            return tempfile.mkdtemp(prefix="keel-bench-", dir="/dev/shm")
    except OSError:
        pass
    os.makedirs(fallback, exist_ok=True)
    return fallback


def profiled_run(keel, config, settings, workdir, name, timeout_s, checkpoint_bytes):
    """One `keel run` with the op profile on: its result, steps and parsed profile."""
    run_dir = os.path.join(workdir, name)
    os.makedirs(run_dir, exist_ok=True)
    metrics = os.path.join(run_dir, "metrics.jsonl")
    checkpoints = checkpoint_folder(checkpoint_bytes, os.path.join(run_dir, "checkpoints"))
    settings = {**settings, "backend.op_profile": "true", "train.metrics_path": metrics,
                "train.checkpoint.dir": checkpoints}
    cmd = keel_command(keel, config, settings)
    try:
        result = commands.run_command(cmd, os.path.join(workdir, name + ".log"), timeout_s, cwd=run_dir)
    finally:
        shutil.rmtree(checkpoints, ignore_errors=True)
    return {"command": commands.quoted(cmd), "result": result, "steps": read_steps(metrics),
            "profile_lines": op_profile.profile_lines(result.output),
            "profile": op_profile.parse_log(result.output), "attention": attention_lines(result.output)}


def attention_lines(log):
    """What the backend says of attention: which kernels it has, and which each shape took."""
    prefix = op_profile.SOURCE + "attention"
    return [line.split(op_profile.SOURCE, 1)[1] for line in log.splitlines() if prefix in line]


def model_bench(keel, model, peak_tflops, workdir, timeout_s):
    """Keel on `model` at its first micro-batch that runs. A run stopped at its limit still counts
    when its steps are all in (the limit then fell in the final checkpoint)."""
    deadline = time.time() + timeout_s
    out = {"attempts": []}
    for batch in model.micro_batches:
        left = deadline - time.time()
        if left < 10:
            break
        settings = {"data.micro_batch": batch, "data.global_batch": batch, "train.steps": model.keel_steps,
                    "train.log_every": 1, "train.eval_every": 0, "data.val_batches": 1}
        if peak_tflops:
            settings["backend.peak_tflops"] = f"{peak_tflops:.1f}"
        run = profiled_run(keel, model.config, settings, workdir, f"keel-{model.name}-b{batch}", left,
                           state_bytes(model))
        result, summary = run["result"], summarize_steps(run["steps"])
        complete = summary and len(run["steps"]) >= model.keel_steps
        attempt = {"micro_batch": batch, "rc": result.rc, "seconds": round(result.seconds, 1),
                   "command": run["command"]}
        out["attempts"].append(attempt)
        if result.rc == 0 and summary or result.timed_out and complete:
            out.update(summary, micro_batch=batch, command=run["command"], seconds=attempt["seconds"],
                       device_memory_bytes=result.device_memory_bytes, op_profile=run["profile_lines"],
                       attention=run["attention"], error=None)
            if result.timed_out:
                out["note"] = "stopped at its limit after its last step (in the final checkpoint): no op profile"
            return out
        attempt["error"] = f"exit {result.rc}: {result.reason()}" if not result.timed_out else \
            f"past its limit of {left:.0f} s after {len(run['steps'])} steps"
        if result.timed_out:
            break
    out["error"] = "; ".join(f"micro-batch {a['micro_batch']}: {a['error']}" for a in out["attempts"]) or \
        "no time left to run"
    return out


def attention_settings(shape, steps, log_every):
    """A one-layer model whose attention has `shape`; bytes as tokens, so the classifier is small."""
    settings = {"model.n_layer": 1, "model.vocab_size": 256, "model.seq_len": shape.seq_len,
                "data.seq_len": shape.seq_len, "data.micro_batch": shape.batch, "data.global_batch": shape.batch,
                "data.val_batches": 1, "train.steps": steps, "train.log_every": log_every, "train.eval_every": 0,
                "train.on_nonfinite": "skip"}
    if shape.family == "gpt":
        settings.update({"model.n_head": shape.n_head, "model.d_model": shape.width})
    return settings


def attention_config(shape):
    return "gpt2_124m_cuda.json" if shape.family == "gpt" else "llama_1b_cuda.json"


SHORT_STEPS, LONG_SECONDS, MAX_LONG_STEPS = 3, 1.5, 500


def long_steps(short_step_ms):
    return int(min(MAX_LONG_STEPS, max(SHORT_STEPS + 10, SHORT_STEPS + LONG_SECONDS * 1e3 / max(short_step_ms, 1e-3))))


def differenced_rate(short_row, long_row, flops_per_call):
    """TFLOP/s of the calls the long run made beyond the short one's; None (with why) if not positive."""
    if not short_row or not long_row:
        return None, "the op profile has no such row"
    calls = long_row["calls"] - short_row["calls"]
    ms = long_row["gpu_ms"] - short_row["gpu_ms"]
    if calls <= 0 or ms <= 0:
        return None, f"no positive difference ({calls} calls, {ms:.3f} ms)"
    return calls * flops_per_call / (ms / 1e3) / 1e12, None


def attention_row(keel, shape, peak_tflops, workdir, timeout_s):
    """Keel's forward and backward TFLOP/s at `shape`, by difference of two profiled runs."""
    deadline = time.time() + timeout_s
    row = {"keel_forward_tflops": None, "keel_backward_tflops": None, "error": None}
    extra = {"backend.peak_tflops": f"{peak_tflops:.1f}"} if peak_tflops else {}
    name = shape.name.replace(" ", "-")
    short = profiled_run(keel, attention_config(shape), {**attention_settings(shape, SHORT_STEPS, 1), **extra},
                         workdir, f"attention-{name}-short", deadline - time.time(), 0)
    if short["result"].rc != 0 or not short["steps"]:
        row["error"] = f"short run: exit {short['result'].rc}: {short['result'].reason()}"
        return row
    steps = long_steps(short["steps"][-1]["step_ms"])
    left = deadline - time.time()
    if left < 5:
        row["error"] = "no time left for the long run"
        return row
    long = profiled_run(keel, attention_config(shape), {**attention_settings(shape, steps, 50), **extra},
                        workdir, f"attention-{name}-long", left, 0)
    row["keel_attention"] = long["attention"]
    row["keel_runs"] = {name: {"steps": n, "command": run["command"], "op_profile": run["profile_lines"]}
                        for name, n, run in (("short", SHORT_STEPS, short), ("long", steps, long))}
    if long["result"].rc != 0:
        row["error"] = f"long run ({steps} steps): exit {long['result'].rc}: {long['result'].reason()}"
        return row
    errors = []
    for direction, op, backward in (("forward", shape.forward_op, False), ("backward", shape.backward_op, True)):
        rate, why = differenced_rate(short["profile"].get(op), long["profile"].get(op),
                                     shapes.attention_flops(shape, backward))
        row[f"keel_{direction}_tflops"] = rate
        row[f"keel_{direction}_tflops_one_run"] = (long["profile"].get(op) or {}).get("tflop_per_s")
        if why:
            errors.append(f"{op}: {why}")
    row["error"] = "; ".join(errors) or None
    return row
