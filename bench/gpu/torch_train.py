#!/usr/bin/env python3
"""make bench-gpu's PyTorch side: the batches bench/gpu/bench_gpu.c trains,
trained by transformers' Qwen3 / Qwen3-MoE built from the same config.json
(random weights, fp32 master weights with bf16 autocast on CUDA as longtail's
bf16 products, `sdpa` attention, AdamW, one optimizer step per timed step).

  torch_train.py --merge RESULTS.json [--impl transformers|plain] [--device D]
      runs every entry of RESULTS.json's "train" list in a child process and
      adds torch_train_tokens_per_s_<shape>_<len> and gpu_vs_torch_<shape>_<len>;
  torch_train.py --config C --seq-len L --tokens T [--reps R] [--impl ...]
      one shape: prints {"tokens_per_s": ..., "params": ..., ...};
  torch_train.py --rows RESULTS.json
      the table rows docs/benchmarks.md records (| gpu_mfu_qwen3-0.6b_16k | 41.2% |).

--impl plain swaps transformers for a small plain-PyTorch decoder of the same
layout, so the timing, batching and merging run where transformers is not
installed (scripts/gpu-check.sh --cpu-dry-run, Debian's python3-torch)."""
import argparse, contextlib, json, math, os, statistics, subprocess, sys, time

import torch
import torch.nn.functional as F


def build_transformers(cfg):
    import transformers  # on the GPU machine (not in Debian)
    d = dict(cfg)
    conf = transformers.AutoConfig.for_model(d.pop("model_type"), **d)
    return transformers.AutoModelForCausalLM.from_config(conf, attn_implementation="sdpa")


class Plain(torch.nn.Module):
    """Qwen3's layout in plain PyTorch (the --impl plain stand-in): RMSNorm,
    q/k norms, RoPE, causal GQA attention, SwiGLU or top-k experts."""

    def gradient_checkpointing_enable(self):
        pass  # the stand-in only times the loop

    def __init__(self, c):
        super().__init__()
        self.c = c
        D, H, KV, hd, V = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["vocab_size"]
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.embed = torch.nn.Embedding(V, D)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            L = torch.nn.Module()
            L.q, L.k, L.v, L.o = lin(D, H * hd), lin(D, KV * hd), lin(D, KV * hd), lin(H * hd, D)
            L.qn, L.kn, L.n1, L.n2 = [torch.nn.Parameter(torch.ones(n)) for n in (hd, hd, D, D)]
            if c.get("num_experts"):
                Im, E = c["moe_intermediate_size"], c["num_experts"]
                L.router = lin(D, E)
                L.experts = torch.nn.ModuleList(torch.nn.ModuleList([lin(D, Im), lin(D, Im), lin(Im, D)]) for _ in range(E))
            else:
                I = c["intermediate_size"]
                L.mlp = torch.nn.ModuleList([lin(D, I), lin(D, I), lin(I, D)])
            self.layers.append(L)
        self.norm = torch.nn.Parameter(torch.ones(D))
        self.head = None if c.get("tie_word_embeddings") else lin(D, V)
        for p in self.parameters():  # as transformers: N(0, initializer_range), norms at 1
            if p.dim() > 1:
                torch.nn.init.normal_(p, 0.0, c.get("initializer_range", 0.02))

    def rms(self, x, w):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"]).to(x.dtype) * w

    def forward(self, input_ids, labels):
        c = self.c
        B, T = input_ids.shape
        H, KV, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, device=input_ids.device).float() / hd))
        ang = torch.arange(T, device=input_ids.device).float()[:, None] * inv
        cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
        rot = lambda x: x * cos + torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1) * sin
        x = self.embed(input_ids)
        for L in self.layers:
            h = self.rms(x, L.n1)
            q = rot(self.rms(L.q(h).view(B, T, H, hd), L.qn).transpose(1, 2))
            k = rot(self.rms(L.k(h).view(B, T, KV, hd), L.kn).transpose(1, 2)).repeat_interleave(H // KV, 1)
            v = L.v(h).view(B, T, KV, hd).transpose(1, 2).repeat_interleave(H // KV, 1)
            if hasattr(F, "scaled_dot_product_attention"):
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:  # Debian's torch 1.13
                s = (q @ k.transpose(-1, -2)) / math.sqrt(hd)
                s = s.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
                a = s.softmax(-1) @ v
            x = x + L.o(a.transpose(1, 2).reshape(B, T, H * hd))
            h = self.rms(x, L.n2)
            if hasattr(L, "router"):
                p = L.router(h).float().softmax(-1)
                w, ids = p.topk(c["num_experts_per_tok"], -1)
                if c.get("norm_topk_prob"):
                    w = w / w.sum(-1, keepdim=True)
                out = torch.zeros_like(h)
                for e, (g, u, d) in enumerate(L.experts):
                    sel = (ids == e)
                    tok = sel.any(-1)
                    if tok.any():
                        he = h[tok]
                        out[tok] += (sel[tok].to(w.dtype) * w[tok]).sum(-1, keepdim=True).to(h.dtype) * d(F.silu(g(he)) * u(he))
                x = x + out
            else:
                g, u, d = L.mlp
                x = x + d(F.silu(g(h)) * u(h))
        x = self.rms(x, self.norm)
        logits = x @ (self.embed.weight if self.head is None else self.head.weight).t()
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten())
        return type("Out", (), {"loss": loss})


def one(a):
    cfg = json.load(open(a.config))
    dev = torch.device(a.device)
    torch.manual_seed(0)
    with dev if hasattr(dev, "__enter__") else contextlib.nullcontext():  # build the weights where they train (torch ≥ 2)
        model = build_transformers(cfg) if a.impl == "transformers" else Plain(cfg)
    model.to(device=dev, dtype=torch.float32).train()
    if a.recompute:  # as longtail's learner.gpu.recompute for this entry
        model.gradient_checkpointing_enable()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, **({"fused": True} if dev.type == "cuda" else {}))
    nseq = a.tokens // a.seq_len
    ids = torch.randint(0, cfg["vocab_size"], (nseq, a.seq_len), device=dev, generator=None)
    amp = dev.type == "cuda"
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    times = []
    for rep in range(-1, a.reps):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        s = time.perf_counter() - t0
        if rep >= 0:
            times.append(s)
        elif s > 20:  # one timed step for slow shapes, to fit one GPU window
            a.reps = 1
    tps = [a.tokens / s for s in times]
    out = {"tokens_per_s": statistics.median(tps), "min": min(tps), "max": max(tps), "params": params,
           "impl": a.impl, "device": torch.cuda.get_device_name() if amp else "cpu", "torch": torch.__version__,
           "loss": float(loss)}
    if a.impl == "transformers":
        import transformers
        out["transformers"] = transformers.__version__
    print(json.dumps(out))


def merge(a):
    r = json.load(open(a.merge))
    root = os.path.dirname(os.path.abspath(__file__)) + "/../.."
    for t in r.get("train", []):
        if t["status"].startswith("not "):  # not selected, or the C side's window ended first
            continue
        key = "%s_%s" % (t["shape"], t["len"])
        cmd = [sys.executable, os.path.abspath(__file__), "--config", os.path.join(root, t["config"]), "--seq-len",
               str(t["seq_len"]), "--tokens", str(t["tokens"]), "--reps", str(a.reps), "--impl", a.impl, "--device", a.device]
        cmd += ["--recompute"] if t.get("recompute") else []
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
            res = json.loads(lines[-1]) if p.returncode == 0 and lines else None
            why = (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])[-1]
        except subprocess.TimeoutExpired:
            res, why = None, "over %d s" % a.timeout
        if res is None:
            print("torch %-14s: %s" % (key, why), flush=True)
            r["torch_status_" + key] = why
            continue
        r["torch_train_tokens_per_s_" + key] = round(res["tokens_per_s"])
        r["torch_impl"] = "%s (torch %s%s)" % (res["impl"], res["torch"],
                                               ", transformers " + res["transformers"] if "transformers" in res else "")
        gpu = r.get("gpu_train_tokens_per_s_" + key)
        if gpu:
            r["gpu_vs_torch_" + key] = gpu / res["tokens_per_s"]
        print("torch %-14s %9.0f tok/s (%.0f–%.0f)%s" % (key, res["tokens_per_s"], res["min"], res["max"],
                                                        "  longtail/torch %.2f" % r["gpu_vs_torch_" + key] if gpu else ""),
              flush=True)
        json.dump(r, open(a.merge, "w"), indent=1)  # after each shape: a run cut short keeps what it measured
    json.dump(r, open(a.merge, "w"), indent=1)
    rows(a.merge)


def rows(path):
    r = json.load(open(path))
    for k, v in r.items():
        if k.startswith("gpu_mfu_"):
            print("| %s | %.1f%% |" % (k, 100 * v))
        elif k.startswith(("gpu_train_tokens_per_s_", "torch_train_tokens_per_s_")):
            print("| %s | %.0f |" % (k, v))
        elif k.startswith("gpu_vs_torch_"):
            print("| %s | %.2f |" % (k, v))
        elif k.startswith("interop_max_abs_dlogp_"):
            print("| %s | %.1e |" % (k, v))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--merge")
    ap.add_argument("--rows")
    ap.add_argument("--config")
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--reps", type=int, default=int(os.environ.get("LT_BENCH_REPS", "3")))
    ap.add_argument("--impl", choices=["transformers", "plain"], default="transformers")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--timeout", type=int, default=240)
    ap.add_argument("--recompute", action="store_true", help="gradient checkpointing (transformers)")
    a = ap.parse_args()
    if a.rows:
        rows(a.rows)
    elif a.merge:
        merge(a)
    else:
        one(a)


main()
