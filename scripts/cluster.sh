#!/usr/bin/env bash
# An emulated multi-node cluster on one machine: each node is a network namespace
# with its own hostname (a UTS namespace entered per command), joined to a bridge by a
# veth pair whose two ends are rate-capped with tbf (the kernel has no netem, so no
# latency can be added), paced at the rate even inside tbf's burst. OpenMPI treats
# ranks on different hostnames as different nodes: shared memory inside a node, TCP
# over the veth links between nodes.
#
#   scripts/cluster.sh up N_NODES [--link-rate 1gbit] [--name NAME]
#   scripts/cluster.sh run [--name NAME] RANKS_PER_NODE -- PROGRAM ARGS...
#   scripts/cluster.sh down [--name NAME]
#
# NAME (default bgc) keeps parallel clusters apart: namespaces NAME-n0.., bridge
# NAME-br, a subnet of 10.213.0.0/16 chosen from NAME, state in /tmp/bagualu-cluster-NAME.
# Only addresses inside that subnet are used. `down` (and a failed `up`) removes
# everything the cluster made. Exit 4 (and one line) where namespaces cannot be made;
# exit 2, nothing made, where tc cannot read the --link-rate.
#
# TCP between nodes: messages up to CLUSTER_TCP_EAGER bytes (default 4 MiB; 0: OpenMPI's
# own 64 KiB and autotuned sockets) are sent eagerly into socket buffers that size, so the
# kernel moves a chunk's bytes while the ranks compute. OpenMPI's TCP transport moves
# bytes only inside MPI calls: a larger (rendezvous) message waits for the receiver's
# next call before its bulk leaves, which the overlap of the exchange cannot hide.
# CLUSTER_BTL (default tcp,vader,self) names the transports: tcp,self sends a node's
# intra-node messages over TCP too, which completes a send without its receiver running
# where shared memory's rendezvous needs both to take turns on shared cores.
set -euo pipefail

die() { echo "cluster: $*" >&2; exit "${2:-2}"; }
name=bgc
parse_name() { if [ "${1:-}" = --name ]; then [ -n "${2:-}" ] || die "--name needs a value"; name=$2; return 0; fi; return 1; }

state_dir() { echo "/tmp/bagualu-cluster-$name"; }
# Third octet of the subnet from the name, so two clusters of different names differ.
subnet_octet() { echo $(( $(printf '%s' "$name" | cksum | cut -d' ' -f1) % 200 + 20 )); }

down() {
  local sd; sd=$(state_dir)
  local n=0
  [ -f "$sd/nodes" ] && n=$(wc -l <"$sd/nodes")
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$name-n[0-9]+$" || true); do
    # Whatever still runs in a node (an orphaned rank) goes with it.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  for i in $(seq 0 $((n > 0 ? n - 1 : 63))); do ip link del "$name-v$i" 2>/dev/null || true; done
  ip link del "$name-br" 2>/dev/null || true
  rm -rf "$sd"
}

# The peak rate for RATE in bit/s (tbf wants it above the rate), as tc reads RATE: a
# tbf on the probe namespace's loopback; fails where tc cannot read it. tbf lets a
# 256 KB burst through at the host's speed, so a message of an exchange (tens of KB)
# would never meet the link's rate: a peak of the rate + 0.1% over 16 KB buckets paces it.
peak_rate() {
  ip netns exec "$name-probe" tc qdisc add dev lo root tbf rate "$1" burst 256kb latency 50ms 2>/dev/null || return 1
  local bytes
  bytes=$(ip netns exec "$name-probe" tc -j qdisc show dev lo | grep -o '"rate":[0-9]*' | cut -d: -f2)
  [ -n "$bytes" ] && [ "$bytes" -gt 0 ] || return 1
  echo "$(( bytes * 8 + bytes * 8 / 1000 + 1 ))bit"
}

up() {
  local nodes=${1:-}; shift || true
  local rate=""
  while [ $# -gt 0 ]; do
    case $1 in
      --link-rate) rate=${2:-}; [ -n "$rate" ] || die "--link-rate needs a value (e.g. 1gbit)"; shift 2 ;;
      --name) name=${2:-}; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ "$nodes" =~ ^[0-9]+$ ]] && [ "$nodes" -ge 1 ] && [ "$nodes" -le 64 ] || die "up: N_NODES must be 1..64"
  [[ "$name" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name must be 1-8 lowercase letters/digits starting with a letter"
  [ "$(id -u)" = 0 ] || die "cannot create network namespaces: not root" 4
  ip netns add "$name-probe" 2>/dev/null || die "cannot create network namespaces (no CAP_NET_ADMIN?)" 4
  local peak=""
  if [ -n "$rate" ]; then
    peak=$(peak_rate "$rate") || { ip netns del "$name-probe"; die "--link-rate '$rate': tc cannot read it (e.g. 1gbit, 500mbit)"; }
  fi
  ip netns del "$name-probe"
  local sd; sd=$(state_dir)
  [ -e "$sd" ] && die "cluster '$name' is already up (scripts/cluster.sh down --name $name)"
  trap 'down; die "up failed: removed what was made" 1' ERR INT TERM
  mkdir -p "$sd"
  local o; o=$(subnet_octet)
  echo "10.213.$o.0/24" >"$sd/subnet"
  ip link add "$name-br" type bridge
  ip addr add "10.213.$o.254/24" dev "$name-br"
  ip link set "$name-br" up
  for i in $(seq 0 $((nodes - 1))); do
    local ns="$name-n$i"
    ip netns add "$ns"
    ip link add "$name-v$i" type veth peer name eth0 netns "$ns"
    ip link set "$name-v$i" master "$name-br" up
    ip -n "$ns" addr add "10.213.$o.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    if [ -n "$rate" ]; then
      # Both directions: the node's egress on its side, its ingress as the bridge side's egress.
      local tbf=(tbf rate "$rate" burst 256kb latency 50ms peakrate "$peak" mtu 16kb)
      tc qdisc add dev "$name-v$i" root "${tbf[@]}"
      ip netns exec "$ns" tc qdisc add dev eth0 root "${tbf[@]}"
    fi
    echo "$ns" >>"$sd/nodes"
  done
  echo "${rate:-unlimited}" >"$sd/rate"
  # mpirun's rsh agent: runs the daemon's command inside the node's namespaces, with
  # the node's name as hostname (OpenMPI groups ranks into nodes by hostname).
  cat >"$sd/agent" <<'AGENT'
#!/bin/sh
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c "hostname $host; $*"
AGENT
  chmod +x "$sd/agent"
  trap - ERR INT TERM
  echo "cluster '$name': $nodes nodes on 10.213.$o.0/24, links ${rate:-unlimited}"
}

run() {
  local sd; sd=$(state_dir)
  [ -f "$sd/nodes" ] || die "cluster '$name' is not up (scripts/cluster.sh up N)"
  local rpn=${1:-}; shift || true
  [[ "$rpn" =~ ^[0-9]+$ ]] && [ "$rpn" -ge 1 ] || die "run: RANKS_PER_NODE must be a positive number"
  [ "${1:-}" = -- ] && shift
  [ $# -gt 0 ] || die "run: no program given"
  local n; n=$(wc -l <"$sd/nodes")
  awk -v s="$rpn" '{print $1 " slots=" s}' "$sd/nodes" >"$sd/hostfile"
  local subnet; subnet=$(cat "$sd/subnet")
  # Programs are run from the root file system, which every namespace shares.
  # Every node's daemon would bind its first rank to core 0 of the one machine the nodes
  # share, so all nodes' first ranks would run on one core: binding is left to the kernel.
  local eager=${CLUSTER_TCP_EAGER:-4194304} tcp=()
  [[ "$eager" =~ ^[0-9]+$ ]] || die "CLUSTER_TCP_EAGER must be a number of bytes"
  [ "$eager" -gt 0 ] && tcp=(--mca btl_tcp_eager_limit "$eager" --mca btl_tcp_rndv_eager_limit "$eager"
                             --mca btl_tcp_sndbuf "$eager" --mca btl_tcp_rcvbuf "$eager")
  local btl=${CLUSTER_BTL:-tcp,vader,self}
  [[ "$btl" =~ ^[a-z,]+$ ]] || die "CLUSTER_BTL must be a list of OpenMPI transports, e.g. tcp,vader,self"
  local pass_env=(-x PATH) v
  for v in LD_LIBRARY_PATH OMP_NUM_THREADS; do [ -n "${!v:-}" ] && pass_env+=(-x "$v"); done
  mpirun --allow-run-as-root --oversubscribe -np $((n * rpn)) --hostfile "$sd/hostfile" \
    --map-by "ppr:$rpn:node" --bind-to none --mca plm_rsh_agent "$sd/agent" \
    --mca btl "$btl" --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" \
    "${tcp[@]}" \
    "${pass_env[@]}" --wdir "$PWD" "$@"
}

cmd=${1:-}; shift || true
case $cmd in
  up) up "$@" ;;
  run) parse_name "$@" && shift 2; run "$@" ;;
  down) parse_name "$@" || true; down ;;
  *) die "usage: scripts/cluster.sh up N_NODES [--link-rate RATE] [--name NAME] | run [--name NAME] RANKS_PER_NODE -- PROG ARGS | down [--name NAME]" ;;
esac
