#!/usr/bin/env bash
# Loss curve as an SVG, from the training's JSON Lines metrics (one object per step,
# src/train/metrics.c) — plain awk, so it runs wherever the demo does (no Python
# plotting stack). Draws the per-step training loss (light), its exponential moving
# average (dark), and validation points when given.
# Usage: scripts/plot_loss.sh METRICS.jsonl OUT.svg [VAL.tsv]
#   VAL.tsv: "step loss" per line (e.g. the val losses `bagualu train` printed).
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 METRICS.jsonl OUT.svg [VAL.tsv]" >&2; exit 2; }
METRICS=$1 OUT=$2 VAL=${3:-/dev/null}
[ -s "$METRICS" ] || { echo "plot_loss: $METRICS is missing or empty" >&2; exit 2; }

awk -v valfile="$VAL" -v title="${PLOT_TITLE:-Training loss}" '
function num(key,   m) {  # the number after "key": in this line; "" if absent
  if (match($0, "[{,]\"" key "\":[-+0-9.eE]+")) { m = substr($0, RSTART + 1, RLENGTH - 1); sub(/^[^:]*:/, "", m); return m }
  return ""
}
# A "nice" tick spacing (1, 2 or 5 times a power of ten) for about n ticks over span.
function nice(span, n,   raw, p, f) {
  raw = span / n; p = 10 ^ int(log(raw) / log(10)); if (raw < 1 && raw != p) p /= 10
  f = raw / p; return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p
}
function fmt(v, step) { return step >= 1 ? sprintf("%d", v) : step >= 0.1 ? sprintf("%.1f", v) : sprintf("%.2f", v) }
function X(s) { return L + (s - x0) / (x1 - x0) * W }
function Y(v) { return T + (y1 - v) / (y1 - y0) * H }
{
  s = num("step"); v = num("loss")
  if (s == "" || v == "") next
  n++; st[n] = s + 0; lo[n] = v + 0
}
END {
  if (n == 0) { print "plot_loss: no steps with a loss in the metrics" > "/dev/stderr"; exit 2 }
  # Moving average over about n/40 steps, started from 0 and divided by (1 - beta^i)
  # (as TensorBoard does) so the first steps are not dragged toward the start value.
  beta = 1 - 40 / n; if (beta < 0.6) beta = 0.6; if (beta > 0.98) beta = 0.98
  ema = 0; bp = 1
  for (i = 1; i <= n; i++) { ema = beta * ema + (1 - beta) * lo[i]; bp *= beta; sm[i] = ema / (1 - bp) }
  nv = 0
  while ((getline line < valfile) > 0) { split(line, a, /[ \t]+/); if (a[2] != "") { nv++; vs[nv] = a[1] + 0; vl[nv] = a[2] + 0 } }
  ymin = lo[1]; ymax = lo[1]
  for (i = 1; i <= n; i++) { if (lo[i] < ymin) ymin = lo[i]; if (lo[i] > ymax) ymax = lo[i] }
  for (i = 1; i <= nv; i++) { if (vl[i] < ymin) ymin = vl[i]; if (vl[i] > ymax) ymax = vl[i] }
  ystep = nice(ymax - ymin > 0 ? ymax - ymin : 1, 6)
  y0 = int(ymin / ystep) * ystep; if (y0 > ymin) y0 -= ystep
  y1 = int(ymax / ystep) * ystep; if (y1 < ymax) y1 += ystep
  x0 = 0; x1 = st[n] > 0 ? st[n] : 1
  for (i = 1; i <= nv; i++) if (vs[i] > x1) x1 = vs[i]
  xstep = nice(x1, 8)
  Wt = 820; Ht = 480; L = 70; R = 20; T = 50; B = 55; W = Wt - L - R; H = Ht - T - B
  printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"13\">\n", Wt, Ht, Wt, Ht
  printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
  printf "<text x=\"%d\" y=\"28\" font-size=\"17\" font-weight=\"bold\">%s</text>\n", L, title
  for (v = y0; v <= y1 + ystep / 2; v += ystep) {
    printf "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#e5e5e5\"/>\n", L, L + W, Y(v), Y(v)
    printf "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" fill=\"#444\">%s</text>\n", L - 8, Y(v) + 4, fmt(v, ystep)
  }
  for (s = 0; s <= x1 + xstep / 2; s += xstep) {
    if (s > x1) break
    printf "<line x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\" stroke=\"#f0f0f0\"/>\n", X(s), X(s), T, T + H
    printf "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">%d</text>\n", X(s), T + H + 18, s
  }
  printf "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#888\"/>\n", L, T, W, H
  printf "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#222\">step</text>\n", L + W / 2, Ht - 12
  printf "<text transform=\"translate(18 %d) rotate(-90)\" text-anchor=\"middle\" fill=\"#222\">cross-entropy (nats/token)</text>\n", T + H / 2
  printf "<polyline fill=\"none\" stroke=\"#9ecae1\" stroke-width=\"1\" points=\""
  for (i = 1; i <= n; i++) printf "%.1f,%.1f ", X(st[i]), Y(lo[i])
  printf "\"/>\n<polyline fill=\"none\" stroke=\"#08519c\" stroke-width=\"2.2\" points=\""
  for (i = 1; i <= n; i++) printf "%.1f,%.1f ", X(st[i]), Y(sm[i])
  printf "\"/>\n"
  if (nv) {
    printf "<polyline fill=\"none\" stroke=\"#e6550d\" stroke-width=\"1.5\" stroke-dasharray=\"5 4\" points=\""
    for (i = 1; i <= nv; i++) printf "%.1f,%.1f ", X(vs[i]), Y(vl[i])
    printf "\"/>\n"
    for (i = 1; i <= nv; i++) printf "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#e6550d\"/>\n", X(vs[i]), Y(vl[i])
  }
  lx = L + W - 200; ly = T + 16
  printf "<rect x=\"%d\" y=\"%d\" width=\"190\" height=\"%d\" fill=\"white\" stroke=\"#ccc\"/>\n", lx - 10, ly - 14, nv ? 66 : 46
  printf "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#9ecae1\" stroke-width=\"2\"/><text x=\"%d\" y=\"%d\">train loss (per step)</text>\n", lx, lx + 24, ly, ly, lx + 32, ly + 4
  ly += 20
  printf "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"#08519c\" stroke-width=\"2.2\"/><text x=\"%d\" y=\"%d\">train loss (moving avg)</text>\n", lx, lx + 24, ly, ly, lx + 32, ly + 4
  if (nv) {
    ly += 20
    printf "<circle cx=\"%d\" cy=\"%d\" r=\"4\" fill=\"#e6550d\"/><text x=\"%d\" y=\"%d\">validation loss</text>\n", lx + 12, ly, lx + 32, ly + 4
  }
  printf "</svg>\n"
}' "$METRICS" >"$OUT.tmp"
mv "$OUT.tmp" "$OUT"
