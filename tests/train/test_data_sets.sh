#!/usr/bin/env bash
# Training on shard sets and blends through the command line:
#   - a glob of 5 shards whose windows coincide with their concatenation trains exactly
#     as the one concatenated file (the same losses, the same final weights);
#   - a blend resumed mid-run from its checkpoint ends with the uninterrupted run's
#     weights, and a resume with other weights is refused;
#   - bad sets and blends: one line naming the problem, exit 2.
BIN=$1
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CFG=$SRC/configs/tiny_moe.json
source "$(dirname "$0")/../shell_checks.sh"

T=16
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/all.bin" >/dev/null || { echo "synth failed"; exit 1; }
# 5 shards of w*T+1 tokens, each starting with the previous one's last token; one.bin
# is their concatenation without the repeats, so its windows are the shards' windows.
python3 - "$D" $T <<'PY'
import struct, sys, os
d, T = sys.argv[1], int(sys.argv[2])
raw = open(f"{d}/all.bin", "rb").read()
toks = list(struct.unpack(f"<{(len(raw) - 1024) // 2}H", raw[1024:]))
def write(path, t):
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(t), *([0] * 253)))
        f.write(struct.pack(f"<{len(t)}H", *t))
os.makedirs(f"{d}/s")
pos, one = 0, [toks[0]]
for k, w in enumerate([40, 90, 25, 120, 60]):
    part = toks[pos:pos + w * T + 1]
    write(f"{d}/s/train_{k:06d}.bin", part)
    one += part[1:]
    pos += w * T
write(f"{d}/one.bin", one)
write(f"{d}/v1.bin", toks[-3000:-1500])
write(f"{d}/v2.bin", toks[-1500:])
PY
COMMON=(--config "$CFG" --steps 6 --batch-size 4 --seq-len $T --threads 1 --lr 1e-3)
losses() { grep -o '"loss":[0-9.e+-]*' "$1"; }
"$BIN" train "${COMMON[@]}" --data "$D/s/train_*.bin" --log "$D/glob.jsonl" --save-dir "$D/cg" >/dev/null 2>&1 ||
  bad "train on a glob"
"$BIN" train "${COMMON[@]}" --data "$D/one.bin" --log "$D/one.jsonl" --save-dir "$D/co" >/dev/null 2>&1 ||
  bad "train on the concatenation"
if [ -s "$D/glob.jsonl" ] && [ "$(losses "$D/glob.jsonl")" = "$(losses "$D/one.jsonl")" ] &&
   cmp -s "$D/cg/step_00000006/model-00001-of-00001.safetensors" "$D/co/step_00000006/model-00001-of-00001.safetensors"
then ok; else bad "a glob of 5 shards trained differently from their concatenation"; fi

# A blend, saved at step 3 and resumed, against the uninterrupted run.
MIX="a:0.7=$D/s/train_00000[0-2].bin,b:0.3=$D/s/train_00000[34].bin"
"$BIN" train "${COMMON[@]}" --data-mix "$MIX" --val "a=$D/v1.bin,b=$D/v2.bin" --eval-batches 1 \
  --log "$D/mix.jsonl" --save-dir "$D/m1" --save-every 3 >/dev/null 2>&1 || bad "train on a blend"
mkdir -p "$D/m2" && cp -r "$D/m1/step_00000003" "$D/m2/"
"$BIN" train "${COMMON[@]}" --data-mix "$MIX" --save-dir "$D/m2" --resume "$D/m2/step_00000003" >/dev/null 2>&1 ||
  bad "resume a blend"
cmp -s "$D/m1/step_00000006/model-00001-of-00001.safetensors" "$D/m2/step_00000006/model-00001-of-00001.safetensors" &&
  cmp -s "$D/m1/step_00000006/optimizer-00001-of-00001.safetensors" "$D/m2/step_00000006/optimizer-00001-of-00001.safetensors" &&
  ok || bad "a blend resumed at step 3 ended with other weights"
grep -q '"data_tokens":{"a":[0-9]*,"b":[0-9]*}' "$D/mix.jsonl" && ok || bad "no data_tokens in the blend's log"
grep -q '"val_loss_by_dataset":{"a":[0-9.]*,"b":[0-9.]*}' "$D/mix.jsonl" && ok || bad "no per-dataset val loss"
expect "weights changed on resume" "the weights changed" -- "$BIN" train "${COMMON[@]}" \
  --data-mix "a:0.5=$D/s/train_00000[0-2].bin,b:0.5=$D/s/train_00000[34].bin" --resume "$D/m1/step_00000003"

mkdir -p "$D/empty"
expect "empty glob" "no file matches" -- "$BIN" train "${COMMON[@]}" --data "$D/nothing_*.bin"
expect "directory without shards" "directory holds no token shards" -- "$BIN" train "${COMMON[@]}" --data "$D/empty"
expect "weight 0" "weights must be > 0" -- "$BIN" train "${COMMON[@]}" --data-mix "a:0=$D/one.bin"
expect "negative weight" "weights must be > 0" -- "$BIN" train "${COMMON[@]}" --data-mix "a:-1=$D/one.bin,b:1=$D/one.bin"
expect "missing name" "dataset name" -- "$BIN" train "${COMMON[@]}" --data-mix ":1=$D/one.bin"
expect "missing shard in a list" "missing.bin: cannot open" -- "$BIN" train "${COMMON[@]}" --data "$D/one.bin,$D/missing.bin"
expect "both --data and --data-mix" "one of --data and --data-mix" -- "$BIN" train "${COMMON[@]}" --data "$D/one.bin" --data-mix "a:1=$D/one.bin"
expect "eval: empty glob" "no file matches" -- "$BIN" eval --checkpoint "$D/cg/step_00000006" --data "$D/nothing_*.bin"
"$BIN" eval --checkpoint "$D/cg/step_00000006" --data "$D/s" >/dev/null 2>&1 && ok || bad "eval on a directory"
echo "data_sets: $pass passed, $fail failed"
[ $fail -eq 0 ]
