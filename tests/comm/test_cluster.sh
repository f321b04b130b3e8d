#!/usr/bin/env bash
# The emulated cluster (scripts/cluster.sh): P=4 on 2 namespace nodes gives the bits of
# the same layout on one box with --ranks-per-node 2 (losses and the all-to-all's
# inter-node bytes), whatever transports CLUSTER_BTL names, and losses within 1e-5 of
# one process; a --link-rate tc cannot read is refused before anything is made, a bad
# CLUSTER_BTL in one line. Skipped (exit 77) where network namespaces cannot be made or
# the build has no MPI.
. "$(dirname "$0")/dist_launch.sh"
dist_have_mpi || exit 77
BIN=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
CLUSTER=$(cd "$(dirname "$0")/../../scripts" && pwd)/cluster.sh
CFG=$(cd "$(dirname "$0")/../../configs" && pwd)/tiny_moe.json
D=$(mktemp -d)
NAME=t$(( $$ % 10000000 ))
trap '"$CLUSTER" down --name $NAME; rm -rf "$D"' EXIT
pass=0; fail=0
ok() { pass=$((pass+1)); echo "ok   $*"; }
bad() { fail=$((fail+1)); echo "FAIL $*"; }

out=$("$CLUSTER" up 2 --link-rate 1gbit --name "$NAME" 2>&1); rc=$?
if [ $rc = 4 ]; then echo "SKIP: $out"; exit 77; fi
[ $rc = 0 ] || { echo "FAIL cluster up: $out"; exit 1; }
# A link rate tc cannot read: one line, exit 2, and nothing made (no namespace, bridge
# or state of that name).
BADNAME=b$(( $$ % 10000000 ))
"$CLUSTER" up 2 --link-rate 1gibberish --name "$BADNAME" >"$D/bad.out" 2>"$D/bad.err"; rc=$?
if [ $rc = 2 ] && [ "$(wc -l <"$D/bad.err")" = 1 ] && grep -q "link-rate" "$D/bad.err" && [ ! -s "$D/bad.out" ] &&
   ! ip netns list | grep -q "^$BADNAME-" && ! ip link show "$BADNAME-br" >/dev/null 2>&1 &&
   [ ! -e "/tmp/bagualu-cluster-$BADNAME" ]
then ok "a link rate tc cannot read: exit 2, one line, nothing made"
else bad "bad link rate: exit $rc, $(cat "$D/bad.err")"; "$CLUSTER" down --name "$BADNAME"; fi

"$BIN" synth --vocab 64 --tokens 30000 --out "$D/t.bin" >/dev/null
args=(train --config "$CFG" --data "$D/t.bin" --threads 1 --steps 6 --seq-len 32 --warmup 2 --lr 3e-3)
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | cut -d: -f2; }

"$BIN" "${args[@]}" --batch-size 8 --log "$D/p1.jsonl" >/dev/null 2>"$D/err" || { cat "$D/err"; bad "P=1 run"; }
timeout 120 "${DIST_MPIRUN[@]}" -np 4 "$BIN" "${args[@]}" --batch-size 2 --expert-parallel 4 \
  --ranks-per-node 2 --log "$D/box.jsonl" >/dev/null 2>"$D/err" || { tail -3 "$D/err"; bad "P=4 one box"; }
if OMP_NUM_THREADS=1 timeout 180 "$CLUSTER" run --name "$NAME" 2 -- "$BIN" "${args[@]}" --batch-size 2 \
    --expert-parallel 4 --log "$D/nodes.jsonl" >"$D/out" 2>"$D/err"; then
  grep -q ', 2 nodes,' "$D/out" && ok "2 nodes detected" || bad "2 nodes not detected: $(grep model: "$D/out")"
  if [ -n "$(field "$D/nodes.jsonl" loss)" ] && [ "$(field "$D/nodes.jsonl" loss)" = "$(field "$D/box.jsonl" loss)" ]; then
    ok "losses bitwise equal to one box with --ranks-per-node 2"
  else bad "losses differ from one box: $(field "$D/nodes.jsonl" loss | tr '\n' ' ') vs $(field "$D/box.jsonl" loss | tr '\n' ' ')"; fi
  inter=$(field "$D/nodes.jsonl" a2a_bytes_inter | tr '\n' ' ')
  if [ "$inter" = "$(field "$D/box.jsonl" a2a_bytes_inter | tr '\n' ' ')" ] &&
     awk -v x="${inter%% *}" 'BEGIN{exit !(x > 0)}'; then
    ok "inter-node all-to-all bytes as on one box ($inter)"
  else bad "inter-node bytes: $inter vs $(field "$D/box.jsonl" a2a_bytes_inter | tr '\n' ' ')"; fi
  w=$(paste <(field "$D/nodes.jsonl" loss) <(field "$D/p1.jsonl" loss) |
      awk '{d=$1-$2; if(d<0)d=-d; r=d/$2; if(r>w)w=r} END{printf "%.3g", w+0}')
  awk -v w="$w" 'BEGIN{exit !(w <= 1e-5)}' && ok "losses within 1e-5 of one process (worst $w)" || bad "P=1 vs nodes: worst $w"
else bad "P=4 on 2 emulated nodes: exit $?"; tail -5 "$D/err"; fi
# CLUSTER_BTL: the transports change no bit (intra-node messages over TCP here), and a
# value that is no list of transports is refused in one line, exit 2, before mpirun.
if CLUSTER_BTL=tcp,self OMP_NUM_THREADS=1 timeout 180 "$CLUSTER" run --name "$NAME" 2 -- "$BIN" "${args[@]}" \
    --batch-size 2 --expert-parallel 4 --log "$D/tcp.jsonl" >/dev/null 2>"$D/err" &&
   [ -n "$(field "$D/tcp.jsonl" loss)" ] && [ "$(field "$D/tcp.jsonl" loss)" = "$(field "$D/box.jsonl" loss)" ]; then
  ok "CLUSTER_BTL=tcp,self: losses bitwise equal to one box"
else bad "CLUSTER_BTL=tcp,self: $(field "$D/tcp.jsonl" loss | tr '\n' ' ') $(tail -2 "$D/err")"; fi
CLUSTER_BTL='tcp;true' "$CLUSTER" run --name "$NAME" 2 -- true >/dev/null 2>"$D/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$D/err")" = 1 ] && grep -q CLUSTER_BTL "$D/err" && ok "a bad CLUSTER_BTL: exit 2, one line" ||
  bad "bad CLUSTER_BTL: exit $rc, $(cat "$D/err")"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
