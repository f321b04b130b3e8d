#!/usr/bin/env bash
# --recompute block under mpirun, P=2 EP=2: the recomputed MoE forward repeats its
# exchange on every rank alike, and the run ends with bitwise the weights and
# optimizer state of --recompute none (every *.safetensors of the final checkpoint),
# with the same per-step losses, gradient norms and routing metrics. Dropless topk
# (grown exchange buffers) and noisy_topk (noise keyed by step, layer and token).
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }
"$BIN" synth --vocab 64 --tokens 20000 --out "$D/t.bin" >/dev/null
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c['router_type']='noisy_topk'; json.dump(c, open(sys.argv[2], 'w'))" \
  "$CFG" "$D/noisy.json"
# The step's metrics without timings, traffic (recomputation repeats the exchange) and
# memory (recomputation's point).
metrics() { python3 -c "
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if 'step' not in r: continue  # the run line names the run's flags
    print({k: v for k, v in r.items() if not (k.startswith('a2a') or k.startswith('allreduce')
           or k in ('tokens_per_s', 'gflops', 'step_s', 'compute_s', 'peak_rss_mib', 'memory',
                      'comm_scratch_hwm', 'expert_rows_hwm', 'expert_rows_grown'))})" "$1"; }
for cfg in "$CFG" "$D/noisy.json"; do
  name=$(basename "$cfg" .json)
  for rc in none block; do
    timeout 120 "${DIST_MPIRUN[@]}" -np 2 "$BIN" train --config "$cfg" --data "$D/t.bin" --threads 1 \
      --steps 4 --seq-len 32 --batch-size 4 --expert-parallel 2 --recompute $rc \
      --save-dir "$D/$name-$rc" --log "$D/$name-$rc.jsonl" >/dev/null 2>"$D/err" ||
      { bad "$name --recompute $rc: exit $?"; tail -3 "$D/err"; }
  done
  same=1
  for f in "$D/$name-none"/step_00000004/*.safetensors; do
    cmp -s "$f" "$D/$name-block/step_00000004/$(basename "$f")" || same=0
  done
  ls "$D/$name-none"/step_00000004/*.safetensors >/dev/null 2>&1 || same=0
  [ $same = 1 ] && ok "$name P=2 EP=2: final weights and optimizer state bitwise equal" ||
    bad "$name P=2 EP=2: checkpoints differ"
  if [ "$(metrics "$D/$name-none.jsonl")" = "$(metrics "$D/$name-block.jsonl")" ]; then
    ok "$name P=2 EP=2: losses, gradient norms, expert counts, routing health equal"
  else bad "$name P=2 EP=2: step metrics differ"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
