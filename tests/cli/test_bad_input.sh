#!/usr/bin/env bash
# Every bad input to `bagualu train` gives one line naming the problem on stderr
# and exit code 2 — never a crash, never a partial run.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

cfg() { echo "$1" >"$D/$2"; }
good='"vocab_size": 32, "max_position_embeddings": 16, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32, "num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16'
cfg "{$good}" good.json
cfg "{${good/\"num_attention_heads\": 2/\"num_attention_heads\": 3}}" heads.json
cfg "{${good/\"num_experts_per_tok\": 2/\"num_experts_per_tok\": 5}}" topk.json
cfg "{$good, \"colour\": 1}" unknown.json
cfg "{${good/\"hidden_size\": 16/\"hidden_size\": \"16\"}}" type.json
cfg "{${good/\"hidden_size\": 16/\"hidden_size\": 16.5}}" frac.json
cfg "{$good, \"norm\": \"batchnorm\"}" enum.json
cfg "{$good" truncated.json
cfg "{$good, \"router_type\": \"random\"}" router_type.json
cfg "{$good, \"capacity_factor\": -1}" capacity.json
cfg "{$good, \"router_z_loss_coef\": 1e39}" float_range.json
cfg "{$good, \"router_groups\": 2, \"router_topk_groups\": 3}" topk_groups.json
cfg "{$good, \"router_groups\": 3}" groups_divide.json
cfg "{$good, \"router_type\": \"switch\"}" switch_k.json
cfg "{${good/\"num_experts_per_tok\": 2/\"num_experts_per_tok\": 1}, \"router_type\": \"gshard\"}" gshard_k.json
cfg "{$good, \"router_jitter\": 1.5}" jitter.json
cfg "{$good, \"router_bias_update_rate\": -0.1}" bias_rate.json
cfg "{$good, \"routing_group_tokens\": -8}" group_tokens.json
cfg "{$good, \"router_groups\": 0}" groups_zero.json
cfg "{$good, \"router_groups\": 4, \"router_topk_groups\": 1}" group_experts.json
cfg "{$good, \"capacity_factor\": 1.0, \"routing_group_tokens\": 12}" group_batch.json
cfg "{$good, \"kv_lora_rank\": 8, \"qk_nope_head_dim\": 8, \"qk_rope_head_dim\": 4, \"v_head_dim\": 8}" mla.json
cfg "{$good, \"v_head_dim\": 8}" mla_partial.json
printf '\x00\x01binary' >"$D/binary.json"

T=train
"$BIN" synth --vocab 32 --tokens 2000 --out "$D/ok.bin" >/dev/null || { echo "synth failed"; exit 1; }
"$BIN" synth --vocab 64 --tokens 2000 --out "$D/big_ids.bin" >/dev/null
"$BIN" synth --vocab 32 --tokens 5 --out "$D/short.bin" >/dev/null
python3 - "$D" <<'PY'
import struct, sys
d = sys.argv[1]
data = open(f"{d}/ok.bin", "rb").read()
open(f"{d}/magic.bin", "wb").write(struct.pack("<i", 12345) + data[4:])
open(f"{d}/version.bin", "wb").write(data[:4] + struct.pack("<i", 7) + data[8:])
open(f"{d}/truncated.bin", "wb").write(data[:-100])
open(f"{d}/tiny.bin", "wb").write(data[:100])
PY
run() { "$BIN" $T --config "$1" --data "$2" --steps 2 --batch-size 2 --seq-len 8 "${@:3}"; }

expect heads "does not divide" -- run "$D/heads.json" "$D/ok.bin"
expect topk "exceeds num_local_experts" -- run "$D/topk.json" "$D/ok.bin"
expect unknown-key "unknown key \"colour\"" -- run "$D/unknown.json" "$D/ok.bin"
expect wrong-type "must be an integer" -- run "$D/type.json" "$D/ok.bin"
expect fraction "must be an integer" -- run "$D/frac.json" "$D/ok.bin"
expect bad-enum "must be one of" -- run "$D/enum.json" "$D/ok.bin"
expect router-type "\"router_type\" must be one of: topk, switch" -- run "$D/router_type.json" "$D/ok.bin"
expect capacity "capacity_factor must be >= 0" -- run "$D/capacity.json" "$D/ok.bin"
expect mla "multi-head latent attention (v_head_dim) is for \`bagualu plan\` only" -- run "$D/mla.json" "$D/ok.bin"
expect mla-partial "latent attention needs v_head_dim, kv_lora_rank" -- run "$D/mla_partial.json" "$D/ok.bin"
expect float-range "\"router_z_loss_coef\" must be a finite number" -- run "$D/float_range.json" "$D/ok.bin"
expect topk-groups "router_topk_groups must be in .1, router_groups = 2" -- run "$D/topk_groups.json" "$D/ok.bin"
expect groups-divide "router_groups (3) must divide num_local_experts (4)" -- run "$D/groups_divide.json" "$D/ok.bin"
expect switch-k "switch routes top-1" -- run "$D/switch_k.json" "$D/ok.bin"
expect gshard-k "gshard routes top-2" -- run "$D/gshard_k.json" "$D/ok.bin"
expect jitter "router_jitter must be in .0, 1), got 1.5" -- run "$D/jitter.json" "$D/ok.bin"
expect bias-rate "router_bias_update_rate must be >= 0" -- run "$D/bias_rate.json" "$D/ok.bin"
expect group-tokens "routing_group_tokens must be >= 0" -- run "$D/group_tokens.json" "$D/ok.bin"
expect groups-zero "router_groups must be >= 1" -- run "$D/groups_zero.json" "$D/ok.bin"
expect group-experts "num_experts_per_tok (2) exceeds the experts of router_topk_groups" -- run "$D/group_experts.json" "$D/ok.bin"
# run's batch is 2 x 8 = 16 tokens: groups of 12 do not tile it
expect group-batch "routing_group_tokens 12 does not divide a rank's batch of 16 tokens" -- run "$D/group_batch.json" "$D/ok.bin"
expect bad-json "not valid JSON" -- run "$D/truncated.json" "$D/ok.bin"
expect binary-config "NUL bytes" -- run "$D/binary.json" "$D/ok.bin"
expect missing-config "cannot open config" -- run "$D/nope.json" "$D/ok.bin"
expect missing-data "cannot open token file" -- run "$D/good.json" "$D/nope.bin"
mkdir -p "$D/noshards"
expect dir-data "directory holds no token shards" -- run "$D/good.json" "$D/noshards"
expect wrong-magic "wrong magic" -- run "$D/good.json" "$D/magic.bin"
expect wrong-version "unsupported token file version" -- run "$D/good.json" "$D/version.bin"
expect truncated-data "but the file has" -- run "$D/good.json" "$D/truncated.bin"
expect tiny-data "too short for a token file header" -- run "$D/good.json" "$D/tiny.bin"
expect token-range "out of range" -- run "$D/good.json" "$D/big_ids.bin"
expect short-data "shorter than one training window" -- run "$D/good.json" "$D/short.bin"
expect long-seq "longer than the model's context" -- "$BIN" train --config "$D/good.json" --data "$D/ok.bin" --seq-len 17 --steps 1
expect batch-zero "batch-size must be positive" -- "$BIN" train --config "$D/good.json" --data "$D/ok.bin" --batch-size 0
expect steps-zero "steps must be positive" -- "$BIN" train --config "$D/good.json" --data "$D/ok.bin" --steps 0
expect steps-negative "steps must be positive" -- "$BIN" train --config "$D/good.json" --data "$D/ok.bin" --steps -3
expect steps-junk "expects an integer" -- "$BIN" train --config "$D/good.json" --data "$D/ok.bin" --steps 10x
expect lr-junk "expects a number" -- run "$D/good.json" "$D/ok.bin" --lr fast
expect unknown-flag "unknown flag" -- run "$D/good.json" "$D/ok.bin" --colour red
expect missing-value "needs a value" -- run "$D/good.json" "$D/ok.bin" --lr
expect missing-flag "one of --data and --data-mix" -- "$BIN" train --config "$D/good.json"
expect unknown-command "unknown command" -- "$BIN" fly
expect val-missing "cannot open token file" -- run "$D/good.json" "$D/ok.bin" --val "$D/nope.bin"
expect a2a-algo "--a2a must be flat, hierarchical, 2d or auto" -- run "$D/good.json" "$D/ok.bin" --a2a sideways
expect a2a-overlap "--a2a-overlap must be 0 or 1, got 2" -- run "$D/good.json" "$D/ok.bin" --a2a-overlap 2
expect comm-timeout "--comm-timeout must be >= 0 seconds" -- run "$D/good.json" "$D/ok.bin" --comm-timeout -1
expect a2a-chunks "a2a-chunks must be positive" -- run "$D/good.json" "$D/ok.bin" --a2a-chunks -1
expect dtype "--dtype must be fp32, bf16 or fp16" -- run "$D/good.json" "$D/ok.bin" --dtype fp8
expect zero "--zero must be 0 or 1, got \"2\"" -- run "$D/good.json" "$D/ok.bin" --zero 2
expect recompute "--recompute must be none or block" -- run "$D/good.json" "$D/ok.bin" --recompute layer
expect loss-scale "--loss-scale must be a finite number >= 1" -- run "$D/good.json" "$D/ok.bin" --dtype fp16 --loss-scale 0.5
expect loss-scale-window "--loss-scale-window must be positive" -- run "$D/good.json" "$D/ok.bin" --loss-scale-window 0
expect ep-negative "expert-parallel must be positive" -- run "$D/good.json" "$D/ok.bin" --expert-parallel -1
expect rpn-negative "ranks-per-node must be positive" -- run "$D/good.json" "$D/ok.bin" --ranks-per-node -2
expect ep-too-big "exceeds the number of ranks" -- run "$D/good.json" "$D/ok.bin" --expert-parallel 2
expect log-unwritable "cannot open metrics log" -- run "$D/good.json" "$D/ok.bin" --log "$D/no/such/dir/m.jsonl"
# The f32 GEMM's variable: a value not in the list, named with the list.
BAGUALU_GEMM=blas expect gemm-variable "BAGUALU_GEMM must be own, mixed, onednn or onednn-t" -- run "$D/good.json" "$D/ok.bin"

# and a good run works, with a JSON Lines log: the run's description, then one object per step
"$BIN" train --config "$D/good.json" --data "$D/ok.bin" --steps 3 --batch-size 2 --seq-len 8 --log "$D/m.jsonl" >/dev/null 2>"$D/err"
if [ $? -eq 0 ] && [ "$(wc -l <"$D/m.jsonl")" -eq 4 ] && head -1 "$D/m.jsonl" | grep -q '^{"run":{'  && grep -q '"expert_counts":\[\[' "$D/m.jsonl"; then
  pass=$((pass+1))
else
  fail=$((fail+1)); echo "FAIL good run"; cat "$D/err"
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
