#!/usr/bin/env bash
# `bagualu plan`'s expected_total is what a run's peak RSS reaches beyond the process's
# base: between a small dense model (every block under bg_aligned_alloc's 4 MiB huge
# size) and M2 dense (parameters, gradients, m, v, arena: huge blocks rounded to whole
# 2 MiB pages, resident whole), the difference in train's peak_rss_mib equals the
# difference in expected_total within 2% (issue 17's bar; at least 2 MiB), at P = 1 and,
# under mpirun with ZeRO-1, at P = 2 (the reduce-scatter's own part of its 64 MiB
# scratch is never written but for the first 2 MiB page, where rank 0 holds the scalar
# all-reduces' parts: 30 MiB not resident). Zen 5: 365.6 MiB grown against 365.6
# expected at P = 1, 312.7 against 311.6 at P = 2; without the tails P = 1 is 9.7 MiB
# under, and counting the whole scratch P = 2 is 20 MiB over. On AVX2 (Zen 3) rank 0's
# heap and the GEMM library's pages grow a few MiB besides the planned blocks
# (BENCHMARKS.md, issue 17). Skipped (77) where the kernel gives no transparent huge pages.
BIN=$1
HERE=$(cd "$(dirname "$0")" && pwd)
grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null && exit 77
[ -r /sys/kernel/mm/transparent_hugepage/enabled ] || exit 77
. "$HERE/../comm/dist_launch.sh"
source "$HERE/../shell_checks.sh"
CFG=$HERE/../../configs
"$BIN" synth --vocab 8192 --tokens 20000 --out "$D/t.bin" >/dev/null || { echo "synth failed"; exit 1; }
python3 - "$CFG" "$D" <<'PY'
import json, sys
src, d = sys.argv[1], sys.argv[2]
json.dump(dict(json.load(open(f"{src}/m2.json")), num_local_experts=0), open(f"{d}/big.json", "w"))
json.dump(dict(json.load(open(f"{src}/tiny_moe.json")), num_local_experts=0, vocab_size=8192),
          open(f"{d}/small.json", "w"))
PY
# rss_and_plan NP CONFIG: "peak RSS MiB, expected_total MiB" of a 1-step run at NP ranks.
rss_and_plan() {
  local np=$1 cfg=$2 flags=(--batch-size 1 --seq-len 64)
  rm -f "$D/log.jsonl"
  if [ "$np" = 1 ]; then
    OMP_NUM_THREADS=1 "$BIN" train --config "$cfg" --data "$D/t.bin" --steps 1 --log "$D/log.jsonl" "${flags[@]}" >/dev/null 2>&1
  else
    timeout 120 "${DIST_MPIRUN[@]}" -np "$np" "$BIN" train --config "$cfg" --data "$D/t.bin" --steps 1 \
      --log "$D/log.jsonl" "${flags[@]}" >/dev/null 2>&1
  fi || return 1
  "$BIN" plan --config "$cfg" --cluster "$HERE/box.json" --ranks "$np" --json "${flags[@]}" >"$D/plan.json" || return 1
  python3 - "$D/log.jsonl" "$D/plan.json" <<'PY'
import json, sys
rss = [json.loads(l)["peak_rss_mib"] for l in open(sys.argv[1]) if "peak_rss_mib" in l][-1]
m = json.load(open(sys.argv[2]))["memory"]
print(rss, m.get("expected_total", m["total"]) / 2**20)
PY
}
nps=1
dist_have_mpi && nps="1 2"
for np in $nps; do
  read -r rs ps < <(rss_and_plan "$np" "$D/small.json") || { bad "P=$np: small run failed"; continue; }
  read -r rb pb < <(rss_and_plan "$np" "$D/big.json") || { bad "P=$np: M2 dense run failed"; continue; }
  if awk -v rs="$rs" -v ps="$ps" -v rb="$rb" -v pb="$pb" 'BEGIN { d = (pb - ps) - (rb - rs); t = 0.02 * (rb - rs); if (t < 2) t = 2; exit !(d < t && d > -t) }'
  then ok; else bad "P=$np: RSS grew $rs -> $rb MiB, expected_total $ps -> $pb MiB"; fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
