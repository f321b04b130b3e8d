#!/usr/bin/env bash
# bagualu against its PyTorch peer (bench/peer_torch.py) in one run, one table.
#   bench/run_peer.sh [build-dir]          (default build-dir: build)
# Per model (M1: configs/m1.json, context 256; M2: configs/m2.json, context 512; batch 8):
#   bagualu  build/bench/bench_step --threads 2 --steps 10 --dtype fp32|bf16
#   peer default  /usr/bin/python3 bench/peer_torch.py, environment as it is, torch's own
#                 thread count and whatever libblas.so.3 the system alternative points to
#   peer tuned    the fastest set-up found on this machine: tcmalloc preloaded, Debian's
#                 OpenMP OpenBLAS for libblas.so.3, OPENBLAS_L2_SIZE unset, OPENBLAS_CORETYPE
#                 unset (OpenBLAS detects the core) or, on AVX-512 CPUs, SkylakeX when a
#                 trial GEMM runs faster with it (PEER_CORETYPE=name|"" forces one),
#                 torch.set_num_threads(2)
# fp32 and bf16 autocast for the peer. Knobs (environment):
#   STEPS=10 THREADS=2 REPEAT=1 (runs of each configuration; the table takes the median)
#   MODELS="m1 m2" DTYPES="fp32 bf16"  (models: m1 m2 m3 gpt2_4x64 gpt2_8x256)
#   BENCH_EXTRA=""          extra bench_step flags (e.g. "--gemm-alone 1")
#   PEER_DEFAULT_MAX_S=300  time budget of one default-configuration run: with the reference
#                 BLAS a step takes minutes, so it times fewer steps (the table says n=)
#   PEER_TUNED_ENV=""       extra VAR=value words for the tuned command (e.g. OMP_WAIT_POLICY=PASSIVE)
#   PEER_DEFAULT=1          0 skips the (slow) default-configuration runs, e.g. for REPEAT=3
#   PEER_TUNED_MAX_S=0      time budget of one tuned run (0: none), for a peer that emulates
#                           bf16 (PyTorch on an AVX2-only CPU)
# Never a timed test: the figures depend on what else runs on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
STEPS=${STEPS:-10}
THREADS=${THREADS:-2}
REPEAT=${REPEAT:-1}
MODELS=${MODELS:-m1 m2}
DTYPES=${DTYPES:-fp32 bf16}
PEER_DEFAULT_MAX_S=${PEER_DEFAULT_MAX_S:-300}
PEER_TUNED_ENV=${PEER_TUNED_ENV:-}
PEER_DEFAULT=${PEER_DEFAULT:-1}
PEER_TUNED_MAX_S=${PEER_TUNED_MAX_S:-0}
BENCH_EXTRA=${BENCH_EXTRA:-}
PY=/usr/bin/python3
LIBDIR=/usr/lib/x86_64-linux-gnu
OUT=$(mktemp -d "${TMPDIR:-/tmp}/bagualu-peer.XXXXXX")
echo "run_peer: raw outputs in $OUT"

# --- bagualu's bench_step ---------------------------------------------------------------
if [ -d "$BUILD" ]; then
    cmake --build "$BUILD" --target bench_step >"$OUT/build.log" 2>&1 ||
        echo "run_peer: warning: building bench_step failed (see $OUT/build.log); using the binary as it is"
fi
BENCH=
for b in "$BUILD/bench/bench_step" "$BUILD/bench_step"; do
    if [ -x "$b" ]; then BENCH=$b; break; fi
done
[ -n "$BENCH" ] || { echo "run_peer: no bench_step under $BUILD (configure and build first)" >&2; exit 2; }
# bench_step takes --dtype once it has one; until then it answers "unknown flag --dtype".
BAGUALU_BF16=1
case $("$BENCH" --dtype bf16 --steps 0 2>&1 || true) in *"unknown flag"*) BAGUALU_BF16=0 ;; esac

# --- the tuned peer's libraries -----------------------------------------------------------
apt_ok() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; }
TCMALLOC=$LIBDIR/libtcmalloc.so.4
if [ ! -e "$TCMALLOC" ] && apt_ok; then
    echo "run_peer: installing libgoogle-perftools4 (tcmalloc)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        -o DPkg::Lock::Timeout=300 libgoogle-perftools4 >"$OUT/apt.log" 2>&1 || true
fi
[ -e "$TCMALLOC" ] || { echo "run_peer: warning: no tcmalloc; the tuned peer runs with glibc malloc"; TCMALLOC=; }

# The OpenMP OpenBLAS: the installed one if any, else the Debian package unpacked under the
# build directory. Not installed on purpose: installing it would move the system's
# libblas.so.3 alternative (priority 100 over the reference BLAS's 10) and so change the
# "default" configuration measured here, and every other program's BLAS.
OPENBLAS_DIR=$LIBDIR/openblas-openmp
if [ ! -e "$OPENBLAS_DIR/libblas.so.3" ]; then
    OPENBLAS_DIR=$(cd "$BUILD" 2>/dev/null && pwd || pwd)/peer_deps/usr/lib/x86_64-linux-gnu/openblas-openmp
    if [ ! -e "$OPENBLAS_DIR/libblas.so.3" ] && command -v apt-get >/dev/null; then
        echo "run_peer: fetching Debian's libopenblas0-openmp (unpacked under $BUILD/peer_deps, not installed)"
        dl=$(mktemp -d)
        chmod 777 "$dl"
        if (cd "$dl" && apt-get download -q libopenblas0-openmp >"$OUT/apt-download.log" 2>&1); then
            mkdir -p "$BUILD/peer_deps"
            dpkg-deb -x "$dl"/libopenblas0-openmp_*.deb "$BUILD/peer_deps"
        fi
        rm -rf "$dl"
    fi
fi
[ -e "$OPENBLAS_DIR/libblas.so.3" ] ||
    { echo "run_peer: warning: no OpenMP OpenBLAS; the tuned peer uses the system libblas.so.3"; OPENBLAS_DIR=; }

# OpenBLAS's core type: the one it detects, or on AVX-512 CPUs SkylakeX, whichever runs an
# fp32 GEMM faster (Debian's 0.3.21 does not recognise some newer Xeons and falls back to
# a slow core; OPENBLAS_CORETYPE must be set before torch loads). CORETYPE="" keeps the
# detected one. PEER_CORETYPE=name skips the trial.
CORETYPE=${PEER_CORETYPE-}
tuned() {
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE \
        ${CORETYPE:+OPENBLAS_CORETYPE=$CORETYPE} \
        ${TCMALLOC:+LD_PRELOAD=$TCMALLOC${LD_PRELOAD:+:$LD_PRELOAD}} \
        ${OPENBLAS_DIR:+LD_LIBRARY_PATH=$OPENBLAS_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} \
        $PEER_TUNED_ENV "$@"
}
# GFLOP/s of torch.mm (fp32, 1024^3, best of 5) and the core OpenBLAS chose, under tuned().
gemm_trial() {
    tuned "$PY" - "$THREADS" <<'PYEOF' 2>/dev/null
import ctypes, os, sys, time
import torch
torch.set_num_threads(int(sys.argv[1]))
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
torch.mm(a, b)
best = min((lambda t0: (torch.mm(a, b), time.perf_counter() - t0)[1])(time.perf_counter()) for _ in range(5))
core = "?"
for line in open("/proc/self/maps"):
    p = line.split()[-1]
    if "blas" in os.path.basename(p).lower() and p.endswith((".so", ".so.0", ".so.3")) or "openblas" in p:
        try:
            lib = ctypes.CDLL(p, mode=os.RTLD_NOLOAD)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            core = lib.openblas_get_corename().decode()
            break
        except (OSError, AttributeError):
            pass
print(f"{2 * 1024**3 / best / 1e9:.1f} {core}")
PYEOF
}
if [ -z "${PEER_CORETYPE+set}" ]; then
    CORETYPE=
    read -r g_det core_det <<<"$(gemm_trial || echo "0 ?")"
    msg="run_peer: OpenBLAS core detected: ${core_det:-?} ${g_det:-0} GFLOP/s (torch.mm 1024^3 fp32)"
    if grep -qw avx512f /proc/cpuinfo && [ "${core_det,,}" != skylakex ]; then
        CORETYPE=SkylakeX
        read -r g_skx core_skx <<<"$(gemm_trial || echo "0 ?")"
        msg="$msg; SkylakeX: ${g_skx:-0} GFLOP/s"
        awk -v a="${g_det:-0}" -v b="${g_skx:-0}" 'BEGIN { exit !(b > a) }' || CORETYPE=
    fi
    echo "$msg -> tuned peer uses ${CORETYPE:-the detected core}"
fi

# --- runs (configurations interleaved, so that a burst of load hits them alike) -----------
# A model name -> its config, batch, sequence length and the peer's --model.
shape_of() {
    case $1 in
    m1) echo "configs/m1.json 8 256 m1" ;;
    m2) echo "configs/m2.json 8 512 m2" ;;
    m3) echo "configs/m3.json 8 512 m3" ;;
    gpt2_4x64) echo "configs/gpt2_124m.json 4 64 gpt2" ;;
    gpt2_8x256) echo "configs/gpt2_124m.json 8 256 gpt2" ;;
    *) echo "run_peer: unknown model $1" >&2; exit 2 ;;
    esac
}
for r in $(seq 1 "$REPEAT"); do
    for m in $MODELS; do
        read -r CFG B T PM <<<"$(shape_of "$m")"
        for d in $DTYPES; do
            if [ "$d" = fp32 ] || [ "$BAGUALU_BF16" = 1 ]; then
                echo "run_peer: [$r/$REPEAT] bagualu $m $d"
                extra=
                [ "$BAGUALU_BF16" = 1 ] && extra="--dtype $d"
                /usr/bin/time -f "MAXRSS_KB %M" -o "$OUT/bagualu.$m.$d.$r.time" \
                    "$BENCH" --config "$CFG" --batch "$B" --seq "$T" --threads "$THREADS" \
                    --steps "$STEPS" $extra $BENCH_EXTRA >"$OUT/bagualu.$m.$d.$r.txt" 2>&1 ||
                    echo "run_peer: bagualu $m $d failed (see $OUT/bagualu.$m.$d.$r.txt)"
            fi
            echo "run_peer: [$r/$REPEAT] peer tuned $m $d"
            tuned "$PY" bench/peer_torch.py --model "$PM" --batch "$B" --seq "$T" --dtype "$d" \
                --threads "$THREADS" --steps "$STEPS" --max-seconds "$PEER_TUNED_MAX_S" >"$OUT/tuned.$m.$d.$r.txt" 2>&1 ||
                echo "run_peer: peer tuned $m $d failed (see $OUT/tuned.$m.$d.$r.txt)"
            [ "$PEER_DEFAULT" = 1 ] || continue
            echo "run_peer: [$r/$REPEAT] peer default $m $d"
            "$PY" bench/peer_torch.py --model "$PM" --batch "$B" --seq "$T" --dtype "$d" --steps "$STEPS" \
                --max-seconds "$PEER_DEFAULT_MAX_S" >"$OUT/default.$m.$d.$r.txt" 2>&1 ||
                echo "run_peer: peer default $m $d failed (see $OUT/default.$m.$d.$r.txt)"
        done
    done
done

# --- the table ----------------------------------------------------------------------------
"$PY" - "$OUT" "$MODELS" "$DTYPES" "$THREADS" "$(uptime)" <<'EOF'
import glob, json, os, re, statistics, sys
out, models, dtypes, threads, load = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4], sys.argv[5]

def num(pattern, text):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None

def bagualu(m, d):
    runs = []
    for f in sorted(glob.glob(f"{out}/bagualu.{m}.{d}.*.txt")):
        t = open(f).read()
        ms = num(r"median ([\d.]+) ms", t)
        if ms is None:
            continue
        rss = num(r"MAXRSS_KB (\d+)", open(f[:-4] + ".time").read()) if os.path.exists(f[:-4] + ".time") else None
        runs.append({"ms": ms, "min": num(r"\(min ([\d.]+)", t), "gflops": num(r"\| ([\d.]+) GFLOP/s \|", t),
                     "fma": num(r"FMA peak ([\d.]+)", t), "gemm": num(r"GEMM[^|]*? ([\d.]+) GFLOP/s", t),
                     "bf16peak": num(r"BF16 dot-product peak ([\d.]+)", t), "rss": rss / 1024 if rss else None,
                     "alone": num(r"step / GEMMs alone ([\d.]+)", t),
                     "alone_att": num(r"step / GEMMs and attention products alone ([\d.]+)", t), "path": (re.search(r"\(path ([\w-]+)\)", t) or [None, None])[1],
                     "impl": (re.search(r"f32 GEMM \((\w+)\)", t) or [None, "oneDNN"])[1]})
    if not runs:
        return None
    med = sorted(runs, key=lambda r: r["ms"])[len(runs) // 2]
    med["n"] = len(runs)
    return med

def peer(kind, m, d):
    runs = []
    for f in sorted(glob.glob(f"{out}/{kind}.{m}.{d}.*.txt")):
        for line in open(f):
            if line.startswith("PEER_JSON "):
                runs.append(json.loads(line[len("PEER_JSON "):]))
    if not runs:
        return None
    return sorted(runs, key=lambda r: r["ms_step"])[len(runs) // 2]

def ms(x):
    return "n/a" if x is None else f"{x:.0f}"

def ratio(a, b):
    return "n/a" if a is None or b is None else f"{a / b:.2f}x"

def mem(x):
    return "n/a" if x is None else f"{x:.0f}"

head = ["model", "dtype", "bf16 path", "step/GEMMs alone", "with attention", "bagualu ms", "peer dflt ms", "peer tuned ms", "dflt/bagualu", "tuned/bagualu",
        "bagualu GF/s", "% FMA peak", "% bf16 peak", "% GEMM", "tuned GF/s", "dflt GF/s",
        "mem MiB bagualu", "mem dflt", "mem tuned"]
rows, best, notes, seen_libs = [], [], [], {}
for m in models:
    for d in dtypes:
        b, pd, pt = bagualu(m, d), peer("default", m, d), peer("tuned", m, d)
        bms = b["ms"] if b else None
        pdms = pd["ms_step"] if pd else None
        ptms = pt["ms_step"] if pt else None
        fma = f"{100 * b['gflops'] / b['fma']:.1f}%" if b and b["gflops"] and b["fma"] else "n/a"
        bfp = f"{100 * b['gflops'] / b['bf16peak']:.1f}%" if b and b.get("bf16peak") and d == "bf16" else "n/a"
        gemm = f"{100 * b['gflops'] / b['gemm']:.1f}%" if b and b["gflops"] and b["gemm"] else "n/a"
        dflt_ms = ms(pdms)
        if pd and (pd["warmup_only"] or pd["steps"] < 10):
            dflt_ms += f" (n={pd['steps']}{', warm-up' if pd['warmup_only'] else ''})"
        rows.append([m.upper(), d, (b.get("path") or "-") if b else "n/a",
                     f"{b['alone']:.3f}" if b and b.get("alone") else "n/a",
                     f"{b['alone_att']:.3f}" if b and b.get("alone_att") else "n/a", ms(bms), dflt_ms, ms(ptms), ratio(pdms, bms), ratio(ptms, bms),
                     f"{b['gflops']:.1f}" if b and b["gflops"] else "n/a", fma, bfp, gemm,
                     f"{pt['gflops']:.1f}" if pt else "n/a", f"{pd['gflops']:.1f}" if pd else "n/a",
                     mem(b["rss"] if b else None), mem(pd["peak_rss_mb"] if pd else None),
                     mem(pt["peak_rss_mb"] if pt else None)])
        bmin, tmin = (b["min"] if b else None), (pt["ms_min"] if pt else None)
        best.append([m.upper(), d, ms(bmin), ms(tmin), ratio(tmin, bmin)])
        if b:  # the peaks each run measured: FMA and f32 GEMM in fp32 runs, bf16 ones in bf16 runs
            peaks = (f"bf16 dot-product peak {b['bf16peak']} GFLOP/s, FMA peak {b['fma']} GFLOP/s, "
                     f"oneDNN bf16 GEMM (its path) {b['gemm']} GFLOP/s"
                     if d == "bf16" else f"FMA peak {b['fma']} GFLOP/s, f32 GEMM ({b.get('impl')}) {b['gemm']} GFLOP/s")
            seen_libs[m] = (seen_libs[m] + "; " if m in seen_libs else
                            f"{m.upper()}: measured by bench_step in its runs ({threads} threads): ") + f"{d}: {peaks}"
        for kind, p in (("default", pd), ("tuned", pt)):
            if p and kind not in seen_libs:
                ob = p.get("openblas")
                blas = (f"OpenBLAS {ob['corename']} ({ob['threads']} threads, "
                        f"{'OpenMP' if 'USE_OPENMP' in ob['config'] else 'pthreads'}) {os.path.dirname(ob['path'])}"
                        if ob else ", ".join(l for l in p["libs"] if "blas" in os.path.basename(l).lower()) or "none")
                alloc = "tcmalloc" if any("tcmalloc" in l for l in p["libs"]) else "glibc malloc"
                seen_libs[kind] = (f"peer {kind}: torch {p['torch']}, {p['threads']} torch threads, BLAS {blas}, "
                                   f"{alloc}, OPENBLAS_CORETYPE={p['env_openblas_coretype'] or 'unset'}, {p['optimizer']}")
def table(head, rows):
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
    line = lambda r: "| " + " | ".join(str(c).rjust(w) for c, w in zip(r, widths)) + " |"
    print(line(head))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))

print()
print("ms/step: median of the timed steps (and of REPEAT runs); ratios > 1 mean bagualu is faster;")
print("GF/s: bagualu's FLOP formula for both; mem: peak RSS of the process (the peer's includes ~230 MiB of torch)")
table(head, rows)
print()
print("fastest single step (ms; the least disturbed by other load on the machine):")
table(["model", "dtype", "bagualu", "peer tuned", "tuned/bagualu"], best)
for k in models + ["default", "tuned"]:
    if k in seen_libs:
        print(seen_libs[k])
print(f"machine load at the end: {load.strip()}")
EOF
