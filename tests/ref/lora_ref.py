#!/usr/bin/env python3
"""An independent float64 PyTorch implementation of a Qwen3 / Qwen3-MoE forward with PEFT LoRA adapters
(y = x·Wᵀ + (lora_alpha / r)·(x·Aᵀ)·Bᵀ on every module adapter_model.safetensors names), used to check longtail's
adapted forward and the adapters' gradients (tests/unit/test_learner_lora.c).  Reads a base model directory
(config.json + model.safetensors) and an adapter directory (adapter_config.json + adapter_model.safetensors in
PEFT's layout), and for each input line {"tokens": [...], "coef": [...], "route": [[[ids]]]} prints
{"logprobs": [...], "grads": {name: [...]}}: the log-probabilities and the gradients of Σ coef_t · logprob_t with
respect to each adapter tensor.  "route" (optional, [token][moe layer][k]) pins the experts, as keep-routing does.

    /usr/bin/python3 tests/ref/lora_ref.py BASE_DIR ADAPTER_DIR < lines.jsonl
"""
import json, struct, sys
import torch

torch.set_default_dtype(torch.float64)


def load_safetensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            raise SystemExit("unsupported dtype " + e["dtype"])
        b, en = e["data_offsets"]
        raw = bytearray(data[8 + n + b:8 + n + en])
        out[name] = torch.frombuffer(raw, dtype=torch.float32).reshape(e["shape"]).double()
    return out


def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def forward(cfg, W, lora, scale, tokens, route):
    T = len(tokens)
    D, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or D // H
    eps, theta, L = cfg.get("rms_norm_eps", 1e-6), cfg.get("rope_theta", 10000.0), cfg["num_hidden_layers"]
    E = cfg.get("num_experts", 0) if cfg["model_type"] == "qwen3_moe" else 0
    mlp_only = set(cfg.get("mlp_only_layers") or [])
    window, types = cfg.get("sliding_window") or 0, cfg.get("layer_types") or ["full_attention"] * L

    def linear(x, module):
        y = x @ W[module + ".weight"].T
        a = lora.get("base_model.model." + module + ".lora_A.weight")
        if a is not None:
            y = y + scale * ((x @ a.T) @ lora["base_model.model." + module + ".lora_B.weight"].T)
        return y

    inv = 1.0 / (theta ** (torch.arange(0, hd, 2).double() / hd))
    freqs = torch.outer(torch.arange(T).double(), inv)
    emb = torch.cat([freqs, freqs], -1)
    cos, sin = torch.cos(emb)[:, None, :], torch.sin(emb)[:, None, :]
    x = W["model.embed_tokens.weight"][tokens]
    ml = 0
    for l in range(L):
        p = "model.layers.%d." % l
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = rmsnorm(linear(h, p + "self_attn.q_proj").reshape(T, H, hd), W[p + "self_attn.q_norm.weight"], eps)
        k = rmsnorm(linear(h, p + "self_attn.k_proj").reshape(T, KV, hd), W[p + "self_attn.k_norm.weight"], eps)
        v = linear(h, p + "self_attn.v_proj").reshape(T, KV, hd)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, 1), v.repeat_interleave(H // KV, 1)
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        allowed = j <= i
        if types[l] == "sliding_attention":
            allowed &= (i - j) < window
        s = torch.einsum("ihd,jhd->hij", q, k) / hd ** 0.5
        s = torch.softmax(s.masked_fill(~allowed[None], float("-inf")), -1)
        x = x + linear(torch.einsum("hij,jhd->ihd", s, v).reshape(T, H * hd), p + "self_attn.o_proj")
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        if E > 0 and l not in mlp_only:
            kk = cfg["num_experts_per_tok"]
            pr = torch.softmax(h @ W[p + "mlp.gate.weight"].T, -1)
            top = torch.tensor([[route[t][ml][s_] for s_ in range(kk)] for t in range(T)]) if route else \
                torch.topk(pr, kk, -1).indices
            wts = torch.gather(pr, -1, top)
            if cfg.get("norm_topk_prob", False):
                wts = wts / wts.sum(-1, keepdim=True)
            rows = []
            for t in range(T):
                o = torch.zeros(D)
                for s_ in range(kk):
                    pe = p + "mlp.experts.%d." % int(top[t, s_])
                    a = torch.nn.functional.silu(linear(h[t], pe + "gate_proj")) * linear(h[t], pe + "up_proj")
                    o = o + wts[t, s_] * linear(a, pe + "down_proj")
                rows.append(o)
            x = x + torch.stack(rows)
            ml += 1
        else:
            a = torch.nn.functional.silu(linear(h, p + "mlp.gate_proj")) * linear(h, p + "mlp.up_proj")
            x = x + linear(a, p + "mlp.down_proj")
    x = rmsnorm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings", False) else W["lm_head.weight"]
    lp = torch.log_softmax(x @ head.T, -1)
    return torch.cat([torch.zeros(1), lp[torch.arange(T - 1), torch.tensor(tokens[1:])]])


def main():
    base, adapter = sys.argv[1], sys.argv[2]
    cfg = json.load(open(base + "/config.json"))
    W = load_safetensors(base + "/model.safetensors")
    acfg = json.load(open(adapter + "/adapter_config.json"))
    assert acfg["peft_type"] == "LORA"
    lora = load_safetensors(adapter + "/adapter_model.safetensors")
    for t in lora.values():
        t.requires_grad_(True)
    scale = acfg["lora_alpha"] / acfg["r"]
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        for t in lora.values():
            t.grad = None
        lp = forward(cfg, W, lora, scale, req["tokens"], req.get("route"))
        (lp * torch.tensor(req["coef"]).double()).sum().backward()
        grads = {n: t.grad.flatten().tolist() if t.grad is not None else [0.0] * t.numel() for n, t in lora.items()}
        print(json.dumps({"logprobs": lp.tolist(), "grads": grads}))


main()
