"""GPT-2 in plain PyTorch, written from the paper and llm.c's train_gpt2.py, as the oracle
Keel's gpt plugin is tested against. It takes Keel's parameter names and layouts exactly
(linear weights (out, in), fused qkv with q, k, v side by side, wte padded to a multiple of
128 rows and tied to the lm_head), so a probe's tensors load without any renaming. No
`transformers`: the point is an implementation independent of both Keel and Hugging Face.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F

LAYERNORM_EPS = 1e-5  # GPT-2's


def padded_vocab(vocab_size):
    return (vocab_size + 127) // 128 * 128


def param_names(n_layer):
    """Keel's gpt param specs, in spec order."""
    names = ["wte", "wpe"]
    for i in range(n_layer):
        h = f"h.{i}."
        names += [h + s for s in (
            "ln_1.weight", "ln_1.bias", "attn.qkv.weight", "attn.qkv.bias", "attn.proj.weight",
            "attn.proj.bias", "ln_2.weight", "ln_2.bias", "mlp.fc.weight", "mlp.fc.bias",
            "mlp.proj.weight", "mlp.proj.bias")]
    return names + ["ln_f.weight", "ln_f.bias"]


def gelu_tanh(x):
    """GPT-2's GELU: 0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def linear(x, weight, bias, module, qat=None):
    """x @ weightᵀ + bias; `qat` (quantization-aware training: .weight(w, module) and .input(x,
    module)) fake-quantizes what the linear multiplies."""
    if qat is not None:
        x, weight = qat.input(x, module), qat.weight(weight, module)
    return x @ weight.T + bias


def causal_self_attention(x, qkv_weight, qkv_bias, proj_weight, proj_bias, n_head, qat=None):
    B, T, C = x.shape
    hs = C // n_head
    # Keel declares qkv (3, C, C) and its bias (3, C); as one matrix they are (3C, C) and (3C).
    qkv = linear(x, qkv_weight.reshape(3 * C, C), qkv_bias.reshape(3 * C), "c_attn", qat)  # (B,T,3C)
    q, k, v = qkv.split(C, dim=2)                          # each (B,T,C) = (B,T,NH,hs)
    q = q.view(B, T, n_head, hs).transpose(1, 2)           # (B,NH,T,hs)
    k = k.view(B, T, n_head, hs).transpose(1, 2)
    v = v.view(B, T, n_head, hs).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)     # (B,NH,T,T)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    y = torch.softmax(scores, dim=-1) @ v                  # (B,NH,T,hs)
    y = y.transpose(1, 2).contiguous().view(B, T, C)       # (B,T,C)
    return linear(y, proj_weight, proj_bias, "c_proj", qat)


def block(x, p, prefix, n_head, qat=None):
    C = x.shape[-1]
    h = F.layer_norm(x, (C,), p[prefix + "ln_1.weight"], p[prefix + "ln_1.bias"], LAYERNORM_EPS)
    x = x + causal_self_attention(h, p[prefix + "attn.qkv.weight"], p[prefix + "attn.qkv.bias"],
                                  p[prefix + "attn.proj.weight"], p[prefix + "attn.proj.bias"], n_head, qat)
    h = F.layer_norm(x, (C,), p[prefix + "ln_2.weight"], p[prefix + "ln_2.bias"], LAYERNORM_EPS)
    h = gelu_tanh(linear(h, p[prefix + "mlp.fc.weight"], p[prefix + "mlp.fc.bias"], "c_fc", qat))   # (B,T,4C)
    return x + linear(h, p[prefix + "mlp.proj.weight"], p[prefix + "mlp.proj.bias"], "c_proj", qat)


def forward(params, tokens, config, targets=None, qat=None):
    """params: name -> tensor (Keel's names and shapes). tokens, targets: (B,T) int64.
    Returns (logits (B,T,Vp), loss or None): the mean cross-entropy over targets >= 0, with
    the softmax over the true vocabulary only (the padded columns are not classes)."""
    B, T = tokens.shape
    V = config["vocab_size"]
    x = params["wte"][tokens] + params["wpe"][:T]          # (B,T,C)
    for i in range(config["n_layer"]):
        x = block(x, params, f"h.{i}.", config["n_head"], qat)
    C = x.shape[-1]
    x = F.layer_norm(x, (C,), params["ln_f.weight"], params["ln_f.bias"], LAYERNORM_EPS)
    logits = x @ params["wte"].T                           # (B,T,Vp): the lm_head is wte
    if targets is None:
        return logits, None
    flat_targets = targets.reshape(-1)
    valid = flat_targets >= 0
    log_probs = torch.log_softmax(logits[..., :V].reshape(B * T, V), dim=-1)
    picked = log_probs[valid, flat_targets[valid]]
    loss = -picked.sum() / valid.sum()
    return logits, loss


def make_params(numpy_weights, dtype=torch.float32):
    """Leaf tensors that require grad, from a dict of numpy arrays."""
    return {name: torch.tensor(np.asarray(a), dtype=dtype, requires_grad=True)
            for name, a in numpy_weights.items()}


def loss_and_grads(numpy_weights, tokens, targets, config, dtype=torch.float32, qat=None):
    """(logits, loss, {name: grad}) of the mean loss, all as numpy."""
    params = make_params(numpy_weights, dtype)
    logits, loss = forward(params, torch.as_tensor(tokens, dtype=torch.long), config,
                           torch.as_tensor(targets, dtype=torch.long), qat)
    loss.backward()
    grads = {name: p.grad.detach().numpy() for name, p in params.items()}
    return logits.detach().numpy(), float(loss), grads


def train_adamw(numpy_weights, batches, config, lr, betas, eps, weight_decay, no_decay,
                dtype=torch.float32, qat=None):
    """Losses of len(batches) AdamW steps (constant lr, no clipping); step i trains on batch i.
    Parameters named in no_decay get weight decay 0, the rest `weight_decay` (decoupled, as
    torch.optim.AdamW does: p -= lr·wd·p)."""
    params = make_params(numpy_weights, dtype)
    no_decay = set(no_decay)
    groups = [
        {"params": [p for n, p in params.items() if n not in no_decay], "weight_decay": weight_decay},
        {"params": [p for n, p in params.items() if n in no_decay], "weight_decay": 0.0},
    ]
    return train(params, batches, config, torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps), qat)


def train(params, batches, config, optimizer, qat=None):
    """Losses of len(batches) steps of `optimizer` over the tensors `params` (from make_params);
    step i trains on batch i."""
    losses = []
    for tokens, targets in batches:
        optimizer.zero_grad(set_to_none=True)
        _, loss = forward(params, torch.as_tensor(tokens, dtype=torch.long), config,
                          torch.as_tensor(targets, dtype=torch.long), qat)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return np.array(losses)
