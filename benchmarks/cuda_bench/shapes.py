"""What the cuda benchmark measures and how it counts FLOPs; pure arithmetic, no torch.

MFU counts 6N + 12·L·C·T FLOPs a token, as llm.c and Keel's progress line do: N the matmul
weights, the classifier included (embedding lookups and norms are not products), and C the width
attention works at, n_head·head_dim. Grouped-query attention's smaller key and value projections
count at their own width. The benchmark computes MFU itself from this count, so that Keel's and
PyTorch's columns use one formula, against the bf16 peak measured in the same session.

Attention alone counts its causal work once, as the cuda backend's op_profile does: forward
2·B·T²·C, backward 4·B·T²·C, the scores the backward recomputes not counted.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    name: str            # the row's name in the report
    family: str          # "gpt" or "llama": Keel's model plugin and the PyTorch baseline's class
    config: str          # Keel's config, a file name in benchmarks/
    n_layer: int
    d_model: int
    n_head: int
    n_kv_head: int
    ffn_hidden: int
    vocab_size: int
    seq_len: int
    micro_batches: tuple  # tried in order until one fits
    keel_steps: int       # tokens/s is the median of the steps after the third
    torch_steps: int      # timed, after 3 warm-up steps (torch.compile's compilation)
    torch_compile: str    # "model": the whole model in one graph; "blocks": each block (see torch_models.py)
    keel_seconds: int     # Keel's share of the model's time limit; PyTorch's compilation takes the rest
    rope_theta: float = 0.0

    @property
    def head_dim(self):
        return self.d_model // self.n_head

    @property
    def attention_width(self):
        return self.n_head * self.head_dim


MODELS = {
    "gpt2-124m": ModelShape("gpt2-124m", "gpt", "gpt2_124m_cuda.json", n_layer=12, d_model=768, n_head=12,
                            n_kv_head=12, ffn_hidden=3072, vocab_size=50257, seq_len=1024, micro_batches=(128, 64),
                            keel_steps=10, torch_steps=10, torch_compile="model", keel_seconds=50),
    # Llama 3.2 1B's shape (tied embeddings, grouped-query 32/8, SwiGLU 8192).
    "llama-1b": ModelShape("llama-1b", "llama", "llama_1b_cuda.json", n_layer=16, d_model=2048, n_head=32,
                           n_kv_head=8, ffn_hidden=8192, vocab_size=128256, seq_len=2048, micro_batches=(8, 4),
                           keel_steps=8, torch_steps=8, torch_compile="blocks", keel_seconds=70,
                           rope_theta=500000.0),
}


def matmul_weights(m):
    """N: every weight a product reads, per token once."""
    C, kv_width = m.d_model, m.n_kv_head * m.head_dim
    attention = C * m.attention_width + 2 * C * kv_width + m.attention_width * C  # q, k, v, output
    mlp = (2 if m.family == "gpt" else 3) * C * m.ffn_hidden  # fc and proj; or gate, up and down
    return m.vocab_size * C + m.n_layer * (attention + mlp)


def flops_per_token(m):
    return 6.0 * matmul_weights(m) + 12.0 * m.n_layer * m.attention_width * m.seq_len


def mfu(tokens_per_s, model, peak_tflops):
    """The fraction of the peak; None when either figure is missing."""
    if tokens_per_s is None or not peak_tflops:
        return None
    return tokens_per_s * flops_per_token(model) / (peak_tflops * 1e12)


@dataclass(frozen=True)
class AttentionShape:
    family: str      # "gpt" (attention_forward_dt, every head its keys) or "llama" (attention_gqa_*)
    head_size: int
    seq_len: int
    n_head: int
    n_kv_head: int
    batch: int

    @property
    def name(self):
        kind = "gqa" if self.n_kv_head < self.n_head else "mha"
        return f"{kind} hs{self.head_size} T{self.seq_len}"

    @property
    def width(self):
        return self.n_head * self.head_size

    @property
    def forward_op(self):
        return "attention_gqa_forward_dt" if self.family == "llama" else "attention_forward_dt"

    @property
    def backward_op(self):
        return "attention_gqa_backward_dt" if self.family == "llama" else "attention_backward_dt"


# In the order they are measured: each B·T is 16,384 tokens. The last is llama-1b's attention.
ATTENTION_SHAPES = (
    AttentionShape("gpt", 64, 1024, 16, 16, 16),
    AttentionShape("gpt", 64, 4096, 16, 16, 4),
    AttentionShape("gpt", 128, 1024, 16, 16, 16),
    AttentionShape("gpt", 128, 4096, 16, 16, 4),
    AttentionShape("llama", 64, 2048, 32, 8, 8),
)


def attention_flops(shape, backward=False):
    """One call's counted FLOPs: causal, so half of the full 4·B·T²·C (forward) or 8·B·T²·C."""
    return (4.0 if backward else 2.0) * shape.batch * shape.seq_len ** 2 * shape.width
