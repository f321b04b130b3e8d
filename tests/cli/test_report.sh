#!/usr/bin/env bash
# bagualu report: the run report, opened in a real browser. A short training run
# (with validation, --report-every) and an fp16 run whose loss scale overflows are drawn
# into one page; headless Chromium loads it from disk (no network: the page has no
# external reference, checked here too), and the test checks that the script ran to the
# end without an error (its #report-ok marker, no "Uncaught" on the console), that the
# expected charts are there, that the numbers it shows equal those of the logs, and that
# a screenshot is not blank (distinct colours counted from the PNG by python3's zlib).
# Bad input: one line, exit 2. Without a chromium command the browser part is skipped
# (exit 77) after the rest has run.
BIN=$1
source "$(dirname "$0")/../shell_checks.sh"

cat >"$D/tiny.json" <<'JSON'
{"vocab_size": 32, "max_position_embeddings": 32, "hidden_size": 32, "num_hidden_layers": 2,
 "num_attention_heads": 4, "intermediate_size": 64, "num_local_experts": 4,
 "num_experts_per_tok": 2, "moe_intermediate_size": 32, "moe_layer_freq": 1}
JSON
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 20000 --seed 1 --out "$D/train.bin" >/dev/null &&
"$BIN" synth --task copy --vocab 32 --span 8 --tokens 4000 --seed 2 --out "$D/val.bin" >/dev/null ||
  { echo "synth failed"; exit 1; }
run() { "$BIN" train --config "$D/tiny.json" --data "$D/train.bin" --batch-size 4 --seq-len 16 --threads 2 "$@"; }
run --val "$D/val.bin" --steps 12 --eval-every 4 --eval-batches 2 --log "$D/a.jsonl" --report-every 5 >"$D/a.out" 2>&1 ||
  { cat "$D/a.out"; echo "training run failed"; exit 1; }
# Loss scale 1e6 overflows fp16 within a few steps; a window of 3 raises it again.
run --steps 10 --dtype fp16 --loss-scale 1e6 --loss-scale-window 3 --log "$D/b.jsonl" >"$D/b.out" 2>&1 ||
  { cat "$D/b.out"; echo "fp16 run failed"; exit 1; }

# The log's first line describes the run.
if head -1 "$D/a.jsonl" | python3 -c '
import json, sys
r = json.loads(sys.stdin.readline())["run"]
assert r["command_line"].startswith("bagualu train --config "), r["command_line"]
assert "--report-every 5" in r["command_line"]
assert r["config"]["num_local_experts"] == 4 and r["layout"]["ranks"] == 1
assert r["training"]["batch_size"] == 4 and r["cpu"]["peak_gflops"] > 0 and r["cpu"]["model"]
'; then ok; else bad "the log's first line is not the run's description: $(head -c 300 "$D/a.jsonl")"; fi
# --report-every wrote the page beside the log (a.html), and no temporary is left.
if [ -s "$D/a.html" ] && [ ! -e "$D/a.html.tmp" ] && grep -q '"val_step":12' "$D/a.html"; then ok
else bad "--report-every 5 did not leave a final a.html: $(ls "$D")"; fi

expect missing "nope.jsonl: cannot open" -- "$BIN" report "$D/nope.jsonl"
: >"$D/empty.jsonl"
expect empty "empty metrics log" -- "$BIN" report "$D/empty.jsonl"
printf '{"step":1}\nnot json\n' >"$D/bad.jsonl"
expect not-jsonl "bad.jsonl:2: not a JSON object" -- "$BIN" report "$D/bad.jsonl"
expect no-logs "no metrics log given" -- "$BIN" report --out "$D/x.html"
expect report-no-log "--report-every needs --log" -- run --steps 2 --report-every 1
expect_code unwritable 1 "cannot write the report" -- "$BIN" report "$D/a.jsonl" --out "$D/no/such/dir/r.html"

"$BIN" report "$D/a.jsonl" "$D/b.jsonl" --out "$D/r.html" >"$D/report.out" 2>&1 ||
  { cat "$D/report.out"; bad "report of two runs failed"; }
# Self-contained: nothing loaded from elsewhere (the SVG namespace is a name, not a fetch).
if ! grep -v 'http://www.w3.org/2000/svg' "$D/r.html" | grep -qiE 'https?://|<script[^>]*src=|<link|<img|@import'; then ok
else bad "the page refers to something outside it: $(grep -v 'w3.org/2000/svg' "$D/r.html" | grep -oiE '.{20}(https?://|src=|<link|@import).{20}' | head -3)"; fi

CHROME=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROME" ]; then
  echo "test_report: $pass passed, $fail failed; no chromium: the browser checks are skipped"
  [ $fail -eq 0 ] || exit 1
  exit 77
fi
# As root Chromium needs --no-sandbox; a private profile keeps runs apart.
chrome() { timeout 90 "$CHROME" --headless --no-sandbox --disable-gpu --no-first-run --hide-scrollbars \
  --user-data-dir="$D/profile" --enable-logging=stderr --v=0 "$@"; }
chrome --virtual-time-budget=10000 --dump-dom "file://$D/r.html" >"$D/dom.html" 2>"$D/chrome.err"
rc=$?
if [ $rc -ne 0 ] || [ ! -s "$D/dom.html" ]; then
  echo "test_report: chromium did not run (exit $rc): $(grep -v dbus "$D/chrome.err" | tail -3)"
  [ $fail -eq 0 ] || exit 1
  exit 77
fi
if grep -E 'CONSOLE|console' "$D/chrome.err" | grep -qiE 'uncaught|error'; then
  bad "script errors on the console: $(grep -iE 'CONSOLE.*(uncaught|error)' "$D/chrome.err" | head -3)"
else ok; fi

if python3 - "$D/dom.html" "$D/a.jsonl" "$D/b.jsonl" >"$D/check" 2>&1 <<'PY'
import json, sys
from html.parser import HTMLParser
dom, logs = sys.argv[1], sys.argv[2:]
ids, charts, cells, mem = set(), set(), {}, {}
ok_marker = {}
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.row = None; self.table = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a: ids.add(a["id"])
        if a.get("id") == "report-ok": ok_marker.update(a)
        if a.get("id") in ("summary-table", "memory-table"): self.table = a["id"]
        if "data-chart" in a: charts.add(a["data-chart"])
        if tag == "tr" and "data-run" in a: self.row = a["data-run"]
        if tag == "td" and "data-key" in a and self.row:
            (cells if self.table == "summary-table" else mem).setdefault(self.row, {})[a["data-key"]] = a["data-value"]
P().feed(open(dom).read())
errors = []
if "report-ok" not in ids: errors.append("no #report-ok: the drawing script did not finish")
if "report-error" in ids: errors.append("the page shows a script error")
if ok_marker.get("data-runs") != "2": errors.append(f"runs drawn: {ok_marker.get('data-runs')}, want 2")
for c in ("loss", "lr", "grad_norm", "tokens_per_s", "pct_peak", "drop_frac", "dead_experts", "peak_rss_mib",
          "experts-a.jsonl-0", "experts-a.jsonl-1", "experts-b.jsonl-0"):
    if c not in charts: errors.append(f"chart {c} missing")
def close(a, b, name):
    if a is None or b is None or abs(a - b) > 1e-9 * max(1, abs(b)): errors.append(f"{name}: page {a}, log {b}")
for path in logs:
    name = path.rsplit("/", 1)[1]
    lines = [json.loads(l) for l in open(path)]
    steps = [l for l in lines if "step" in l]
    vals = [l for l in lines if "val_step" in l]
    got = {k: (float(v) if v != "" else None) for k, v in cells.get(name, {}).items()}
    if not got: errors.append(f"{name}: no summary row"); continue
    close(got.get("steps"), steps[-1]["step"], f"{name} steps")
    close(got.get("final_loss"), steps[-1]["loss"], f"{name} final loss")
    close(got.get("min_loss"), min(l["loss"] for l in steps), f"{name} min loss")
    close(got.get("final_lr"), steps[-1]["lr"], f"{name} final lr")
    close(got.get("final_grad_norm"), steps[-1]["grad_norm"], f"{name} final grad norm")
    tps = sorted(l["tokens_per_s"] for l in steps)
    close(got.get("median_tokens_per_s"), tps[(len(tps) - 1) // 2], f"{name} median tokens/s")
    close(got.get("skipped_steps"), sum(l.get("skipped") is True for l in steps), f"{name} skipped steps")
    close(got.get("peak_rss_mib"), max(l["peak_rss_mib"] for l in steps), f"{name} peak RSS")
    if vals: close(got.get("final_val_loss"), vals[-1]["val_loss"], f"{name} final val loss")
    elif got.get("final_val_loss") is not None: errors.append(f"{name}: a val loss from nowhere")
    m = next(l["memory"] for l in steps if "memory" in l)
    close(float(mem.get(name, {}).get("total") or "nan"), m["total"], f"{name} memory total")
# b's overflows: its skipped steps and loss-scale changes are marked on the loss curve.
b = [l for l in map(json.loads, open(logs[1])) if "step" in l]
if not any(l["skipped"] for l in b): errors.append("the fp16 run skipped no step: nothing to mark")
print("\n".join(errors) or "all numbers match")
sys.exit(1 if errors else 0)
PY
then ok; else bad "the rendered page: $(cat "$D/check")"; fi
# The marks: one line per skipped step, one per loss-scale change, as the log has them.
want=$(python3 -c '
import json, sys
b = [l for l in map(json.loads, open(sys.argv[1])) if "step" in l]
sc = sum(1 for p, q in zip(b, b[1:]) if p["loss_scale"] != q["loss_scale"])
print(sum(l["skipped"] for l in b), sc)' "$D/b.jsonl")
got=$(python3 -c '
import re, sys
t = open(sys.argv[1]).read()
print(len(re.findall(r"class=\"mark skipped\"", t)), len(re.findall(r"class=\"mark loss-scale\"", t)))' "$D/dom.html")
if [ "$want" = "$got" ]; then ok; else bad "marks on the loss curve: $got, the log has $want (skipped, scale changes)"; fi

# The screenshot: drawn, not blank. Half scale keeps the PNG small for python's decoder.
chrome --virtual-time-budget=10000 --window-size=1200,1800 --force-device-scale-factor=0.5 \
  --screenshot="$D/shot.png" "file://$D/r.html" >/dev/null 2>&1
if python3 - "$D/shot.png" >"$D/png" 2>&1 <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, w = 8, b"", 0
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8]); body = data[pos + 8:pos + 8 + n]; pos += 12 + n
    if kind == b"IHDR": w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
    elif kind == b"IDAT": idat += body
assert depth == 8 and ctype in (2, 6), f"PNG depth {depth} colour type {ctype}"
bpp = 3 if ctype == 2 else 4
raw, stride = zlib.decompress(idat), w * bpp
prev, colours, ink = bytearray(stride), set(), 0
for y in range(h):
    f, row = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    for i in range(stride):
        a = row[i - bpp] if i >= bpp else 0; b = prev[i]; c = prev[i - bpp] if i >= bpp else 0
        if f == 1: row[i] = (row[i] + a) & 255
        elif f == 2: row[i] = (row[i] + b) & 255
        elif f == 3: row[i] = (row[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            row[i] = (row[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = bytes(row[x:x + 3]); colours.add(px); ink += px != b"\xff\xff\xff"
    prev = row
share = ink / (w * h)
print(f"{w}x{h}, {len(colours)} colours, {100 * share:.1f}% not white")
sys.exit(0 if len(colours) >= 50 and share > 0.05 else 1)
PY
then ok; else bad "the screenshot looks blank: $(cat "$D/png")"; fi
cat "$D/png"

echo "test_report: $pass passed, $fail failed"
[ $fail -eq 0 ]
