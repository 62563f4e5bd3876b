"""The session's report, OUT/cuda-YYYY-MM-DD.json (UTC), and its compact table.

One row per model and one per attention shape, in a fixed order, from the start: a part that
failed, timed out or never ran keeps its row with nulls and an "error" string, never a guessed
figure. Each row names the model, T, micro_batch, keel_tokens_per_s, torch_compile_tokens_per_s
and mfu (Keel's); the rest of a row is detail (PyTorch's MFU, step times, memory, the op profile,
the exact commands). The file is rewritten after every part, so a session cut short keeps what
it measured, and a later `all` into the same folder continues the file it finds there.
"""
import glob
import json
import os
import time

from . import shapes

CONVENTION = ("MFU: 6N + 12·L·C·T FLOPs a token (N the matmul weights, classifier included; C = n_head·head_dim) "
              "against peak_tflops, a 8192³ bf16 torch.matmul measured in the same session. Attention: causal work "
              "counted once, forward 2·B·T²·C, backward 4·B·T²·C (recomputed scores not counted), as the cuda "
              "backend's op_profile counts; Keel's rates by difference of a short and a long one-layer run.")


def empty_model_row(model, error="not run"):
    return {"model": model.name, "T": model.seq_len, "micro_batch": None, "keel_tokens_per_s": None,
            "torch_compile_tokens_per_s": None, "mfu": None, "torch_mfu": None,
            "flops_per_token": shapes.flops_per_token(model), "error": error}


def empty_attention_row(shape, error="not run"):
    return {"shape": shape.name, "head_size": shape.head_size, "T": shape.seq_len, "batch": shape.batch,
            "n_head": shape.n_head, "n_kv_head": shape.n_kv_head, "keel_forward_tflops": None,
            "torch_forward_tflops": None, "keel_backward_tflops": None, "torch_backward_tflops": None,
            "keel_ops": [shape.forward_op, shape.backward_op], "error": error}


def new_report(date):
    return {"date": date, "gpu": None, "driver": None, "cuda": None, "cudnn": None, "torch": None,
            "peak_tflops": None, "convention": CONVENTION,
            "rows": [empty_model_row(m) for m in shapes.MODELS.values()],
            "attention": [empty_attention_row(s) for s in shapes.ATTENTION_SHAPES]}


def utc_date(seconds=None):
    return time.strftime("%Y-%m-%d", time.gmtime(seconds))


def report_path(out_dir, seconds=None):
    """The report already in out_dir (one session's parts share it), else today's new name."""
    found = sorted(glob.glob(os.path.join(out_dir, "cuda-????-??-??.json")))
    return found[-1] if found else os.path.join(out_dir, f"cuda-{utc_date(seconds)}.json")


def load_or_new(path):
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)
    return new_report(os.path.basename(path)[len("cuda-"):-len(".json")])


def write(path, report):
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    os.replace(temporary, path)


def _errors(*named):
    return "; ".join(f"{name}: {error}" for name, error in named if error) or None


def model_row(model, keel, torch_result, peak_tflops):
    """The report's row from Keel's and PyTorch's results (either may be None or carry "error")."""
    keel, torch_result = keel or {"error": "not run"}, torch_result or {"error": "not run"}
    row = empty_model_row(model, None)
    keel_tps, torch_tps = keel.get("tokens_per_s"), torch_result.get("tokens_per_s")
    row.update(micro_batch=keel.get("micro_batch"), keel_tokens_per_s=keel_tps, torch_compile_tokens_per_s=torch_tps,
               mfu=shapes.mfu(keel_tps, model, peak_tflops), torch_mfu=shapes.mfu(torch_tps, model, peak_tflops),
               keel_over_torch=keel_tps / torch_tps if keel_tps and torch_tps else None,
               torch_micro_batch=torch_result.get("micro_batch"),
               keel_step_ms=keel.get("step_ms"), torch_step_ms=torch_result.get("step_ms"),
               keel_device_memory_bytes=keel.get("device_memory_bytes"),
               torch_device_memory_bytes=torch_result.get("device_memory_bytes"),
               torch_max_memory_allocated_bytes=torch_result.get("max_memory_allocated_bytes"),
               keel_host_resident_bytes=keel.get("host_resident_bytes"),
               keel_strategy_bytes=keel.get("strategy_bytes"),
               keel_mfu_progress_line=keel.get("mfu_progress_line"),
               keel_phase_ms=keel.get("phase_ms"), keel_losses=keel.get("losses"),
               torch_warmup_s=torch_result.get("warmup_s"), torch_compile=torch_result.get("compile"),
               keel_attention=keel.get("attention"), op_profile=keel.get("op_profile"),
               commands={"keel": keel.get("command"), "torch": torch_result.get("command")},
               keel_attempts=keel.get("attempts"), torch_attempts=torch_result.get("attempts"))
    if keel_tps:
        row["keel_timed_with_op_profile"] = True  # keel_runs.py: one run, the profile's events on
    if keel.get("note"):
        row["keel_note"] = keel["note"]
    row["error"] = _errors(("keel", keel.get("error")), ("torch", torch_result.get("error")),
                           ("mfu", "no measured peak" if keel_tps and not peak_tflops else None))
    return row


def attention_row(shape, keel, torch_result):
    keel, torch_result = keel or {"error": "not run"}, torch_result or {"error": "not run"}
    row = empty_attention_row(shape, None)
    row.update({k: v for k, v in keel.items() if k != "error"})
    row.update({k: v for k, v in torch_result.items() if k != "error"})
    row["error"] = _errors(("keel", keel.get("error")), ("torch", torch_result.get("error")))
    return row


def put_row(report, key, row, name_field):
    """Replaces the row of the same name (rows keep their order)."""
    rows = report[key]
    for i, old in enumerate(rows):
        if old[name_field] == row[name_field]:
            rows[i] = row
            return
    rows.append(row)


def _number(value, fmt, scale=None):
    return "-" if value is None else format(value * scale if scale else value, fmt)


def format_table(report):
    """A few dozen lines: the device, each model's tokens/s and MFU, the attention rates, errors."""
    lines = [f"{report.get('gpu')} (driver {report.get('driver')}), CUDA {report.get('cuda')}, "
             f"cuDNN {report.get('cudnn')}, PyTorch {report.get('torch')}; bf16 peak "
             f"{_number(report.get('peak_tflops'), '.1f')} TFLOP/s ({report.get('date')})",
             f"{'model':<10} {'T':>5} {'B':>4} {'keel tok/s':>11} {'MFU':>6} {'torch tok/s':>12} {'MFU':>6} "
             f"{'keel/torch':>10} {'keel ms':>8} {'torch ms':>8} {'keel GiB':>8} {'torch GiB':>9}"]
    gib = 1.0 / 2 ** 30
    for r in report["rows"]:
        lines.append(f"{r['model']:<10} {r['T']:>5} {_number(r.get('micro_batch'), 'd'):>4} "
                     f"{_number(r.get('keel_tokens_per_s'), ',.0f'):>11} {_number(r.get('mfu'), '.1%'):>6} "
                     f"{_number(r.get('torch_compile_tokens_per_s'), ',.0f'):>12} "
                     f"{_number(r.get('torch_mfu'), '.1%'):>6} "
                     f"{_number(r.get('keel_over_torch'), '.2f'):>10} {_number(r.get('keel_step_ms'), '.1f'):>8} "
                     f"{_number(r.get('torch_step_ms'), '.1f'):>8} "
                     f"{_number(r.get('keel_device_memory_bytes'), '.1f', gib):>8} "
                     f"{_number(r.get('torch_device_memory_bytes'), '.1f', gib):>9}")
    lines.append("attention, TFLOP/s (causal counted once: forward 2BT²C, backward 4BT²C)")
    lines.append(f"{'shape':<16} {'B':>3} {'NH/KV':>6} {'keel fwd':>9} {'torch fwd':>9} {'keel bwd':>9} "
                 f"{'torch bwd':>9}  torch kernel")
    for a in report["attention"]:
        lines.append(f"{a['shape']:<16} {a['batch']:>3} {a['n_head']:>3}/{a['n_kv_head']:<2} "
                     f"{_number(a.get('keel_forward_tflops'), '.1f'):>9} "
                     f"{_number(a.get('torch_forward_tflops'), '.1f'):>9} "
                     f"{_number(a.get('keel_backward_tflops'), '.1f'):>9} "
                     f"{_number(a.get('torch_backward_tflops'), '.1f'):>9}  {a.get('torch_sdpa_backend') or ''}")
    for r in report["rows"] + report["attention"]:
        if r.get("error"):
            lines.append(f"error, {r.get('model') or r.get('shape')}: {r['error'][:300]}")
    return "\n".join(lines)
