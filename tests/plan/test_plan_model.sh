#!/usr/bin/env bash
# Properties of the planner that hold whatever the rates (no timing of this machine):
# with ZeRO-1 more ranks never mean more optimizer bytes per rank (and strictly fewer
# from 1 to 2 to 4 to 8); faster links or memory never make a step slower; a larger
# imbalance never makes it faster; recomputation never adds activation bytes; the
# search lists only layouts that fit, best tokens/s first; unequal expert loads price
# the experts' GEMMs at their taller products' rates.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
CFG=$HERE/../../configs
plan() { "$BIN" plan --cluster "$HERE/box.json" --json "$@"; }
# field KEY: the number after "KEY": in the one-line JSON on stdin (KEY unique in it).
field() { sed -n "s/.*\"$1\": \([-0-9.e+]*\).*/\1/p"; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }

# ZeRO-1 alone (a dense model; the MoE model at a fixed EP of 2).
sed 's/"num_local_experts": 16/"num_local_experts": 0/' "$CFG/m2.json" >"$D/dense.json"
for model in "$D/dense.json" "$CFG/m2.json --expert-parallel 2"; do
  prev=""
  for P in 2 4 8 16; do
    o=$(plan --config $model --ranks $P --batch-size 1 --seq-len 64 --zero 1 | field optimizer)
    [ -n "$o" ] || { bad "plan failed at P=$P"; continue; }
    if [ -n "$prev" ]; then
      if [ "$o" -lt "$prev" ]; then ok; else bad "$model: optimizer bytes at P=$P ($o) not below the previous ($prev)"; fi
    fi
    prev=$o
  done
done

faster() {  # faster NAME KEY-PATH FACTOR FLAGS... : that rate times FACTOR gives a step no slower
  local name=$1 path=$2 f=$3; shift 3
  cp "$D/fast_$path.json" "$D/fast.json"
  local a b
  a=$(plan "$@" | field step_s) && b=$("$BIN" plan --cluster "$D/fast.json" --json "$@" | field step_s) ||
    { bad "$name: plan failed"; return; }
  if [ -n "$a" ] && le "$b" "$a"; then ok
  else bad "$name: step $a s became $b s with a faster $path"; fi
}
# The faster clusters, made once: box.json with one rate scaled.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
for path, f in [("inter_node.bandwidth", 4), ("intra_node.bandwidth", 4), ("inter_node.latency", 0.25),
                ("memory_bandwidth", 2), ("topology.oversubscription", 0.5)]:
    c = json.load(open(sys.argv[1])); keys = path.split("."); o = c
    for k in keys[:-1]: o = o[k]
    o[keys[-1]] *= f
    json.dump(c, open(f"{sys.argv[2]}/fast_{path}.json", "w"))
PY
for a2a in flat hierarchical 2d; do
  for f in "--ranks 16 --expert-parallel 16" "--ranks 8 --expert-parallel 4" "--ranks 4"; do
    flags="--config $CFG/m2.json --batch-size 2 --seq-len 128 --a2a $a2a $f"
    faster "inter-$a2a" inter_node.bandwidth 4 $flags
    faster "intra-$a2a" intra_node.bandwidth 4 $flags
    faster "lat-$a2a" inter_node.latency 0.25 $flags
    faster "mem-$a2a" memory_bandwidth 2 $flags
    faster "over-$a2a" topology.oversubscription 0.5 $flags
  done
done
# The link's rate while every rank exchanges (inter_node.exchange_bandwidth) prices the
# expert rows' trips, and only them: at a quarter of the pair's rate every exchange takes
# longer and the gradient reduction no longer; a file whose exchanging rate equals the
# pair's plans as one without it.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["inter_node"]["exchange_bandwidth"] = c["inter_node"]["bandwidth"] / 4
json.dump(c, open(f"{sys.argv[2]}/xbw.json", "w"))
c["inter_node"]["exchange_bandwidth"] = c["inter_node"]["bandwidth"]
json.dump(c, open(f"{sys.argv[2]}/xbw_same.json", "w"))
PY
for a2a in flat hierarchical 2d; do
  flags="--config $CFG/m2.json --batch-size 2 --seq-len 128 --ranks 8 --expert-parallel 8 --a2a $a2a"
  o0=$(plan $flags); o1=$("$BIN" plan --cluster "$D/xbw.json" --json $flags)
  x0=$(field a2a_s <<<"$o0"); g0=$(field grad_s <<<"$o0")
  x1=$(field a2a_s <<<"$o1"); g1=$(field grad_s <<<"$o1")
  x2=$("$BIN" plan --cluster "$D/xbw_same.json" --json $flags | field a2a_s)
  if [ -n "$x0" ] && [ -n "$x1" ] && awk -v a="$x0" -v b="$x1" 'BEGIN { exit !(b > a) }' &&
     [ "$g0" = "$g1" ] && [ "$x2" = "$x0" ]; then ok
  else bad "$a2a: a2a $x0 s -> $x1 s at a quarter's exchanging rate (same rate: $x2), grad $g0 -> $g1"; fi
done
a=$(plan --config "$CFG/m2.json" --ranks 8 --batch-size 2 --seq-len 128 --imbalance 1 | field step_s)
b=$(plan --config "$CFG/m2.json" --ranks 8 --batch-size 2 --seq-len 128 --imbalance 1.5 | field step_s)
[ -n "$a" ] && le "$a" "$b" && [ "$a" != "$b" ] && ok ||
  bad "imbalance 1.5 ($b s) not slower than 1 ($a s)"
# The routing's load variation (--load-cv, train's load_cv): more never makes a step
# faster and raises the rank imbalance; SWIPE is balanced whatever it is told; with a
# capacity factor of 1 a skewed gate drops rows (kept < 1), so its experts cost less
# than without the capacity; a negative value is refused.
cvrun() { plan --config "$1" --ranks 4 --batch-size 2 --seq-len 128 "${@:2}"; }
prev_s=0; prev_i=0
for cv in 0 0.3 0.9 1.5; do
  o=$(cvrun "$CFG/m2.json" --load-cv $cv)
  s=$(field step_s <<<"$o"); i=$(field imbalance <<<"$o")
  [ -n "$s" ] && le "$prev_s" "$s" && le "$prev_i" "$i" && ok ||
    bad "load cv $cv: step $s s, imbalance $i below the previous ($prev_s s, $prev_i)"
  prev_s=$s; prev_i=$i
done
sed 's/^{/{\n  "router_type": "swipe",/' "$CFG/m2.json" >"$D/swipe.json"
[ "$(cvrun "$D/swipe.json" --load-cv 1.5 | field imbalance)" = 1 ] && ok || bad "SWIPE's imbalance is not 1 at load cv 1.5"
# SWIPE balances the ranks, not a rank's experts: its experts cost what top-k's do at
# the same load cv with the imbalance held at 1, not what they cost at cv 0.
sw=$(cvrun "$D/swipe.json" --load-cv 1.5 | field gemm_expert_s)
tk=$(cvrun "$CFG/m2.json" --load-cv 1.5 --imbalance 1 | field gemm_expert_s)
s0=$(cvrun "$D/swipe.json" --load-cv 0 | field gemm_expert_s)
[ -n "$sw" ] && [ "$sw" = "$tk" ] && [ "$sw" != "$s0" ] && ok ||
  bad "SWIPE's experts at load cv 1.5: $sw s, top-k's at imbalance 1: $tk s, SWIPE at cv 0: $s0 s"
free=$(cvrun "$CFG/m2.json" --load-cv 0.9 | field gemm_expert_s)
capped=$(cvrun "$CFG/m2.json" --load-cv 0.9 --capacity 1 | field gemm_expert_s)
[ -n "$capped" ] && le "$capped" "$free" && [ "$capped" != "$free" ] && ok ||
  bad "capacity 1 at load cv 0.9: experts $capped s not below $free s without it"
"$BIN" plan --cluster "$HERE/box.json" --config "$CFG/m2.json" --load-cv -1 >/dev/null 2>"$D/err"
rc=$?; [ $rc = 2 ] && grep -q "load-cv" "$D/err" && ok || bad "--load-cv -1: exit $rc, $(cat "$D/err")"
# The gradient reduction's summation (comm/dist_common.c, dist_sum_rank_order_f32):
# none on one rank; per rank 4D/n bytes of segment times n + 1 (n parts read, the sum
# written) at the memory bandwidth, so 5/6 from 2 to 4 ranks of a dense model, 2x at
# half the bandwidth.
s1=$(plan --config "$D/dense.json" --ranks 1 --batch-size 1 --seq-len 64 | field grad_sum_s)
s2=$(plan --config "$D/dense.json" --ranks 2 --batch-size 1 --seq-len 64 | field grad_sum_s)
s4=$(plan --config "$D/dense.json" --ranks 4 --batch-size 1 --seq-len 64 | field grad_sum_s)
s2f=$("$BIN" plan --cluster "$D/fast_memory_bandwidth.json" --json --config "$D/dense.json" --ranks 2 --batch-size 1 --seq-len 64 | field grad_sum_s)
if awk -v a="$s1" -v b="$s2" -v c="$s4" -v d="$s2f" 'BEGIN { exit !(a == 0 && b > 0 && c / b > 0.8333 && c / b < 0.8334 && b / d > 1.9999 && b / d < 2.0001) }'
then ok; else bad "gradient summation: P=1 $s1, P=2 $s2, P=4 $s4 s, P=2 at twice the bandwidth $s2f s"; fi
# The calibrated reduction rates (plan --calibrate's probe): reduce_bandwidth prices the
# sum instead of the memory bandwidth; intra_node.bulk_bandwidth the gradients' moves
# inside a node instead of the link bandwidth (1/4 of it: 4x the moves, less their
# latencies), and nothing else (the exchange keeps the
# link's). One thread's work each: a rank on half a core (4 ranks on a node of 2) sums
# at half the rate, a rank with two cores' share (1 on a node of 2) at no more.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["reduce_bandwidth"] = 1e10; c["intra_node"]["bulk_bandwidth"] = 1.25e9
json.dump(c, open(f"{sys.argv[2]}/reduce.json", "w"))
PY
rplan() { "$BIN" plan --cluster "$D/reduce.json" --json --config "$D/dense.json" --batch-size 1 --seq-len 64 "$@"; }
r2=$(rplan --ranks 2 | field grad_sum_s); g2=$(plan --config "$D/dense.json" --ranks 2 --batch-size 1 --seq-len 64 | field grad_s)
rg2=$(rplan --ranks 2 | field grad_s)
r4h=$(rplan --ranks 4 --ranks-per-node 4 | field grad_sum_s); r4=$(rplan --ranks 4 --ranks-per-node 2 | field grad_sum_s)
r2w=$(rplan --ranks 2 --ranks-per-node 1 | field grad_sum_s)
a2m=$(plan --config "$CFG/m2.json" --ranks 2 --batch-size 2 --seq-len 128 | field a2a_s)
a2r=$("$BIN" plan --cluster "$D/reduce.json" --json --config "$CFG/m2.json" --ranks 2 --batch-size 2 --seq-len 128 | field a2a_s)
if awk -v r2="$r2" -v s2="$s2" -v g2="$g2" -v rg2="$rg2" -v r4h="$r4h" -v r4="$r4" -v r2w="$r2w" -v a="$a2m" -v b="$a2r" '
    BEGIN { exit !(r2 / s2 > 1.9999 && r2 / s2 < 2.0001 && rg2 - r2 > 3.9 * (g2 - s2) && rg2 - r2 < 4 * (g2 - s2) &&
                   r4h / r4 > 1.9999 && r4h / r4 < 2.0001 && r2w == r2 && a == b && a > 0) }'
then ok; else bad "reduction rates: sum P=2 $r2 s (memory's $s2), moves $rg2 - $r2 s (link's $g2 - $s2), P=4 on half cores $r4h s (whole $r4), P=2 on two cores $r2w s; exchange $a2m -> $a2r s"; fi
# The node's memory bandwidth caps what a rank given more cores gets: box.json's ranks
# have 2e10 B/s each, one rank alone on a node would get 4e10; a node of 3e10 holds it
# to 3e10 (optimizer time x 4/3), a node of 5e10 does not (no change), and two ranks on
# a node of 3e10 get 1.5e10 each (x 4/3 against 2e10).
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
for bw in (3e10, 5e10):
    c = json.load(open(sys.argv[1])); c["node_memory_bandwidth"] = bw
    json.dump(c, open(f"{sys.argv[2]}/node_bw_{bw:.0e}.json", "w"))
PY
opt() { "$BIN" plan --cluster "$1" --json --config "$CFG/m2.json" --ranks "$2" --ranks-per-node "$2" --batch-size 1 --seq-len 64 | field optimizer_s; }
o1=$(opt "$HERE/box.json" 1); o1c=$(opt "$D/node_bw_3e+10.json" 1); o1n=$(opt "$D/node_bw_5e+10.json" 1)
o2=$(opt "$HERE/box.json" 2); o2c=$(opt "$D/node_bw_3e+10.json" 2)
if awk -v a="$o1" -v b="$o1c" -v c="$o1n" -v d="$o2" -v e="$o2c" 'BEGIN { r = 4 / 3
    exit !(b / a > r - 1e-4 && b / a < r + 1e-4 && c == a && e / d > r - 1e-4 && e / d < r + 1e-4) }'
then ok; else bad "node memory bandwidth: optimizer P=1 $o1 / capped $o1c / uncapped $o1n s, P=2 $o2 / capped $o2c s"; fi
# The activation passes take activation_bandwidth where the file gives one: equal to
# the memory bandwidth it changes nothing (up to rounding), a quarter of it makes the
# memory-bound term slower, four times it faster; the optimizer stays at the memory's.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
for f in (1, 0.25, 4):
    c = json.load(open(sys.argv[1])); c["activation_bandwidth"] = c["memory_bandwidth"] * f
    json.dump(c, open(f"{sys.argv[2]}/act_bw_{f}.json", "w"))
PY
mb() { "$BIN" plan --cluster "$1" --json --config "$CFG/m2.json" --ranks 2 --batch-size 2 --seq-len 128 | field "$2"; }
m0=$(mb "$HERE/box.json" memory_bound_s); m1=$(mb "$D/act_bw_1.json" memory_bound_s)
ms=$(mb "$D/act_bw_0.25.json" memory_bound_s); mf=$(mb "$D/act_bw_4.json" memory_bound_s)
if awk -v a="$m0" -v b="$m1" -v c="$ms" -v d="$mf" 'BEGIN { exit !(a > 0 && b / a > 1 - 1e-5 && b / a < 1 + 1e-5 && c > a && d < a) }' &&
   [ "$(mb "$HERE/box.json" optimizer_s)" = "$(mb "$D/act_bw_0.25.json" optimizer_s)" ]
then ok; else bad "activation bandwidth: memory-bound $m0 s without, $m1 / $ms / $mf s at 1 / 0.25 / 4 x the memory's"; fi
# Mixed precision's rounding takes rounding_bandwidth where the file gives one (the
# conversion runs under the triad: Zen 5, one thread 37 GB/s against 54): at half the
# memory bandwidth bf16's memory-bound term grows by exactly its rounding passes at the
# memory's rate, fp32's (which rounds nothing) stays; node_rounding_bandwidth caps a
# rank that has the node's cores to itself.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["rounding_bandwidth"] = c["memory_bandwidth"] / 2
json.dump(c, open(f"{sys.argv[2]}/round_bw.json", "w"))
c["rounding_bandwidth"] = c["memory_bandwidth"]
json.dump(c, open(f"{sys.argv[2]}/round_same.json", "w"))
c["node_rounding_bandwidth"] = c["memory_bandwidth"] / 2
json.dump(c, open(f"{sys.argv[2]}/round_node.json", "w"))
PY
rb() { "$BIN" plan --cluster "$1" --json --config "$CFG/m2.json" --ranks "$2" --ranks-per-node "$2" --batch-size 2 --seq-len 128 --dtype "$3" | field memory_bound_s; }
b0=$(rb "$HERE/box.json" 2 bf16); b1=$(rb "$D/round_same.json" 2 bf16); bh=$(rb "$D/round_bw.json" 2 bf16)
f0=$(rb "$HERE/box.json" 2 fp32); fh=$(rb "$D/round_bw.json" 2 fp32)
n1=$(rb "$D/round_same.json" 1 bf16); nc=$(rb "$D/round_node.json" 1 bf16)
if awk -v a="$b0" -v b="$b1" -v h="$bh" -v f="$f0" -v g="$fh" -v n="$n1" -v m="$nc" 'BEGIN {
     exit !(a > 0 && b / a > 1 - 1e-5 && b / a < 1 + 1e-5 && h > a && f == g && m > n) }'
then ok; else bad "rounding bandwidth: bf16 memory-bound $b0 s, $b1 s at the memory's rate, $bh s at half; fp32 $f0 -> $fh s; one rank $n1 -> $nc s node-capped"; fi
# The optimizer takes optimizer_bandwidth where the file gives one: half the memory
# bandwidth doubles its time (P = 1, one rank per node); node_optimizer_bandwidth caps
# what two ranks of a node get (each half the node's); the memory-bound term stays.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["optimizer_bandwidth"] = c["memory_bandwidth"] / 2
json.dump(c, open(f"{sys.argv[2]}/opt_bw.json", "w"))
c["node_optimizer_bandwidth"] = c["optimizer_bandwidth"] / 2
json.dump(c, open(f"{sys.argv[2]}/opt_bw_node.json", "w"))
PY
ob() { "$BIN" plan --cluster "$1" --json --config "$CFG/m2.json" --ranks "$2" --ranks-per-node "$2" --batch-size 1 --seq-len 64 | field "$3"; }
q0=$(ob "$HERE/box.json" 1 optimizer_s); q1=$(ob "$D/opt_bw.json" 1 optimizer_s)
q2=$(ob "$D/opt_bw.json" 2 optimizer_s); q2n=$(ob "$D/opt_bw_node.json" 2 optimizer_s)
if awk -v a="$q0" -v b="$q1" -v c="$q2" -v d="$q2n" 'BEGIN { exit !(a > 0 && b / a > 2 - 1e-4 && b / a < 2 + 1e-4 && d / c > 4 - 1e-3 && d / c < 4 + 1e-3) }' &&
   [ "$(ob "$HERE/box.json" 1 memory_bound_s)" = "$(ob "$D/opt_bw.json" 1 memory_bound_s)" ]
then ok; else bad "optimizer bandwidth: optimizer $q0 s without, $q1 s at half the memory's; P=2 $q2 s, $q2n s node-capped"; fi
# A rank on more cores than the file's gets the measured speedups, not the core ratio:
# box.json's node of 2 ranks held by one rank (share 2) with GEMMs x1.5 on the node's
# cores runs its GEMMs 4/3 as long as with the ideal x2, its elementwise kernels (x1.6)
# slower too; two ranks a node (share 1) see no change. Its experts, 16 for 8 cores, run
# one per thread (matmul_concurrent), each at one core's rate: at the ideal's time.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["node_gemm_speedup"] = 1.5; c["node_activation_speedup"] = 1.6
c["activation_bandwidth"] = c["memory_bandwidth"]
json.dump(c, open(f"{sys.argv[2]}/speedup.json", "w"))
del c["node_gemm_speedup"], c["node_activation_speedup"]
json.dump(c, open(f"{sys.argv[2]}/speedup_ideal.json", "w"))
PY
sp() { "$BIN" plan --cluster "$D/$1.json" --json --config "$CFG/m2.json" --ranks "$2" --ranks-per-node "$2" --batch-size 2 --seq-len 128 | field "$3"; }
x1=$(sp speedup_ideal 1 gemm_dense_s); y1=$(sp speedup 1 gemm_dense_s)
x2=$(sp speedup_ideal 2 gemm_expert_s); y2=$(sp speedup 2 gemm_expert_s)
u1=$(sp speedup_ideal 1 memory_bound_s); v1=$(sp speedup 1 memory_bound_s)
x3=$(sp speedup_ideal 1 gemm_expert_s); y3=$(sp speedup 1 gemm_expert_s)
if awk -v a="$x3" -v b="$y3" 'BEGIN { exit !(a > 0 && b / a > 1 - 1e-4 && b / a < 1 + 1e-4) }'
then ok; else bad "experts one per thread: P=1 $x3 s ideal, $y3 s at x1.5 (equal expected)"; fi
if awk -v a="$x1" -v b="$y1" -v c="$x2" -v d="$y2" -v e="$u1" -v f="$v1" 'BEGIN { r = 4 / 3
    exit !(a > 0 && b / a > r - 1e-4 && b / a < r + 1e-4 && c > 0 && c == d && f > e && f / e <= 2 / 1.6 + 1e-4) }'
then ok; else bad "core speedups: GEMMs P=1 $x1 -> $y1 s (x4/3 expected), P=2 $x2 -> $y2 s (equal); memory-bound P=1 $u1 -> $v1 s"; fi
# The phase wait (inter_node.sync) is paid by every phase in which a rank sends (the
# phase ends when its last, descheduled rank has sent). EP 4 on 2 nodes of 2 ranks, per
# MoE layer 4 trips and the count exchange: flat 1 + 4 x 1 = 5 waits, hierarchical
# 1 + 4 x 3 = 13, 2d 5 (its first dimension spans box.json's supernode of 4 nodes, its
# second is empty); on 4 nodes of 1 every algorithm sends in one phase.
python3 - "$HERE/box.json" "$D" <<'PY2'
import json, sys
c = json.load(open(sys.argv[1])); c["inter_node"]["sync"] = 1e-3
json.dump(c, open(f"{sys.argv[2]}/sync.json", "w"))
PY2
a2a() { "$BIN" plan --cluster "$1" --json --config "$CFG/m2.json" --ranks 4 --ranks-per-node "$3" --expert-parallel 4 --batch-size 2 --seq-len 128 --a2a "$2" | field a2a_s; }
for rpn in 2 1; do
  added=""
  for alg in flat hierarchical 2d; do
    added="$added $(awk -v a="$(a2a "$HERE/box.json" $alg $rpn)" -v b="$(a2a "$D/sync.json" $alg $rpn)" 'BEGIN { print b - a }')"
  done
  if awk -v l="$added" -v rpn=$rpn 'BEGIN { n = split(l, x, " "); h = rpn == 2 ? 13 / 5 : 1; d = 1
      exit !(n == 3 && x[1] > 0 && x[2] / x[1] > h - 1e-4 && x[2] / x[1] < h + 1e-4 && x[3] / x[1] > d - 1e-4 && x[3] / x[1] < d + 1e-4) }'
  then ok; else bad "sync, $rpn ranks per node: added to flat, hierarchical, 2d:$added s (5, 13, 5 waits at 2 per node)"; fi
done
# The step's small all-reduces (collectives_s): none on one rank; on 4 ranks the loss,
# the gradient norm and each MoE layer's router statistics (and its dropped rows with a
# capacity), so 2 + L of them: doubling m2's 8 layers gives 18/10 of the time, a
# capacity factor 34/18; a dense model has 2 whatever its layers. An all-reduce among 4
# ranks waits in 1 + log2 4 = 3 phases (its exchange, the all-gather's rounds): the sync
# adds 3 waits to a dense model's grad_s and 3 to each of its 2 small all-reduces.
sed 's/"num_hidden_layers": 8/"num_hidden_layers": 16/' "$CFG/m2.json" >"$D/m2_16.json"
sed 's/"num_hidden_layers": 8/"num_hidden_layers": 16/' "$D/dense.json" >"$D/dense_16.json"
coll() { "$BIN" plan --cluster "${CL:-$HERE/box.json}" --json --batch-size 2 --seq-len 128 --config "$@" | field "${F:-collectives_s}"; }
c1=$(coll "$CFG/m2.json" --ranks 1); c8=$(coll "$CFG/m2.json" --ranks 4); c16=$(coll "$D/m2_16.json" --ranks 4)
cc=$(coll "$D/m2_16.json" --ranks 4 --capacity 1.25)
d8=$(coll "$D/dense.json" --ranks 4); d16=$(coll "$D/dense_16.json" --ranks 4)
if awk -v a="$c1" -v b="$c8" -v c="$c16" -v d="$cc" -v e="$d8" -v f="$d16" 'BEGIN {
    exit !(a == 0 && b > 0 && c / b > 1.8 - 1e-4 && c / b < 1.8 + 1e-4 && d / c > 34 / 18 - 1e-4 && d / c < 34 / 18 + 1e-4 && e > 0 && e == f) }'
then ok; else bad "small all-reduces: m2 P=1 $c1, P=4 $c8 s, 16 layers $c16 s, with a capacity $cc s; dense $d8 / $d16 s"; fi
g0=$(F=grad_s coll "$D/dense.json" --ranks 4 --ranks-per-node 2); g1=$(CL=$D/sync.json F=grad_s coll "$D/dense.json" --ranks 4 --ranks-per-node 2)
s0=$(coll "$D/dense.json" --ranks 4 --ranks-per-node 2); s1=$(CL=$D/sync.json coll "$D/dense.json" --ranks 4 --ranks-per-node 2)
if awk -v a="$g0" -v b="$g1" -v c="$s0" -v d="$s1" 'BEGIN { w = 3 * 2 * 1e-3
    exit !((b - a) / w > 1 - 1e-6 && (b - a) / w < 1 + 1e-6 && (d - c) / (2 * w) > 1 - 1e-6 && (d - c) / (2 * w) < 1 + 1e-6) }'
then ok; else bad "waits of the all-reduces: grad $g0 -> $g1 s, small $s0 -> $s1 s at sync 1 ms, 2 ranks per node"; fi
a=$(plan --config "$CFG/m2.json" --ranks 2 --batch-size 2 --seq-len 128 | field activations)
b=$(plan --config "$CFG/m2.json" --ranks 2 --batch-size 2 --seq-len 128 --recompute block | field activations)
[ "$b" -lt "$a" ] && ok || bad "recompute block activations $b not below none's $a"
plan --config "$CFG/m2.json" --ranks 8 --batch-size 8 --seq-len 128 --search --top 50 >"$D/s.json" || bad "search failed"
if python3 - "$D/s.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s, "no layout"
t = [x["tokens_per_s"] for x in s]
assert t == sorted(t, reverse=True), "not sorted"
assert all(x["fits"] for x in s), "a layout that does not fit"
assert len({json.dumps(x["layout"], sort_keys=True) for x in s}) == len(s), "repeated layouts"
PY
then ok; else bad "search output"; fi
# On one node the exchanges are one layout: the search lists flat alone there, and
# every algorithm where the ranks span nodes (box.json: 2 ranks per node).
plan --config "$CFG/m2.json" --ranks 2 --ranks-per-node 2 --batch-size 8 --seq-len 128 --search --top 50 >"$D/s1.json" &&
  plan --config "$CFG/m2.json" --ranks 4 --batch-size 8 --seq-len 128 --search --top 200 >"$D/s2.json" || bad "search failed"
if python3 - "$D/s1.json" "$D/s2.json" <<'PY'
import json, sys
one = {x["layout"]["a2a"] for x in json.load(open(sys.argv[1])) if x["layout"]["expert_parallel"] > 1}
two = {x["layout"]["a2a"] for x in json.load(open(sys.argv[2])) if x["layout"]["expert_parallel"] > 1}
assert one == {"flat"}, one
assert two == {"flat", "hierarchical", "2d"}, two
PY
then ok; else bad "search's exchanges on one node and across nodes"; fi
# Latent attention (plan only): with one head's q/k and v sizes equal to the standard
# head size, the attention core costs what standard attention's does; doubling the
# value heads adds time; the FLOPs per token add 6 L T H (qk + v) for the core.
mla() {  # mla NAME QK V : m2 with latent attention of those head sizes
  python3 - "$CFG/m2.json" "$D/$1.json" "$2" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(kv_lora_rank=64, qk_nope_head_dim=int(sys.argv[3]), qk_rope_head_dim=0, v_head_dim=int(sys.argv[4]))
json.dump(c, open(sys.argv[2], "w"))
PY
}
mla mla_same 64 64
mla mla_wide 64 128
flags="--ranks 1 --batch-size 2 --seq-len 128"
a0=$(plan --config "$CFG/m2.json" $flags | field attention_s)
a1=$(plan --config "$D/mla_same.json" $flags | field attention_s)
a2=$(plan --config "$D/mla_wide.json" $flags | field attention_s)
if awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN { exit !(a > 0 && b / a > 1 - 1e-6 && b / a < 1 + 1e-6 && c > b) }'; then ok
else bad "latent attention's core: standard $a0 s, same sizes $a1 s, wider v $a2 s"; fi
fpt() { "$BIN" info --config "$1" --seq-len 128 | sed -n 's/^train FLOPs per token: *\([0-9.e+]*\).*/\1/p'; }
ap() { "$BIN" info --config "$1" | sed -n 's/^active matmul params: *\([0-9]*\).*/\1/p'; }
f1=$(fpt "$D/mla_same.json"); f2=$(fpt "$D/mla_wide.json"); p1=$(ap "$D/mla_same.json"); p2=$(ap "$D/mla_wide.json")
# wider v: the kv up-projection and o gain 8 heads x 64 x (64 + 512) per layer; the core 6 L T H 64
want=$(awk -v p1="$p1" 'BEGIN { printf "%.0f", p1 + 8 * (8 * 64 * (64 + 512)) }')
if [ "$p2" = "$want" ] &&
   awk -v a="$f1" -v b="$f2" -v d="$((p2 - p1))" 'BEGIN { w = 6 * d + 6 * 8 * 128 * 8 * 64; exit !((b - a) / w > 1 - 1e-3 && (b - a) / w < 1 + 1e-3) }'
then ok; else bad "latent attention's counts: params $p1 -> $p2 (wanted $want), FLOPs per token $f1 -> $f2"; fi
# The expected peak: dropless EP's grown heap at the expected rows, below the limit the
# report counts, rising with the imbalance; no grown heap (one rank, a capacity): the
# total with what is resident beyond or short of it (docs/PLANNER.md, Memory): one rank
# the huge blocks' tails, at most 2 MiB for each of 5 blocks; 4 ranks under ZeRO-1 less
# the reduce-scatter's unwritten own part (M2: 64 MiB / 4 less a page).
flags="--config $CFG/m2.json --ranks 4 --batch-size 2 --seq-len 128"
t=$(plan $flags | field total); e1=$(plan $flags --imbalance 1 | field expected_total)
e2=$(plan $flags --imbalance 2 | field expected_total); h=$(plan $flags | field moe_exchange_heap_bound)
c1=$(plan $flags --capacity 1.25 | field total); c2=$(plan $flags --capacity 1.25 | field expected_total)
s1=$(plan --config "$CFG/m2.json" --ranks 1 --batch-size 2 --seq-len 128 | field total)
s2=$(plan --config "$CFG/m2.json" --ranks 1 --batch-size 2 --seq-len 128 | field expected_total)
M=1048576
if [ -n "$t" ] && awk -v t="$t" -v a="$e1" -v b="$e2" -v h="$h" -v M=$M 'BEGIN { exit !(h > 0 && a < b && b < t && a >= t - h - 14 * M) }' &&
   awk -v c1="$c1" -v c2="$c2" -v s1="$s1" -v s2="$s2" -v M=$M 'BEGIN {
     exit !(s2 > s1 && s2 - s1 <= 10 * M && c1 - c2 >= 14 * M - 10 * M && c1 - c2 <= 14 * M) }'; then ok
else bad "expected peak: total $t (heap bound $h), imbalance 1 -> $e1, 2 -> $e2; capacity $c1/$c2; one rank $s1/$s2"; fi
# Without --imbalance or --load-cv the expected peak prices the heap at the most skewed
# loads the routing groups allow: above a skewed gate's (load cv 0.5), at most the
# collapsed groups' (load cv 100), below the limit; SWIPE's at imbalance 1.
ed=$(plan $flags | field expected_total); ei=$(plan $flags | field expected_imbalance)
eh=$(plan $flags --load-cv 0.5 | field expected_total); ec=$(plan $flags --load-cv 100 | field expected_total)
sflags="--config $D/swipe.json --ranks 4 --batch-size 2 --seq-len 128"
sw=$(plan $sflags | field expected_total); s1=$(plan $sflags --imbalance 1 | field expected_total)
if [ -n "$ed" ] && [ "$ed" = "$ec" ] && [ -n "$sw" ] && [ "$sw" = "$s1" ] &&
   awk -v d="$ed" -v h="$eh" -v t="$t" -v i="$ei" 'BEGIN { exit !(d > h && d < t && i > 1) }'; then ok
else bad "default expected peak $ed (imbalance $ei): load cv 0.5 $eh, 100 $ec, limit $t; SWIPE $sw vs $s1"; fi
# A model whose node's state fits the cache (cache_bytes, with cached GEMM rates and
# the cache's stream rate) is priced at those: tiny_moe (~5 MiB a rank) on one rank of
# a node gets a faster step and says so; at 2 per node (~10 MiB) past an 8 MiB cache it
# does not, nor does M2 (hundreds of MiB) at one, nor 4 ranks on a node of 2 ranks'
# cores with a 64 MiB cache (taking turns, they evict each other): each step equals the
# file's without the cache.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["gemm"]["fp32"] = [[f, r, 10, 2 * r] for f, r in c["gemm"]["fp32"]]
json.dump(c, open(f"{sys.argv[2]}/cold.json", "w"))
c.update(cache_bytes=8 * 2**20, cache_bandwidth=8e10)
json.dump(c, open(f"{sys.argv[2]}/cached.json", "w"))
c.update(cache_bytes=64 * 2**20)
json.dump(c, open(f"{sys.argv[2]}/big_cache.json", "w"))
PY
cplan() { "$BIN" plan --cluster "$D/$1.json" --json --config "${@:2}"; }
tiny=("$CFG/tiny_moe.json" --batch-size 4 --seq-len 32)
t_cold=$(cplan cold "${tiny[@]}" --ranks 1 --ranks-per-node 1); t_hot=$(cplan cached "${tiny[@]}" --ranks 1 --ranks-per-node 1)
t2_cold=$(cplan cold "${tiny[@]}" --ranks 2 --ranks-per-node 2 | field step_s)
t2_hot=$(cplan cached "${tiny[@]}" --ranks 2 --ranks-per-node 2)
m_cold=$(cplan cold "$CFG/m2.json" --ranks 1 --batch-size 1 --seq-len 64 | field step_s)
m_hot=$(cplan cached "$CFG/m2.json" --ranks 1 --batch-size 1 --seq-len 64)
a=$(field step_s <<<"$t_cold"); b=$(field step_s <<<"$t_hot")
if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < 0.8 * a) }' &&
   grep -q '"cache_resident": true' <<<"$t_hot" && grep -q '"cache_resident": false' <<<"$t_cold"
then ok; else bad "cache: tiny_moe at one rank $a s without, $b s with ($t_hot)"; fi
if [ -n "$t2_cold" ] && [ "$(field step_s <<<"$t2_hot")" = "$t2_cold" ] && grep -q '"cache_resident": false' <<<"$t2_hot" &&
   [ -n "$m_cold" ] && [ "$(field step_s <<<"$m_hot")" = "$m_cold" ] && grep -q '"cache_resident": false' <<<"$m_hot"
then ok; else bad "cache: past it, tiny_moe x 2 $t2_cold vs $(field step_s <<<"$t2_hot") s, M2 $m_cold vs $(field step_s <<<"$m_hot") s"; fi
t4_cold=$(cplan cold "${tiny[@]}" --ranks 4 --ranks-per-node 4 | field step_s)
t4_big=$(cplan big_cache "${tiny[@]}" --ranks 4 --ranks-per-node 4)
t2_big=$(cplan big_cache "${tiny[@]}" --ranks 2 --ranks-per-node 2)
if [ -n "$t4_cold" ] && [ "$(field step_s <<<"$t4_big")" = "$t4_cold" ] && grep -q '"cache_resident": false' <<<"$t4_big" &&
   grep -q '"cache_resident": true' <<<"$t2_big"
then ok; else bad "cache: 4 ranks on 2 ranks' cores $t4_cold vs $(field step_s <<<"$t4_big") s, or 2 ranks not resident in 64 MiB"; fi
# Unequal expert loads (--load-cv) put most of the FLOPs in the taller experts: with
# rates rising with a product's size (box.json) the experts' GEMMs take less time the
# larger the variation; with one rate for every shape, the same time at every variation.
python3 - "$HERE/box.json" "$D" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
del c["gemm"]
json.dump(c, open(f"{sys.argv[2]}/flat.json", "w"))
PY
spread=(--config "$CFG/m2.json" --ranks 1 --batch-size 2 --seq-len 128)
ge() { "$BIN" plan --cluster "$1" --json "${spread[@]}" --load-cv "$2" | field gemm_expert_s; }
g0=$(ge "$HERE/box.json" 0); g1=$(ge "$HERE/box.json" 0.7); g2=$(ge "$HERE/box.json" 1.5)
f0=$(ge "$D/flat.json" 0); f2=$(ge "$D/flat.json" 1.5)
if [ -n "$g0" ] && awk -v a="$g0" -v b="$g1" -v c="$g2" -v f="$f0" -v g="$f2" \
     'BEGIN { exit !(b < a && c < b && f > 0 && (f - g) * (f - g) <= 1e-18 * f * f) }'
then ok; else bad "expert load variation: box $g0 / $g1 / $g2 s at cv 0 / 0.7 / 1.5; one rate $f0 / $f2 s"; fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
