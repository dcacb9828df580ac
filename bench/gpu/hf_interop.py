#!/usr/bin/env python3
"""scripts/gpu-check.sh's interoperability check: a checkpoint longtail wrote
(tests/gpu/interop.c: the bytes `longtail init` writes) loads with
transformers' from_pretrained unchanged, and its fp32 log-probabilities on the
same token sequences match longtail's (`longtail logprobs`) within --tol.

    hf_interop.py --dir OUT --key NAME [--impl transformers|numpy-ref] [--results RESULTS.json]

OUT holds ckpt/, seqs.jsonl and longtail.jsonl.  --impl numpy-ref runs
tests/ref/qwen3_ref.py (the independent numpy forward) instead of transformers,
so the comparison runs on a machine without transformers (--cpu-dry-run).
Adds interop_max_abs_dlogp_NAME to RESULTS.json; exits 1 above --tol."""
import argparse, json, os, subprocess, sys


def transformers_logprobs(ckpt, seqs):
    import torch
    import transformers  # the GPU machine has it; Debian does not
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products, as longtail's CPU forward
    model = transformers.AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32, attn_implementation="eager")
    model.to(dev).eval()
    out = []
    with torch.no_grad():
        for toks in seqs:
            ids = torch.tensor([toks], device=dev)
            lp = torch.log_softmax(model(input_ids=ids).logits[0].float(), dim=-1)
            picked = lp[:-1].gather(1, ids[0, 1:, None])[:, 0]
            out.append([0.0] + picked.double().cpu().tolist())
    return out


def numpy_ref_logprobs(ckpt, seqs):
    ref = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "ref", "qwen3_ref.py")
    text = "".join(json.dumps({"tokens": t}) + "\n" for t in seqs)
    res = subprocess.run([sys.executable, ref, ckpt], input=text, capture_output=True, text=True, check=True)
    return [json.loads(l)["logprobs"] for l in res.stdout.splitlines() if l.strip()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--impl", choices=["transformers", "numpy-ref"], default="transformers")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--results")
    a = ap.parse_args()
    seqs = [json.loads(l)["tokens"] for l in open(os.path.join(a.dir, "seqs.jsonl")) if l.strip()]
    ours = [json.loads(l)["logprobs"] for l in open(os.path.join(a.dir, "longtail.jsonl")) if l.strip()]
    ckpt = os.path.join(a.dir, "ckpt")
    theirs = (transformers_logprobs if a.impl == "transformers" else numpy_ref_logprobs)(ckpt, seqs)
    assert len(theirs) == len(ours) == len(seqs), "one log-probability row per sequence"
    worst = max(abs(x - y) for s, t in zip(ours, theirs) for x, y in zip(s, t))
    ntok = sum(len(s) for s in seqs)
    ok = worst <= a.tol
    print("interop %s (%s, %d sequences, %d tokens): max |dlogp| %.3e (bound %.0e) %s"
          % (a.key, a.impl, len(seqs), ntok, worst, a.tol, "ok" if ok else "FAIL"))
    if a.results:
        r = json.load(open(a.results)) if os.path.exists(a.results) else {}
        r["interop_max_abs_dlogp_" + a.key] = worst
        r["interop_impl_" + a.key] = a.impl
        json.dump(r, open(a.results, "w"), indent=1)
    sys.exit(0 if ok else 1)


main()
