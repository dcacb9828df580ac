#!/usr/bin/env python3
"""Builds the small byte-level BPE tokenizers used as test fixtures
(tests/ref/tokenizer/{qwen2,gpt2}-small.json): 400 merges learned on a
generated corpus, in Hugging Face's tokenizer.json format, with the Qwen2
pipeline (NFC + Split regex + ByteLevel) and the GPT-2 one (ByteLevel regex).

    python3 tests/ref/make-small-tokenizer.py tests/ref/tokenizer
"""
import collections, json, random, sys

def byte_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}

ALPHA = byte_alphabet()
random.seed(1234)
words = ["the", "of", "and", "token", "learner", "policy", "reward", "value", "sample", "trajectory", "longtail",
         "数学", "问题", "你好", "Привет", "мир", "café", "naïve", "def", "return", "self", "print", "while", "12", "345"]
corpus = collections.Counter()
for _ in range(20000):
    w = random.choice(words)
    corpus[("Ġ" if random.random() < 0.7 else "") + "".join(ALPHA[b] for b in w.encode())] += 1

vocab = {ALPHA[b]: i for i, b in enumerate(sorted(ALPHA))}
merges = []
words_sym = {w: list(w) for w in corpus}
while len(merges) < 400:
    pairs = collections.Counter()
    for w, syms in words_sym.items():
        for a, b in zip(syms, syms[1:]):
            pairs[(a, b)] += corpus[w]
    if not pairs:
        break
    (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
    merges.append((a, b))
    vocab.setdefault(a + b, len(vocab))
    for w, syms in words_sym.items():
        out, i = [], 0
        while i < len(syms):
            if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                out.append(a + b); i += 2
            else:
                out.append(syms[i]); i += 1
        words_sym[w] = out

n = len(vocab)
added = [{"id": n, "content": "<|endoftext|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
         {"id": n + 1, "content": "<|im_start|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
         {"id": n + 2, "content": "<|im_end|>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}]
QWEN2 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "", "end_of_word_suffix": "",
         "fuse_unk": False, "byte_fallback": False, "ignore_merges": False, "vocab": vocab, "merges": [[a, b] for a, b in merges]}
qwen = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2}, "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": byte_level, "decoder": byte_level, "model": model}
gpt2_model = dict(model, merges=["%s %s" % m for m in merges])
gpt2 = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added[:1], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": gpt2_model}
out = sys.argv[1]
json.dump(qwen, open(out + "/qwen2-small.json", "w"), ensure_ascii=False)
json.dump(gpt2, open(out + "/gpt2-small.json", "w"), ensure_ascii=False)
