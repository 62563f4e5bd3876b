#!/usr/bin/env python3
"""GPT-2 124M at T = 1024 in bf16 on one GPU: Keel's cuda backend against PyTorch, in one session.

  gpt2_cuda.py peak                      the dense bf16 peak: an 8192³ product through torch.matmul
                                         (cuBLASLt), the median of 20 timed after 3 warm-ups, on
                                         random data
  gpt2_cuda.py keel KEEL --peak TFLOPS   Keel on benchmarks/gpt2_124m_cuda.json at the largest
                                         micro-batch of --batches that fits, then a short run of
                                         that batch with the cuda backend's op_profile (the
                                         per-op GPU time table)
  gpt2_cuda.py torch --batch B           the same model in PyTorch: torch.compile,
                                         F.scaled_dot_product_attention (flash), fused AdamW,
                                         bf16 autocast over fp32 weights, vocabulary 50257 as Keel's
  gpt2_cuda.py all KEEL [--out DIR]      the three in turn, each in its own process (so none holds
                                         GPU memory while another runs), and one table

Tokens/s is the median over the steps after the first three; MFU counts 6N + 12·L·C·T FLOPs a
token (N the matmul weights, as Keel's progress line and llm.c count) against the measured peak.
Every figure is printed with the command that made it. Needs a CUDA GPU and python3 with torch.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG = os.path.join(HERE, "gpt2_124m_cuda.json")
L, C, NH, V, T = 12, 768, 12, 50257, 1024


def flops_per_token():
    matmul_weights = V * C + L * (C * 3 * C + C * C + C * 4 * C + 4 * C * C)
    return 6.0 * matmul_weights + 12.0 * L * C * T


def peak():
    import torch
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(20):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        a @ b
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    tflops = 2 * n ** 3 / statistics.median(times) / 1e12
    print(json.dumps({"peak_tflops": tflops, "device": torch.cuda.get_device_name(),
                      "torch": torch.__version__, "cuda": torch.version.cuda}))


def read_steps(metrics):
    records = [json.loads(line) for line in open(metrics)]
    steps = [r for r in records if "tokens_per_s" in r and "step" in r]
    timed = [r for r in steps if r["step"] > 3] or steps
    return steps, timed


def run_logged(cmd, workdir, log_name, timeout):
    """Runs cmd, writes its command and output to workdir/log_name; (exit status, output), 124 on
    a timeout."""
    try:
        proc = subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=timeout)
        rc, log = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, log = 124, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log += f"\n(timed out after {timeout} s)"
    open(os.path.join(workdir, log_name), "w").write(" ".join(cmd) + "\n" + log)
    return rc, log


def keel(args):
    workdir = os.path.abspath(args.workdir)
    os.makedirs(workdir, exist_ok=True)
    result = {"attempts": []}
    for batch in [int(b) for b in args.batches.split(",")]:
        metrics = os.path.join(workdir, f"b{batch}", "metrics.jsonl")
        cmd = [args.keel, "run", CONFIG, "--set", f"data.micro_batch={batch}", "--set", f"data.global_batch={batch}",
               "--set", f"train.steps={args.steps}", "--set", f"backend.peak_tflops={args.peak}",
               "--set", f"train.metrics_path={metrics}",
               "--set", f"train.checkpoint.dir={os.path.join(workdir, f'b{batch}', 'checkpoints')}"]
        start = time.time()
        rc, log = run_logged(cmd, workdir, f"keel-b{batch}.log", args.timeout)
        attempt = {"batch": batch, "rc": rc, "seconds": round(time.time() - start, 1)}
        result["attempts"].append(attempt)
        if rc != 0:
            attempt["error"] = log.strip().splitlines()[-1] if log.strip() else ""
            print(f"keel micro-batch {batch}: exit {rc}: {attempt['error']}", flush=True)
            continue
        steps, timed = read_steps(metrics)
        result.update(batch=batch, command=" ".join(cmd),
                      tokens_per_s=statistics.median(r["tokens_per_s"] for r in timed),
                      mfu=statistics.median(r["mfu"] for r in timed),
                      step_ms=statistics.median(r["step_ms"] for r in timed),
                      losses=[r["loss"] for r in steps],
                      phase_ms={k: statistics.median(r["time_ms"][k] for r in timed) for k in timed[0]["time_ms"]},
                      memory_bytes=timed[-1].get("memory_bytes"))
        print(f"keel micro-batch {batch}: {result['tokens_per_s']:.0f} tok/s, MFU {100 * result['mfu']:.1f}%, "
              f"{result['step_ms']:.1f} ms a step", flush=True)
        print(json.dumps(result), flush=True)  # kept if a later, optional run times out
        profile_cmd = cmd + ["--set", "backend.op_profile=true", "--set", "train.steps=4",
                             "--set", f"train.metrics_path={metrics}.profile"]
        _, log = run_logged(profile_cmd, workdir, "keel-op-profile.log", args.timeout)
        result["op_profile"] = [line.split("info: ", 1)[-1] for line in log.splitlines()
                                if "backend cuda" in line and ("info: " in line)][-40:]
        # The same run with the nccl communicator, whose reach is the GPU's memory: a world of one
        # then moves no gradient through host memory (the default mpi one stages every buffer).
        nccl_cmd = cmd + ["--set", 'comm={"plugin": "nccl"}', "--set", f"train.metrics_path={metrics}.nccl"]
        if run_logged(nccl_cmd, workdir, "keel-nccl.log", args.timeout)[0] == 0:
            _, timed_nccl = read_steps(metrics + ".nccl")
            result["nccl"] = {"command": " ".join(nccl_cmd),
                              "tokens_per_s": statistics.median(r["tokens_per_s"] for r in timed_nccl),
                              "step_ms": statistics.median(r["step_ms"] for r in timed_nccl)}
        break
    print(json.dumps(result))


def torch_bench(args):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

        def forward(self, x):
            B, Tn, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, Tn, NH, C // NH).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, Tn, C))
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.ln_f = nn.LayerNorm(C)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)
            return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    model = GPT().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    compiled = torch.compile(model)
    batch = args.batch
    x = torch.randint(0, V, (batch, T), device="cuda")
    y = torch.randint(0, V, (batch, T), device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = compiled(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    start = time.time()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm = time.time() - start
    times = []
    for _ in range(args.steps):
        t0 = time.time()
        step()
        torch.cuda.synchronize()
        times.append(time.time() - t0)
    seconds = statistics.median(times)
    print(json.dumps({"batch": batch, "step_ms": 1e3 * seconds, "tokens_per_s": batch * T / seconds,
                      "warmup_s": warm, "max_memory_bytes": torch.cuda.max_memory_allocated(),
                      "torch": torch.__version__}))


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def run_part(argv, timeout, out, name):
    start = time.time()
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), *argv], capture_output=True, text=True,
                              timeout=timeout)
        text, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        text, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), 124
    open(os.path.join(out, f"{name}.log"), "w").write(text)
    print(f"[{name}: exit {rc} in {time.time() - start:.0f} s]", flush=True)
    # A part that timed out keeps what it printed before (the keel part: its main run's figures).
    return last_json(text) if rc in (0, 124) else None


def all_parts(args):
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    me = f"python3 benchmarks/{os.path.basename(__file__)}"
    p = run_part(["peak"], 60, out, "peak")
    if not p:
        raise SystemExit("the peak measurement failed (see peak.log)")
    print(f"peak: {p['peak_tflops']:.1f} TFLOP/s bf16 on {p['device']} ({me} peak)", flush=True)
    k = run_part(["keel", args.keel, "--peak", f"{p['peak_tflops']:.1f}", "--batches", args.batches,
                  "--workdir", os.path.join(out, "keel")], args.keel_timeout, out, "keel") or {}
    batch = k.get("batch") or int(args.batches.split(",")[-1])
    t = None
    while batch >= 1 and t is None:
        t = run_part(["torch", "--batch", str(batch)], args.torch_timeout, out, f"torch-b{batch}")
        if t is None:
            batch //= 2
    fpt = flops_per_token()
    peak_flops = p["peak_tflops"] * 1e12
    rows = [("cuBLASLt bf16 8192³ (torch.matmul)", "-", f"{p['peak_tflops']:.1f} TFLOP/s", "100%")]
    if "tokens_per_s" in k:
        rows.append((f"Keel cuda bf16, micro-batch {k['batch']}", f"{k['step_ms']:.1f}",
                     f"{k['tokens_per_s']:.0f} tok/s", f"{100 * k['tokens_per_s'] * fpt / peak_flops:.1f}%"))
    else:
        rows.append(("Keel cuda bf16", "-", "failed: " + "; ".join(
            f"B={a['batch']}: {a.get('error', '')}" for a in k.get("attempts", [])), "-"))
    if "nccl" in k:
        n = k["nccl"]
        rows.append((f"Keel cuda bf16, micro-batch {k['batch']}, nccl comm", f"{n['step_ms']:.1f}",
                     f"{n['tokens_per_s']:.0f} tok/s", f"{100 * n['tokens_per_s'] * fpt / peak_flops:.1f}%"))
    if t:
        rows.append((f"PyTorch compile + SDPA + fused AdamW, micro-batch {t['batch']}", f"{t['step_ms']:.1f}",
                     f"{t['tokens_per_s']:.0f} tok/s", f"{100 * t['tokens_per_s'] * fpt / peak_flops:.1f}%"))
    summary = {"peak": p, "keel": k, "torch": t, "flops_per_token": fpt}
    json.dump(summary, open(os.path.join(out, "gpt2_cuda.json"), "w"), indent=1)
    print(f"\nGPT-2 124M, T {T}, bf16, {p['device']}; MFU = tokens/s × {fpt / 1e6:.1f} MFLOP / measured peak")
    for row in rows:
        print(f"  {row[0]:<58} {row[1]:>9} ms  {row[2]:>16}  MFU {row[3]}")
    if "tokens_per_s" in k and t:
        print(f"  Keel / PyTorch compile: {k['tokens_per_s'] / t['tokens_per_s']:.2f}×")
    for line in k.get("op_profile", []):
        print("  " + line)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="part", required=True)
    sub.add_parser("peak")
    pk = sub.add_parser("keel")
    pk.add_argument("keel")
    pk.add_argument("--peak", type=float, required=True)
    pk.add_argument("--batches", default="128,64,32,16")
    pk.add_argument("--steps", type=int, default=8)
    pk.add_argument("--timeout", type=int, default=60)
    pk.add_argument("--workdir", default="runs/gpt2_cuda")
    pt = sub.add_parser("torch")
    pt.add_argument("--batch", type=int, required=True)
    pt.add_argument("--steps", type=int, default=10)
    pa = sub.add_parser("all")
    pa.add_argument("keel")
    pa.add_argument("--out", default="runs/gpt2_cuda")
    pa.add_argument("--batches", default="128,64,32,16")
    pa.add_argument("--keel-timeout", type=int, default=110)
    pa.add_argument("--torch-timeout", type=int, default=100)
    args = parser.parse_args()
    {"peak": lambda: peak(), "keel": lambda: keel(args), "torch": lambda: torch_bench(args),
     "all": lambda: all_parts(args)}[args.part]()


if __name__ == "__main__":
    main()
