#!/usr/bin/env bash
# Every bad cluster file or plan flag gives one line naming the problem on stderr and
# exit code 2.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"
HERE=$(cd "$(dirname "$0")" && pwd)
M=$HERE/../../configs/tiny_moe.json
mk() {  # mk NAME PYTHON-EXPRESSION-ON-c : a variant of box.json
  python3 - "$HERE/box.json" "$D/$1.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
}
mk missing_nodes 'del c["nodes"]'
mk missing_intra 'del c["intra_node"]'
mk missing_bw 'del c["intra_node"]["bandwidth"]'
mk neg_peak 'c["peak_flops"]["fp32"] = -1'
mk neg_bw 'c["inter_node"]["bandwidth"] = -5e9'
mk neg_lat 'c["intra_node"]["latency"] = -1e-6'
mk zero_mem 'c["memory_per_node"] = 0'
mk str_rate 'c["memory_bandwidth"] = "fast"'
mk unknown 'c["colour"] = 1'
mk unknown_link 'c["inter_node"]["jitter"] = 1'
mk neg_xbw 'c["inter_node"]["exchange_bandwidth"] = -1e9'
mk bad_dtype 'c["peak_flops"]["int4"] = 1e12'
mk no_peak 'c["peak_flops"] = {}'
mk curve_order 'c["gemm"]["fp32"] = [[1e8, 1e11], [1e6, 2e10]]'
mk curve_point 'c["gemm"]["fp32"] = [[1e8, -1]]'
mk curve_ai 'c["gemm"]["fp32"] = [[1e8, 1e11, 0]]'
mk curve_cached 'c["gemm"]["fp32"] = [[1e8, 1e11, 30, -2e11]]'
mk curve_five 'c["gemm"]["fp32"] = [[1e8, 1e11, 30, 2e11, 1]]'
mk cache_alone 'c["cache_bytes"] = 3.2e7'
mk cache_neg 'c.update(cache_bytes=3.2e7, cache_bandwidth=-1e11)'
mk node_bw 'c["node_memory_bandwidth"] = -1'
mk act_bw 'c["activation_bandwidth"] = 0'
mk opt_bw 'c["optimizer_bandwidth"] = -2e10'
mk node_opt_bw 'c["node_optimizer_bandwidth"] = "fast"'
mk round_bw 'c["rounding_bandwidth"] = 0'
mk node_round_bw 'c["node_rounding_bandwidth"] = -3e10'
mk reduce_bw 'c["reduce_bandwidth"] = 0'
mk bulk_bw 'c["intra_node"]["bulk_bandwidth"] = -1e9'
mk inter_bulk 'c["inter_node"]["bulk_bandwidth"] = 1e9'
mk curve_no_peak 'c["gemm"]["fp16"] = [[1e8, 1e11]]'
mk frac_nodes 'c["nodes"] = 2.5'
mk oversub 'c["topology"]["oversubscription"] = 0.5'
mk huge_supernode 'c["topology"]["supernode_nodes"] = 1e300'
mk eff 'c["gemm_efficiency"] = 1.5'
mk speedup_high 'c["node_gemm_speedup"] = 3'
mk speedup_neg 'c["node_activation_speedup"] = -1'
printf '{"nodes": 1,' >"$D/truncated.json"
echo '[1, 2]' >"$D/array.json"
run() { "$BIN" plan --config "$M" --cluster "$1" "${@:2}"; }
expect missing-nodes 'missing key "nodes"' -- run "$D/missing_nodes.json"
expect missing-intra 'missing key "intra_node"' -- run "$D/missing_intra.json"
expect missing-bw 'missing key "intra_node.bandwidth"' -- run "$D/missing_bw.json"
expect neg-peak '"peak_flops.fp32" must be positive' -- run "$D/neg_peak.json"
expect neg-bw '"inter_node.bandwidth" must be positive' -- run "$D/neg_bw.json"
expect neg-lat '"intra_node.latency" must be non-negative' -- run "$D/neg_lat.json"
expect zero-mem '"memory_per_node" must be positive' -- run "$D/zero_mem.json"
expect str-rate '"memory_bandwidth" must be a number' -- run "$D/str_rate.json"
expect unknown 'unknown key "colour"' -- run "$D/unknown.json"
expect unknown-link 'unknown key "inter_node.jitter"' -- run "$D/unknown_link.json"
expect neg-xbw '"inter_node.exchange_bandwidth" must be positive' -- run "$D/neg_xbw.json"
expect bad-dtype 'has key "int4"' -- run "$D/bad_dtype.json"
expect no-peak '"peak_flops" names no dtype' -- run "$D/no_peak.json"
expect curve-order 'increasing flops' -- run "$D/curve_order.json"
expect curve-ai 'intensity > 0' -- run "$D/curve_ai.json"
expect curve-cached 'cached rate > 0' -- run "$D/curve_cached.json"
expect curve-five 'point 0 must be' -- run "$D/curve_five.json"
expect cache-alone '"cache_bytes" and "cache_bandwidth" go together' -- run "$D/cache_alone.json"
expect cache-neg '"cache_bandwidth" must be positive' -- run "$D/cache_neg.json"
expect node-bw '"node_memory_bandwidth" must be' -- run "$D/node_bw.json"
expect act-bw '"activation_bandwidth" must be positive' -- run "$D/act_bw.json"
expect opt-bw '"optimizer_bandwidth" must be positive' -- run "$D/opt_bw.json"
expect node-opt-bw '"node_optimizer_bandwidth" must be a number' -- run "$D/node_opt_bw.json"
expect round-bw '"rounding_bandwidth" must be positive' -- run "$D/round_bw.json"
expect node-round-bw '"node_rounding_bandwidth" must be positive' -- run "$D/node_round_bw.json"
expect reduce-bw '"reduce_bandwidth" must be positive' -- run "$D/reduce_bw.json"
expect bulk-bw '"intra_node.bulk_bandwidth" must be positive' -- run "$D/bulk_bw.json"
expect inter-bulk 'inter_node.bulk_bandwidth' -- run "$D/inter_bulk.json"
expect curve-point 'point 0 must be' -- run "$D/curve_point.json"
expect curve-no-peak 'without "peak_flops.fp16"' -- run "$D/curve_no_peak.json"
expect frac-nodes '"nodes" must be a whole number' -- run "$D/frac_nodes.json"
expect oversub 'oversubscription" must be >= 1' -- run "$D/oversub.json"
expect huge-supernode '"topology.supernode_nodes" must be a whole number' -- run "$D/huge_supernode.json"
expect eff 'efficiencies must be at most 1' -- run "$D/eff.json"
expect speedup-high 'node speedup must be at most ranks_per_node (2)' -- run "$D/speedup_high.json"
expect speedup-neg '"node_activation_speedup" must be positive' -- run "$D/speedup_neg.json"
expect truncated 'not valid JSON' -- run "$D/truncated.json"
expect array 'must be a JSON object' -- run "$D/array.json"
expect missing-file 'cannot open' -- run "$D/nope.json"
expect no-cluster '--config and --cluster are required' -- "$BIN" plan --config "$M"
expect bad-config 'cannot open config' -- "$BIN" plan --config "$D/nope.json" --cluster "$HERE/box.json"
python3 -c "import json,sys; c=json.load(open(sys.argv[1])); c.update(v_head_dim=64, kv_lora_rank=0); json.dump(c, open(sys.argv[2], 'w'))" "$M" "$D/mla_bad.json"
expect mla-sizes 'latent attention needs v_head_dim, kv_lora_rank' -- "$BIN" plan --config "$D/mla_bad.json" --cluster "$HERE/box.json"
expect too-many-ranks 'need 9 nodes' -- run "$HERE/box.json" --ranks 18
expect bad-ep 'expert-parallel degree 3' -- run "$HERE/box.json" --ranks 4 --expert-parallel 3
expect bad-a2a '--a2a must be flat, hierarchical or 2d' -- run "$HERE/box.json" --a2a ring
expect bad-dtype-flag 'dtype must be fp32' -- run "$HERE/box.json" --dtype int8
expect no-rate 'offers no fp16 rate' -- run "$HERE/box.json" --dtype fp16
expect bad-zero '--zero must be 0 or 1' -- run "$HERE/box.json" --zero 2
expect long-seq 'exceeds the model' -- run "$HERE/box.json" --seq-len 65
expect tp-divide 'must divide --ranks' -- run "$HERE/box.json" --ranks 4 --tensor-parallel 3
expect calibrate-out '--calibrate needs --out' -- "$BIN" plan --calibrate
expect calibrate-nodes '--nodes must be >= 1' -- "$BIN" plan --calibrate --out "$D/c.json" --nodes 0
expect inter-probe 'the inter-node probe under "false" failed' -- \
  "$BIN" plan --calibrate --out "$D/c.json" --inter-launcher false
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
