"""The PyTorch side of the cuda benchmark: the dense bf16 peak, GPT-2 and Llama as a PyTorch user
would write them for speed, and F.scaled_dot_product_attention timed alone.

Both models train as nanoGPT does: fp32 weights under bf16 autocast, torch.compile (mode
default), fused AdamW, F.scaled_dot_product_attention, the classifier tied to the embedding and
the loss over fp32 logits. GPT-2 compiles whole, as the first measurement did (docs/cuda.md).
Llama compiles each decoder block and the head apart (PyTorch's "regional compilation"): its
blocks share one compiled graph, which cuts the cold compile that a lease of minutes cannot
spare, and a block's boundary is only its residual stream, so little fusion is lost. Llama's
projections are stacked (q, k and v in one product; gate and up in another), as Keel's are.
"""
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def peak(device="cuda", n=8192, repeats=20):
    """The dense bf16 rate of an n³ product through torch.matmul (cuBLASLt), the median of
    `repeats` after 3 warm-ups, on random data."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    seconds = statistics.median(_timed(lambda: a @ b, device) for _ in range(repeats))
    return {"peak_tflops": 2 * n ** 3 / seconds / 1e12, "device": _device_name(device), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version()}


def _device_name(device):
    return torch.cuda.get_device_name() if device == "cuda" else device


def _timed(fn, device):
    """Seconds `fn` takes on the device: CUDA events on a GPU, the wall clock elsewhere."""
    if device != "cuda":
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / 1e3


class GPTBlock(nn.Module):
    def __init__(self, m):
        super().__init__()
        C = m.d_model
        self.n_head = m.n_head
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, m.ffn_hidden), nn.Linear(m.ffn_hidden, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        self.wte, self.wpe = nn.Embedding(m.vocab_size, m.d_model), nn.Embedding(m.seq_len, m.d_model)
        nn.init.normal_(self.wte.weight, std=0.02)  # tied: the classifier's logits start small
        self.blocks = nn.ModuleList(GPTBlock(m) for _ in range(m.n_layer))
        self.ln_f = nn.LayerNorm(m.d_model)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.float().view(-1, self.m.vocab_size), targets.view(-1))


def rope_tables(head_dim, seq_len, theta):
    """cos and sin (T, head_dim) in fp32, rotate-half layout (transformers' Llama)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def apply_rope(x, cos, sin):
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos.to(x.dtype) + rotated * sin.to(x.dtype)


class LlamaBlock(nn.Module):
    def __init__(self, m):
        super().__init__()
        C, hd = m.d_model, m.head_dim
        self.n_head, self.n_kv_head, self.head_dim = m.n_head, m.n_kv_head, hd
        self.attn_norm, self.mlp_norm = nn.RMSNorm(C, eps=1e-5), nn.RMSNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, (m.n_head + 2 * m.n_kv_head) * hd, bias=False)
        self.o = nn.Linear(m.n_head * hd, C, bias=False)
        self.gate_up = nn.Linear(C, 2 * m.ffn_hidden, bias=False)
        self.down = nn.Linear(m.ffn_hidden, C, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        hd, kv = self.head_dim, self.n_kv_head * self.head_dim
        q, k, v = self.qkv(self.attn_norm(x)).split([self.n_head * hd, kv, kv], dim=2)
        q = apply_rope(q.view(B, T, self.n_head, hd).transpose(1, 2), cos, sin)
        k = apply_rope(k.view(B, T, self.n_kv_head, hd).transpose(1, 2), cos, sin)
        v = v.view(B, T, self.n_kv_head, hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(y.transpose(1, 2).reshape(B, T, self.n_head * hd))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=2)
        return x + self.down(F.silu(gate) * up)


class LlamaHead(nn.Module):
    """The final norm, the tied classifier and the loss: one region to compile."""
    def __init__(self, m):
        super().__init__()
        self.norm = nn.RMSNorm(m.d_model, eps=1e-5)

    def forward(self, x, classifier, targets):
        logits = F.linear(self.norm(x), classifier)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


class Llama(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.wte = nn.Embedding(m.vocab_size, m.d_model)
        nn.init.normal_(self.wte.weight, std=0.02)
        self.blocks = nn.ModuleList(LlamaBlock(m) for _ in range(m.n_layer))
        self.head = LlamaHead(m)
        cos, sin = rope_tables(m.head_dim, m.seq_len, m.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x, self.cos[:T], self.sin[:T])
        return self.head(x, self.wte.weight, targets)


def compiled(model, how):
    """The callable to train: the whole model compiled, or each block and the head in place."""
    if how == "model":
        return torch.compile(model)
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    for block in model.blocks:
        block.compile()
    model.head.compile()
    return model


def train_bench(m, batch, steps, device="cuda"):
    """Tokens/s of `m` at micro-batch `batch`: the median of `steps` timed steps after 3 warm-up
    steps (whose time, compilation included, is warmup_s)."""
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    with torch.device(device):  # initialised where it trains: 1.2B weights take seconds on a CPU
        model = GPT(m) if m.family == "gpt" else Llama(m)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=device == "cuda")
    forward = compiled(model, m.torch_compile)
    x = torch.randint(0, m.vocab_size, (batch, m.seq_len), device=device)
    y = torch.randint(0, m.vocab_size, (batch, m.seq_len), device=device)
    losses = []

    def step():
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = forward(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    def synchronize():
        if device == "cuda":
            torch.cuda.synchronize()

    start = time.time()
    for _ in range(3):
        step()
    synchronize()
    warmup_s = time.time() - start
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        synchronize()
        times.append(time.perf_counter() - t0)
    seconds = statistics.median(times)
    cuda = device == "cuda"
    return {"micro_batch": batch, "T": m.seq_len, "step_ms": 1e3 * seconds, "tokens_per_s": batch * m.seq_len / seconds,
            "warmup_s": warmup_s, "compile": m.torch_compile, "losses": [float(v) for v in losses],
            "max_memory_allocated_bytes": torch.cuda.max_memory_allocated() if cuda else None,
            "max_memory_reserved_bytes": torch.cuda.max_memory_reserved() if cuda else None,
            "parameters": sum(p.numel() for p in model.parameters()), "torch": torch.__version__}


def sdpa_backend(q, k, v, gqa):
    """The name of the kernel F.scaled_dot_product_attention picks for these inputs."""
    try:
        choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True, enable_gqa=gqa)
        return torch.nn.attention.SDPBackend(choice).name
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return None


def sdpa_rates(shape, flops_forward, flops_backward, device="cuda", repeats=10):
    """F.scaled_dot_product_attention (causal, bf16) forward and backward at `shape`: the median
    of `repeats` timed calls after 3 warm-ups, as TFLOP/s at the given counts."""
    torch.manual_seed(0)
    B, T, hs = shape.batch, shape.seq_len, shape.head_size
    gqa = shape.n_kv_head < shape.n_head

    def tensor(heads):
        return torch.randn(B, heads, T, hs, device=device, dtype=torch.bfloat16, requires_grad=True)

    q, k, v = tensor(shape.n_head), tensor(shape.n_kv_head), tensor(shape.n_kv_head)
    grad = torch.randn(B, shape.n_head, T, hs, device=device, dtype=torch.bfloat16)

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)

    def backward_seconds():
        out = forward()
        q.grad = k.grad = v.grad = None
        return _timed(lambda: out.backward(grad), device)

    for _ in range(3):  # with autograd on, as in training: the forward keeps what the backward needs
        forward()
    forward_s = statistics.median(_timed(forward, device) for _ in range(repeats))
    for _ in range(3):
        backward_seconds()
    backward_s = statistics.median(backward_seconds() for _ in range(repeats))
    return {"torch_forward_tflops": flops_forward / forward_s / 1e12,
            "torch_backward_tflops": flops_backward / backward_s / 1e12,
            "torch_sdpa_backend": sdpa_backend(q, k, v, gqa)}

