#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets under tests/fuzz/<target>/seeds/.
Run once when a format changes; the seeds are committed. safetensors' seeds come from
make_seeds.c (the writer), trainer.json's and ckpt_index's from real checkpoints (tiny
training runs; ckpt_index: the config in fuzz_ckpt_index.c, `--steps 2 --save-dir`, once
alone and once under `mpirun -np 2 ... --zero 1`, each input the model index, a NUL and
the optimizer index, also compacted): all committed as produced. Crash inputs go to tests/fuzz/<target>/crashes/ by hand."""
import json, os, struct, sys

HERE = os.path.dirname(os.path.abspath(__file__))

def put(target, name, data):
    d = os.path.join(HERE, target, "seeds")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())

# ---- model config: the shipped configs and a few edge cases ----
configs = os.path.join(HERE, "..", "..", "configs")
for name in sorted(os.listdir(configs)):
    if name.endswith(".json"):
        put("config", name, open(os.path.join(configs, name), "rb").read())
put("config", "minimal.json", '{"vocab_size": 8, "max_position_embeddings": 4, "hidden_size": 4, '
    '"num_hidden_layers": 1, "num_attention_heads": 1}')
put("config", "floats.json", '{"vocab_size": 8, "max_position_embeddings": 4, "hidden_size": 4, '
    '"num_hidden_layers": 1, "num_attention_heads": 1, "rope_theta": 1e300, "norm_eps": 1e-45}')
put("config", "hf_keys.json", '{"model_type": "mixtral", "architectures": ["X"], "vocab_size": 8, '
    '"max_position_embeddings": 4, "hidden_size": 4, "num_hidden_layers": 1, "num_attention_heads": 1, '
    '"hidden_act": "silu", "norm": "rmsnorm", "num_local_experts": 4, "num_experts_per_tok": 2, '
    '"router_type": "bias", "router_score": "sigmoid", "capacity_factor": 1.25, "drop_policy": "position"}')

# ---- tok.json ----
def tokjson(merges, vocab=None, eot=None, **extra):
    d = {"format": "bagualu-bpe", "version": 1, "pretokenizer": "gpt2",
         "vocab_size": vocab if vocab is not None else 257 + len(merges), "merges": merges,
         "special_tokens": {"<|endoftext|>": eot if eot is not None else 256 + len(merges)}}
    d.update(extra)
    return json.dumps(d)
put("tokjson", "none.json", tokjson([]))
put("tokjson", "three.json", tokjson([[116, 104], [256, 101], [32, 257]]))
put("tokjson", "chain.json", tokjson([[97, 97], [256, 256], [257, 257], [258, 97], [32, 259]]))
put("tokjson", "huge_vocab.json", tokjson([[97, 98]], vocab=1000000000))
put("tokjson", "huge_eot.json", tokjson([[97, 98]], eot=999999999))
put("tokjson", "later_id.json", tokjson([[97, 300]]))
put("tokjson", "not_ours.json", '{"format": "sentencepiece"}')
put("tokjson", "encoder_like.json", '{"a": 0, "b": 1}')
put("tokjson", "cut.json", tokjson([[116, 104]])[:60])

# ---- GPT-2 files: a byte alphabet of 256 tokens, a few merges, <|endoftext|> ----
def alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}
A = alphabet()
def spell(s):
    return "".join(A[b] for b in s.encode())
def gpt2(merges, extra_tokens=(), eot=True):
    enc = {A[b]: b for b in range(256)}
    for a, b in merges:
        enc.setdefault(spell(a + b), len(enc))
    for t in extra_tokens:
        enc.setdefault(t, len(enc))
    if eot:
        enc["<|endoftext|>"] = len(enc)
    voc = "#version: 0.2\n" + "".join(f"{spell(a)} {spell(b)}\n" for a, b in merges)
    return (json.dumps(enc, ensure_ascii=False) + "\0" + voc).encode()
put("gpt2", "small", gpt2([(" ", "t"), ("h", "e"), (" t", "he"), ("i", "n"), (" ", "a")]))
put("gpt2", "no_merges", gpt2([]))
put("gpt2", "no_eot", gpt2([("a", "b")], eot=False))
put("gpt2", "crlf", gpt2([("a", "b"), ("ab", "c")]).replace(b"\n", b"\r\n"))
put("gpt2", "unknown_merge", gpt2([("a", "b")]) + spell("x").encode() + b" " + spell("yz").encode() + b"\n")

# ---- token shards ----
def shard(version, tokens, count=None):
    h = [20240520, version, len(tokens) if count is None else count] + [0] * 253
    return struct.pack("<256i", *h) + struct.pack(("<%dH" if version == 1 else "<%dI") % len(tokens), *tokens)
put("shard", "v1", shard(1, [50256, 1, 2, 3, 65535]))
put("shard", "v2", shard(2, [50256, 70000, 0, 2**31]))
put("shard", "v1_empty", shard(1, []))
put("shard", "v1_short_count", shard(1, [1, 2, 3], count=2))
put("shard", "v2_huge_count", shard(2, [1], count=2**31 - 1))
put("shard", "framed_v1", b"\x02" + struct.pack("<4H", 1, 2, 299, 300))
put("shard", "framed_v2", b"\x01" + struct.pack("<3I", 1, 69999, 70000))

# ---- command-line arguments (NUL-separated) ----
def argv(*a):
    return "\0".join(a).encode()
put("args", "ok", argv("--out", "x", "--steps", "10", "--tokens", "-5", "--lr", "3e-4", "--seed", "42", "--stats"))
put("args", "files", argv("a.txt", "--out", "x", "b.txt", "--stats", "c.txt"))
put("args", "bad_int", argv("--out", "x", "--steps", "2147483648"))
put("args", "big_float", argv("--out", "x", "--lr", "1e39"))
put("args", "neg_u64", argv("--out", "x", "--seed", "-1"))
put("args", "twice", argv("--out", "x", "--out", "y"))
put("args", "no_value", argv("--out"))
put("args", "empty", b"")

# ---- BPE encoder inputs ----
put("bpe_encode", "english", "It's the end of the world as we know it, isn't it?  I'll 've 're 'd\n")
put("bpe_encode", "unicode", "été 中文 😀 ﬁ ẞ \u00a0\u2003 \u200b x\u0301 ١٢٣ 𝟘\n")
put("bpe_encode", "spaces", "   \t\t\n\n  a  \r\n \x0b\x0c end   ")
put("bpe_encode", "bytes", bytes(range(256)) + b"\xc3\x28\xe2\x82\xf0\x9f\x98")
put("bpe_encode", "eot", "<|endoftext|>text<|endoftext|>")
put("bpe_encode", "digits", "0123456789 3.14159 1,000,000 2024-05-20")

# ---- cluster files: the shipped ones and the planner tests' fixture ----
clusters = os.path.join(HERE, "..", "..", "clusters")
for name in sorted(os.listdir(clusters)):
    if name.endswith(".json"):
        put("cluster", name, open(os.path.join(clusters, name), "rb").read())
put("cluster", "box.json", open(os.path.join(HERE, "..", "plan", "box.json"), "rb").read())

# ---- --data-mix specs: the string form and the JSON form ----
put("blend", "two.txt", "web:0.7=data/web/*.bin,code:0.3=data/code")
put("blend", "list.txt", "books:1=@books.list")
put("blend", "valid_no_weights.txt", "web=valid/web,code=valid/code")
put("blend", "mixed.txt", "a:2.5e-1=x,b=y,c:1e3=z/")
put("blend", "bad_weight.txt", "a:-1=x")
put("blend", "twice.txt", "a:1=x,a:2=y")
put("blend", "no_eq.txt", "a:1")
put("blend", "mix.json", json.dumps([{"name": "web", "weight": 0.7, "data": "web/*.bin"},
                                     {"name": "code", "weight": 0.3, "data": "@code.list"}], indent=1))
put("blend", "valid.json", json.dumps([{"name": "web", "data": "valid/web"}, {"name": "code", "data": "valid/code"}]))
put("blend", "not_array.json", '{"name": "web", "weight": 1, "data": "x"}')
put("blend", "bad_types.json", '[{"name": 1, "weight": "1", "data": ["x"]}]')
