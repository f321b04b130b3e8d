# Sourced by bench/refactor_bits.sh and bench/ab_step.sh: the base commit $BASE checked
# out in a git worktree under BITS_DIR (default /tmp/bagualu-bits), and builds of one
# target in it and in this tree (NEW_BUILD, default build/). Sets ROOT, BITS_DIR,
# NEW_BUILD, base_sha and base_tree; defines base_build TARGET.
ROOT=$PWD
BITS_DIR=${BITS_DIR:-/tmp/bagualu-bits}
NEW_BUILD=${NEW_BUILD:-$ROOT/build}
base_sha=$(git rev-parse --verify "$BASE^{commit}") ||
    { echo "$(basename "$0"): unknown commit $BASE" >&2; exit 2; }
base_tree=$BITS_DIR/base-${base_sha:0:12}
mkdir -p "$BITS_DIR"
if [ ! -d "$base_tree" ]; then
    git worktree prune
    git worktree add --detach "$base_tree" "$base_sha" >/dev/null 2>&1
fi

# Builds TARGET in the base worktree and in this tree (configured when not yet).
base_build() {
    local src dir
    for src in "$base_tree" "$ROOT"; do
        dir=$([ "$src" = "$ROOT" ] && echo "$NEW_BUILD" || echo "$src/build")
        [ -f "$dir/CMakeCache.txt" ] || cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
        cmake --build "$dir" -j "$(nproc)" --target "$1" >/dev/null
    done
}
