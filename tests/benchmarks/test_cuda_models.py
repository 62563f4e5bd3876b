"""The host side of benchmarks/cuda_models.py, which otherwise runs only on a lent GPU: the FLOP
and MFU arithmetic against hand-worked numbers (GPT-2's against docs/cuda.md's measured run), the
op profile parser against the table as the cuda backend logs it, attention's rate by difference,
and the report, where a part that failed keeps its row with nulls and an error. No GPU, no torch.
"""
import json
import os
import stat
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks"))
from cuda_bench import keel_runs, op_profile, report, shapes  # noqa: E402

GPT2, LLAMA = shapes.MODELS["gpt2-124m"], shapes.MODELS["llama-1b"]


def test_gpt2_flops_match_the_measured_run_in_docs():
    # wte 50257·768, and per block c_attn 768·2304 + attn proj 768² + fc 768·3072 + proj 3072·768
    assert shapes.matmul_weights(GPT2) == 50257 * 768 + 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072) == 123_532_032
    assert shapes.flops_per_token(GPT2) == 6 * 123_532_032 + 12 * 12 * 768 * 1024 == 854_438_400
    # docs/cuda.md, third run: 772.6 TFLOP/s peak; Keel 370,435 tok/s = 41.0%, PyTorch 495,088 = 54.8%
    assert round(100 * shapes.mfu(370_435, GPT2, 772.6), 1) == 41.0
    assert round(100 * shapes.mfu(495_088, GPT2, 772.6), 1) == 54.8
    assert shapes.mfu(None, GPT2, 772.6) is None and shapes.mfu(1.0, GPT2, None) is None


def test_llama_1b_flops_count_grouped_query_projections_at_their_width():
    per_layer = 2048 * 2048 + 2 * 2048 * 512 + 2048 * 2048 + 3 * 2048 * 8192  # q, k+v (8 heads of 64), o, SwiGLU
    assert per_layer == 60_817_408
    assert shapes.matmul_weights(LLAMA) == 16 * per_layer + 128256 * 2048 == 1_235_746_816
    assert shapes.flops_per_token(LLAMA) == 6 * 1_235_746_816 + 12 * 16 * 2048 * 2048 == 8_219_787_264


def test_attention_flops_count_causal_work_once():
    mha = shapes.ATTENTION_SHAPES[0]
    assert (mha.head_size, mha.seq_len, mha.width, mha.batch) == (64, 1024, 1024, 16)
    assert shapes.attention_flops(mha) == 2 * 16 * 1024 ** 2 * 1024 == 34_359_738_368
    assert shapes.attention_flops(mha, backward=True) == 2 * shapes.attention_flops(mha)
    gqa = shapes.ATTENTION_SHAPES[-1]
    assert gqa.name == "gqa hs64 T2048" and gqa.width == 2048 and gqa.forward_op == "attention_gqa_forward_dt"
    assert all(s.batch * s.seq_len == 16384 for s in shapes.ATTENTION_SHAPES)


# As plugins/backend-cuda/op_profile.cpp formats it, with the logger's prefix, among other lines.
LOG = """\
[keel] info: step 4/4 | loss 7.1
[backend cuda] info: op profile (GPU time per slot, CUDA events on the stream):
[backend cuda] info: op                              calls      GPU ms   share      TFLOP   TFLOP/s   %peak
[backend cuda] info: matmul_backward_dt                196     520.700   26.0%    259.150     497.7   64.4%
[backend cuda] info: attention_backward_dt              48     340.100   17.0%     19.790      58.2    7.5%
[keel] info: checkpoint saved
[backend cuda] info: copy                              631     305.000   15.2%      0.000         -       -
[backend cuda] info: attention_forward_dt               60     118.900    5.9%     12.370     104.0   13.5%
[backend cuda] info: total                             935    2003.200  100.0%    291.310     145.4   18.8%
[keel] info: done
"""


def test_op_profile_table_is_parsed_by_its_header():
    rows = op_profile.parse_log(LOG)
    assert list(rows) == ["matmul_backward_dt", "attention_backward_dt", "copy", "attention_forward_dt", "total"]
    assert rows["attention_forward_dt"] == {"calls": 60, "gpu_ms": 118.9, "share_pct": 5.9, "tflop": 12.37,
                                            "tflop_per_s": 104.0, "peak_pct": 13.5}
    assert rows["copy"]["tflop_per_s"] is None and rows["copy"]["peak_pct"] is None
    assert rows["total"]["share_pct"] == 100.0
    assert len(op_profile.profile_lines(LOG)) == 6  # header, four rows, total; not the keel lines


def test_op_profile_takes_the_last_table_and_none_is_empty():
    second = LOG.replace("     60     118.900", "     99     118.900")
    assert op_profile.parse_log(LOG + second)["attention_forward_dt"]["calls"] == 99
    assert op_profile.parse_log("[keel] info: no profile\n") == {}


def test_attention_rate_by_difference_cancels_set_up():
    per_call = 3.0e10
    short = {"calls": 4, "gpu_ms": 300.0 + 4 * 0.15}  # 300 ms of set-up in the first call, then 200 TFLOP/s
    long = {"calls": 404, "gpu_ms": 300.0 + 404 * 0.15}
    rate, why = keel_runs.differenced_rate(short, long, per_call)
    assert why is None and rate == pytest.approx(200.0)
    assert keel_runs.differenced_rate(long, short, per_call)[0] is None
    assert keel_runs.differenced_rate(None, long, per_call) == (None, "the op profile has no such row")
    assert keel_runs.long_steps(3.0) == 500 and keel_runs.long_steps(1000.0) == 13  # capped; at least 10 more


def test_steps_after_the_third_and_a_cut_line(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    records = [{"step": s, "loss": 1.0, "tokens_per_s": 100.0 * s, "step_ms": 10.0 * s, "mfu": 0.1,
                "memory_bytes": 7, "time_ms": {"forward": 1.0}} for s in range(1, 9)]
    metrics.write_text(json.dumps({"run": "header"}) + "\n" + "".join(json.dumps(r) + "\n" for r in records) +
                       '{"step": 9, "tok')
    steps = keel_runs.read_steps(str(metrics))
    summary = keel_runs.summarize_steps(steps)
    assert len(steps) == 8 and summary["timed_steps"] == 5
    assert summary["tokens_per_s"] == 600.0 and summary["step_ms"] == 60.0  # steps 4..8
    assert keel_runs.summarize_steps(steps[:3]) is None
    assert keel_runs.read_steps(str(tmp_path / "missing.jsonl")) == []


REQUIRED = ["model", "T", "micro_batch", "keel_tokens_per_s", "torch_compile_tokens_per_s", "mfu"]


def test_report_rows_start_as_nulls_with_an_error():
    rep = report.new_report("2026-11-29")
    assert [r["model"] for r in rep["rows"]] == ["gpt2-124m", "llama-1b"]
    for row in rep["rows"]:
        assert list(row)[:6] == REQUIRED and row["error"] == "not run"
        assert all(row[k] is None for k in REQUIRED[2:])
    assert len(rep["attention"]) == len(shapes.ATTENTION_SHAPES)
    assert all(a["keel_forward_tflops"] is None and a["error"] == "not run" for a in rep["attention"])


def test_a_failed_side_leaves_nulls_and_its_error():
    keel = {"micro_batch": 128, "tokens_per_s": 370_435.0, "step_ms": 353.8, "error": None}
    row = report.model_row(GPT2, keel, {"error": "micro-batch 128: exit 1: CUDA out of memory"}, 772.6)
    assert row["keel_tokens_per_s"] == 370_435.0 and round(row["mfu"], 3) == 0.410
    assert row["torch_compile_tokens_per_s"] is None and row["torch_mfu"] is None and row["keel_over_torch"] is None
    assert row["error"] == "torch: micro-batch 128: exit 1: CUDA out of memory"
    row = report.model_row(LLAMA, None, None, None)
    assert all(row[k] is None for k in REQUIRED[2:]) and row["error"] == "keel: not run; torch: not run"
    row = report.model_row(GPT2, keel, {"tokens_per_s": 495_088.0, "micro_batch": 128}, None)
    assert row["mfu"] is None and row["error"] == "mfu: no measured peak"
    assert row["keel_over_torch"] == pytest.approx(0.748, abs=1e-3)


def test_a_failing_keel_gives_an_error_row(tmp_path):
    keel = tmp_path / "keel"
    keel.write_text("#!/bin/sh\necho 'keel: error: creating backend cuda failed: no CUDA device'\nexit 1\n")
    keel.chmod(keel.stat().st_mode | stat.S_IEXEC)
    result = keel_runs.model_bench(str(keel), GPT2, 772.6, str(tmp_path), 60)
    assert "tokens_per_s" not in result and [a["micro_batch"] for a in result["attempts"]] == [128, 64]
    assert result["error"].startswith("micro-batch 128: exit 1: keel: error: creating backend cuda failed")
    row = report.model_row(GPT2, result, {"error": "not run"}, 772.6)
    assert row["micro_batch"] is None and row["keel_tokens_per_s"] is None and row["mfu"] is None
    assert "keel: micro-batch 128: exit 1" in row["error"]


def test_report_is_written_continued_and_tabled(tmp_path):
    path = report.report_path(str(tmp_path), seconds=0)
    assert os.path.basename(path) == "cuda-1970-01-01.json"
    rep = report.load_or_new(path)
    assert rep["date"] == "1970-01-01"
    rep["peak_tflops"] = 772.6
    report.put_row(rep, "rows", report.model_row(GPT2, {"tokens_per_s": 1.0, "micro_batch": 128}, None, 772.6), "model")
    report.write(path, rep)
    assert report.report_path(str(tmp_path)) == path  # a later part continues this file
    again = report.load_or_new(path)
    assert again["rows"][0]["keel_tokens_per_s"] == 1.0 and again["rows"][1]["error"] == "not run"
    table = report.format_table(again)
    assert "gpt2-124m" in table and "error, llama-1b: not run" in table and "772.6" in table
