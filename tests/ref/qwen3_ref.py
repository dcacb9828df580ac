#!/usr/bin/env python3
"""An independent numpy implementation of the Hugging Face Qwen3 / Qwen3-MoE
forward (modeling_qwen3.py, modeling_qwen3_moe.py semantics), used to check
longtail's forward.  Reads a checkpoint directory (config.json +
model.safetensors in F32/BF16/F16) and prints, for each input line
{"tokens": [...]}, {"logprobs": [...], "routing_confidence": x}.

    python3 tests/ref/qwen3_ref.py MODEL_DIR < lines.jsonl
"""
import json, struct, sys
import numpy as np


def load_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = data[base + b:base + en]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit("unsupported dtype " + e["dtype"])
        out[name] = a.reshape(e["shape"]).astype(np.float64)
    return out


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def forward(cfg, W, tokens):
    T = len(tokens)
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim") or D // H
    eps = cfg.get("rms_norm_eps", 1e-6)
    theta = cfg.get("rope_theta", 10000.0)
    L = cfg["num_hidden_layers"]
    moe_type = cfg["model_type"] == "qwen3_moe"
    E = cfg.get("num_experts", 0) if moe_type else 0
    step = cfg.get("decoder_sparse_step", 1) or 1
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    window = cfg.get("sliding_window") or 0
    types = cfg.get("layer_types")
    if not types:
        mwl = cfg.get("max_window_layers", 0) or 0
        types = ["sliding_attention" if cfg.get("use_sliding_window") and window and i >= mwl else "full_attention"
                 for i in range(L)]
    inv = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    freqs = np.outer(np.arange(T, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb)[:, None, :], np.sin(emb)[:, None, :]
    x = W["model.embed_tokens.weight"][tokens]
    conf, nconf = 0.0, 0
    for l in range(L):
        p = "model.layers.%d." % l
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hd)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hd)
        q = rmsnorm(q, W[p + "self_attn.q_norm.weight"], eps)
        k = rmsnorm(k, W[p + "self_attn.k_norm.weight"], eps)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = H // KV
        k = np.repeat(k, rep, axis=1)
        v = np.repeat(v, rep, axis=1)
        i, j = np.arange(T)[:, None], np.arange(T)[None, :]
        allowed = j <= i
        if types[l] == "sliding_attention":
            allowed &= (i - j) < window
        s = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(hd)
        s = np.where(allowed[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hij,jhd->ihd", s, v).reshape(T, H * hd)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        silu = lambda z: z / (1 + np.exp(-z))
        if moe_type and E > 0 and l not in mlp_only and (l + 1) % step == 0:
            k_ = cfg["num_experts_per_tok"]
            logits = h @ W[p + "mlp.gate.weight"].T
            pr = np.exp(logits - logits.max(-1, keepdims=True))
            pr /= pr.sum(-1, keepdims=True)
            top = np.argsort(-pr, axis=-1, kind="stable")[:, :k_]
            wts = np.take_along_axis(pr, top, -1)
            conf += wts.sum(-1).sum()
            nconf += T
            if cfg.get("norm_topk_prob", False):
                wts = wts / wts.sum(-1, keepdims=True)
            out = np.zeros_like(h)
            for t in range(T):
                for s_ in range(k_):
                    e = top[t, s_]
                    pe = p + "mlp.experts.%d." % e
                    a = silu(h[t] @ W[pe + "gate_proj.weight"].T) * (h[t] @ W[pe + "up_proj.weight"].T)
                    out[t] += wts[t, s_] * (a @ W[pe + "down_proj.weight"].T)
            x = x + out
        else:
            a = silu(h @ W[p + "mlp.gate_proj.weight"].T) * (h @ W[p + "mlp.up_proj.weight"].T)
            x = x + a @ W[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    logits = x @ head.T
    m = logits.max(-1, keepdims=True)
    lse = m + np.log(np.exp(logits - m).sum(-1, keepdims=True))
    lp = logits - lse
    out = [0.0] + [float(lp[t - 1, tokens[t]]) for t in range(1, T)]
    return out, (conf / nconf if nconf else None)


def main():
    d = sys.argv[1]
    cfg = json.load(open(d + "/config.json"))
    W = load_safetensors(d + "/model.safetensors")
    for line in sys.stdin:
        if line.strip():
            toks = json.loads(line)["tokens"]
            lp, conf = forward(cfg, W, toks)
            print(json.dumps({"logprobs": lp, "routing_confidence": conf}))


main()
