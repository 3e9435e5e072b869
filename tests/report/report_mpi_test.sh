#!/usr/bin/env bash
# Usage: report_mpi_test.sh MPIRUN MERIDIAN SOURCE_DIR ARTIFACT_DIR — the run report (meridian report,
# and the RUN_DIR/report.html that train writes), opened in headless Chromium (Debian's chromium):
#  1. a 2-rank SigLIP run with evaluations, a straggler that health names, and one restart (a rank
#     killed with SIGKILL after step 11, resumed from the newest checkpoint): every chart is painted,
#     the console is silent, the restart and the finding are on the timeline with the checkpoint and
#     the steps lost (from the killed attempt's own log), the attempts table says what happened;
#     the screenshot is saved to ARTIFACT_DIR/report.png;
#  2. a run directory with a cut metrics.csv, a config holding <script> and markup, and no health or
#     attempts files: the page opens, names what is cut or missing, and shows the config as text;
#  3. a metrics.csv of a million rows: the page is under 10 MB (its size and the time to open it are
#     printed, not asserted: this machine is shared);
#  4. `meridian report` on what is not a run directory, or with --out in a missing directory, exits 2
#     naming it.
set -u
mpirun=$1 meridian=$2 src=$3 artifacts=$4
source "$(dirname "$0")/../mpi_script_lib.sh"
command -v chromium >/dev/null || fail "chromium is not installed (jobs/setup-node.sh installs Debian's chromium)"
mkdir -p "$artifacts"
cp "$src/tests/report/check.html" "$tmp/check.html"

# probe PAGE OUT.json [SCREENSHOT.png]: what the page drew, as check.html finds it; the console's lines
# (Chromium logs each console message and uncaught error as CONSOLE) into OUT.console.
probe() {
  local page=$1 out=$2 shot=${3:-}
  local flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$tmp/chrome"
    --allow-file-access-from-files --enable-logging=stderr --v=0 --virtual-time-budget=20000)
  timeout 120 chromium "${flags[@]}" --window-size=1400,2200 --dump-dom "file://$tmp/check.html?page=$page" \
    >"$out.dom" 2>"$out.stderr" || { tail -5 "$out.stderr"; fail "chromium exited $? on $page"; }
  grep "CONSOLE" "$out.stderr" >"$out.console"
  python3 - "$out.dom" "$out" <<'PY' || fail "no probe result in $out.dom"
import html, json, re, sys
m = re.search(r'<pre id="result">(.*?)</pre>', open(sys.argv[1]).read(), re.S)
text = html.unescape(m.group(1)) if m else ""
json.loads(text)
open(sys.argv[2], "w").write(text)
PY
  if [[ -n $shot ]]; then
    timeout 120 chromium "${flags[@]}" --window-size=1280,4600 --screenshot="$shot" "file://$page" \
      >/dev/null 2>&1 || fail "chromium could not take the screenshot of $page"
  fi
}

# The console check's positive control: a page that logs on purpose must show in the console lines, or
# a Chromium that stopped logging them would let every console check below pass unseen.
printf '<!DOCTYPE html><html><body><script>console.log("meridian console control")</script></body></html>' \
  >"$tmp/control.html"
probe "$tmp/control.html" "$tmp/control.json"
grep -q "meridian console control" "$tmp/control.json.console" ||
  fail "chromium did not log a page's console message (--enable-logging=stderr): the console checks cannot see errors"

# 1. A real run: evaluations, a straggler, a kill and a resume.
"$mpirun" --oversubscribe -np 2 "$meridian" prep synthetic --kind image-text --count 64 --size 64 --out "$tmp/it.h5" \
  --log-level warn >/dev/null || fail "prep exited $?"
run=$tmp/run
args=(--config "$src/jobs/configs/siglip-tiny.yaml" --data "$tmp/it.h5" --set data.eval="$tmp/it.h5"
  --set model.image_size=64 --set train.batch=4 --set train.steps=16 --set train.log_every=1 --set train.eval_every=5
  --set train.health_every=2 --set checkpoint.every_steps=3 --run-dir "$run")
"$mpirun" --oversubscribe -np 2 "$meridian" train "${args[@]}" --inject-straggler 1:compute:300 \
  >"$tmp/attempt1.log" 2>&1 &
launcher=$!
for _ in $(seq 1 1200); do
  grep -q "step  *11/16" "$run/logs/rank_0.log" 2>/dev/null && break
  sleep 0.05
done
grep -q "step  *11/16" "$run/logs/rank_0.log" || { kill $launcher; tail "$tmp/attempt1.log"; fail "attempt 1 never reached step 11"; }
# The page of the evaluations at steps 5 and 10 (written at the lowest priority: on a loaded machine it
# may lag a few steps; the attempt has 5 more, about 2 s).
for _ in $(seq 1 600); do
  [[ -s $run/report.html ]] && break
  kill -0 $launcher 2>/dev/null || fail "attempt 1 ended without writing report.html after its evaluations"
  sleep 0.05
done
for p in $(pgrep -f -- "--run-dir $run"); do
  [[ $(cat /proc/$p/comm 2>/dev/null) == meridian ]] && kill -9 "$p"
done
wait $launcher 2>/dev/null
[[ -s $run/report.html ]] || fail "attempt 1 wrote no report.html after its evaluations (steps 5 and 10)"
grep -q '"event":"end"' "$run/attempts.jsonl" && fail "the killed attempt has an end record"
killed_last=$(grep -oE "step +[0-9]+/16" "$run/logs/rank_0.log" | tail -1 | grep -oE "[0-9]+" | head -1)
"$mpirun" --oversubscribe -np 2 "$meridian" train "${args[@]}" --resume auto >"$tmp/attempt2.log" 2>&1 ||
  { tail -20 "$tmp/attempt2.log"; fail "the resumed attempt exited $?"; }
resumed=$(grep -oE "resumed from [^:]+: step [0-9]+" "$tmp/attempt2.log") || fail "attempt 2 did not resume"
resume_path=${resumed#resumed from } resume_path=${resume_path%%:*} resume_step=${resumed##* }
grep -q "report: $run/report.html" "$tmp/attempt2.log" || fail "train did not print the report's path"
echo "attempt 1 killed after step $killed_last; attempt 2 $resumed"

probe "$run/report.html" "$tmp/run.json" "$artifacts/report.png"
[[ -s $artifacts/report.png ]] || fail "no screenshot"
python3 - "$tmp/run.json" "$tmp/run.json.console" "$resume_path" "$resume_step" "$killed_last" <<'PY' ||
import json, sys
r = json.load(open(sys.argv[1]))
console = open(sys.argv[2]).read().strip()
path, step, killed = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
bad = []
if r.get("probe_error"): bad.append("the probe failed: " + r["probe_error"])
if r.get("drawn") != "yes": bad.append("the page's script did not finish")
if console: bad.append("the console shows: " + console)
if r.get("errors") or r.get("errorBoxShown"): bad.append(f"the page caught errors: {r.get('errors')}")
charts = {c["chart"]: c for c in r["canvases"]}
print(f"{len(r['canvases'])} canvases, {r['uplots']} uPlot charts: " +
      ", ".join(f"{c['chart']} {100 * c['painted'] / c['pixels']:.0f} %" for c in r["canvases"]))
for c in r["canvases"]:
    if c["painted"] < 0.01 * c["pixels"]: bad.append(f"chart '{c['chart']}' is empty ({c['painted']} pixels painted)")
for want in ["loss", "learning rate", "gradient norm", "samples/s", "MFU", "mR", "seconds per step (rank 0)", "ranks"]:
    if want not in charts: bad.append(f"no chart '{want}'")
marks = r["marks"]
print("timeline:", {k: len(v) for k, v in marks.items()})
restart = [t for t in marks.get("restart", []) if path in t and f"(step {step})" in t]
lost = max(0, killed - step)  # a kill between the checkpoint of a step and its log line: resumed past the log
if not restart: bad.append(f"no restart mark naming {path} (step {step}): {marks.get('restart')}")
elif f"{lost} step(s) lost" not in restart[0]: bad.append(f"the restart mark does not say {lost} step(s) lost: {restart[0]}")
finding = [t for t in marks.get("finding", []) if "straggler: rank 1" in t]
if not finding: bad.append(f"no straggler finding naming rank 1 on the timeline: {marks.get('finding')}")
if not marks.get("eval"): bad.append("no evaluation marks")
a = r["attempts"]
print("attempts:", a)
if len(a) != 2: bad.append(f"{len(a)} attempts in the table, expected 2")
else:
    if f"no record after step {killed}" not in a[0][5]: bad.append(f"attempt 1's end: {a[0][5]}")
    if a[1][4] != str(lost) or "finished at step 16" not in a[1][5]: bad.append(f"attempt 2: {a[1]}")
if "siglip-tiny" not in r["config"] and "vision" not in r["config"]: bad.append("the config is not shown")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
  fail "the page of the 2-rank run"

# The page `meridian report` writes for the same directory, elsewhere.
"$meridian" report "$run" --out "$tmp/elsewhere.html" >"$tmp/report.out" 2>&1 || fail "meridian report exited $?"
grep -q "report: wrote $tmp/elsewhere.html in " "$tmp/report.out" || { cat "$tmp/report.out"; fail "no 'wrote' line"; }
grep -q "default-src 'none'" "$tmp/elsewhere.html" || fail "the page lacks its Content-Security-Policy (no network)"
grep -qiE "<(script|img|iframe)[^>]* src=|<link " "$tmp/elsewhere.html" && fail "the page loads something from outside it"

# 1b. A checkpoint the resume skipped as corrupt (attempts.jsonl's skipped_checkpoints, as train writes
# it): named in the attempts table and as a finding on the timeline.
sk=$tmp/skipped
cp -r "$run" "$sk"
rm -f "$sk/report.html"
python3 - "$sk/attempts.jsonl" <<'PY' || fail "could not add skipped_checkpoints to attempts.jsonl"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
start = [r for r in lines if r.get("event") == "start"][-1]
start["skipped_checkpoints"] = ["/x/checkpoints/step_00000010.h5: checksum: bytes 4096-9000 do not match"]
open(sys.argv[1], "w").write("".join(json.dumps(r) + "\n" for r in lines))
PY
"$meridian" report "$sk" >"$tmp/sk.out" 2>&1 || { cat "$tmp/sk.out"; fail "meridian report of the skipped-checkpoint run exited $?"; }
probe "$sk/report.html" "$tmp/sk.json"
python3 - "$tmp/sk.json" "$tmp/sk.json.console" <<'PY' || fail "the page does not show the skipped checkpoint"
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
if open(sys.argv[2]).read().strip(): bad.append("the console shows: " + open(sys.argv[2]).read().strip())
want = "/x/checkpoints/step_00000010.h5: checksum: bytes 4096-9000 do not match"
if not any("skipped as corrupt or unreadable: " + want in row[3] for row in r["attempts"]):
    bad.append(f"the attempts table does not name it: {r['attempts']}")
if not any("skipped a checkpoint: " + want in t for t in r["marks"].get("finding", [])):
    bad.append(f"no finding names it: {r['marks'].get('finding')}")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
echo "a skipped checkpoint: in the attempts table and on the timeline"

# 2. Cut and hostile: a metrics.csv cut mid-line, a config with markup, no health or attempts files.
bad=$tmp/bad
mkdir -p "$bad"
head -c 5000 "$run/metrics.csv" >"$bad/metrics.csv"
printf 'model:\n  name: "</script><script>document.title=\\"pwned\\"</script><img src=x onerror=alert(1)>"\n# <b>&amp;</b>\n' \
  >"$bad/config.yaml"
"$meridian" report "$bad" >"$tmp/bad.out" 2>&1 || { cat "$tmp/bad.out"; fail "meridian report of a cut run exited $?"; }
cat "$tmp/bad.out"
probe "$bad/report.html" "$tmp/bad.json"
python3 - "$tmp/bad.json" "$tmp/bad.json.console" "$bad/config.yaml" <<'PY' || fail "the page of a cut run"
import json, sys
r = json.load(open(sys.argv[1]))
console = open(sys.argv[2]).read().strip()
config = open(sys.argv[3]).read()
bad = []
if r.get("drawn") != "yes": bad.append("the page's script did not finish")
if console: bad.append("the console shows: " + console)
if r.get("errors") or r.get("errorBoxShown"): bad.append(f"the page caught errors: {r.get('errors')}")
if r["title"] == "pwned" or r["images"] or r["scripts"] != 4: bad.append(f"markup from config.yaml ran: {r['title']}, "
                                                                       f"{r['images']} img, {r['scripts']} scripts")
if r["config"] != config: bad.append(f"the config is not shown as its text: {r['config']!r}")
problems = " | ".join(r["problems"])
print("the page says:", problems)
for want in ["metrics.csv: its last line", "was cut short", "health.jsonl is missing", "attempts.jsonl is missing"]:
    if want not in problems: bad.append(f"the page does not say '{want}'")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY

# 3. A million rows (66,667 steps of 15 metrics): a page under 10 MB.
big=$tmp/big
mkdir -p "$big"
python3 - "$big/metrics.csv" <<'PY'
import math, sys
names = ["loss", "lr", "grad_norm", "samples_per_s", "samples_per_s_per_rank", "data_s", "forward_s", "backward_s",
         "comm_s", "optimizer_s", "step_s", "bad_steps", "mfu", "epoch", "temperature"]
with open(sys.argv[1], "w") as f:
    f.write("step,wall_time,name,value\n")
    rows = 0
    for step in range(1, 10**6 // len(names) + 2):
        for n in names:
            if rows == 10**6: break
            f.write(f"{step},{1.7e9 + step:.3f},train/{n},{math.exp(-step / 2e4) + 0.01 * math.sin(step):.9g}\n")
            rows += 1
PY
t0=$(date +%s.%N)
"$meridian" report "$big" >"$tmp/big.out" 2>&1 || { cat "$tmp/big.out"; fail "meridian report of a million rows exited $?"; }
t1=$(date +%s.%N)
grep -q "1000000 metrics rows" "$tmp/big.out" || { cat "$tmp/big.out"; fail "not a million rows read"; }
size=$(stat -c %s "$big/report.html")
((size < 10000000)) || fail "the page of a million rows is $size bytes (over 10 MB)"
probe "$big/report.html" "$tmp/big.json"
open_ms=$(python3 - "$tmp/big.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
if r.get("drawn") != "yes": bad.append("the page's script did not finish")
if r.get("errors") or r.get("errorBoxShown"): bad.append(f"the page caught errors: {r.get('errors')}")
charts = {c["chart"]: c for c in r.get("canvases", [])}
for want in ["loss", "learning rate", "samples/s"]:
    c = charts.get(want)
    if not c: bad.append(f"no chart '{want}'")
    elif c["painted"] < 0.01 * c["pixels"]: bad.append(f"chart '{want}' is empty ({c['painted']} pixels painted)")
for b in bad: print("FAIL:", b, file=sys.stderr)
sys.exit(1) if bad else print(round(r["load_ms"]))
PY
) || fail "the page of a million rows did not draw every chart"
[[ -s $tmp/big.json.console ]] && { cat "$tmp/big.json.console"; fail "the console of the big page is not silent"; }
echo "a million rows: page $((size / 1000)) KB, written in $(awk "BEGIN {printf \"%.1f\", $t1 - $t0}") s, opened and drawn in $open_ms ms"

# 4. Not a run directory.
expect_error "report of a missing directory" "is not a directory" "$meridian" report "$tmp/none"
expect_error "report --out in a missing directory" "--out .*: no directory" "$meridian" report "$run" --out "$tmp/no/r.html"
echo "PASS"
