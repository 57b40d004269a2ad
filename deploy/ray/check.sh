#!/usr/bin/env bash
# The Ray launcher checked for real on this machine: a local two-node Ray
# cluster (a head and a second `ray start` node, one CPU each so SPREAD must
# use both), `tokbench sim` on 127.0.0.1, launch.py with two shards, then the
# errors: more shards than nodes, one failing shard, no binary on the nodes. Not part of .ci/run:
# Ray comes from PyPI, not Debian (docs/machines.md).
#
#   python3 -m venv /tmp/ray && /tmp/ray/bin/pip install 'ray[default]'
#   RAY_PYTHON=/tmp/ray/bin/python deploy/ray/check.sh [target/release/tokbench]
#
# With a tokbench that has `merge` and `sweep --shard`, it runs the real
# sweep and merge, and one process at the same total for comparison; with
# `--shard` but no `merge`, the real shards and a stand-in merge (every shard
# folder has summary.json); with neither, a plain sweep per shard as well. Everything runs on
# 127.0.0.1; Ray's usage stats are off.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=$(realpath "${1:-target/release/tokbench}")
py=${RAY_PYTHON:-python3}
ray_cli="$(dirname "$(command -v "$py")")/ray"
[ -x "$bin" ] || { echo "check.sh: no tokbench binary at $bin (cargo build --release)" >&2; exit 1; }
"$py" -c 'import ray' 2>/dev/null || {
  echo "check.sh: Ray is not installed for $py (pip install 'ray[default]'; set RAY_PYTHON)" >&2
  exit 1
}
[ -x "$ray_cli" ] || ray_cli=ray
if pgrep -x raylet >/dev/null 2>&1; then
  echo "check.sh: a Ray cluster already runs on this machine; stop it first (ray stop)" >&2
  exit 1
fi
export RAY_USAGE_STATS_ENABLED=0

work=$(mktemp -d /tmp/tokbench-ray-check.XXXXXX)
port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
sim_port=$(port) gcs_port=$(port)
sim_pid=''
cleanup() {
  "$ray_cli" stop --force >/dev/null 2>&1 || true
  [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" sim --host 127.0.0.1 --port "$sim_port" >"$work/sim.log" 2>&1 &
sim_pid=$!

t0=$(date +%s%N)
common=(--num-cpus 1 --node-ip-address 127.0.0.1 --object-store-memory 100000000 --disable-usage-stats)
"$ray_cli" start --head --port "$gcs_port" --include-dashboard=false "${common[@]}" \
  --resources '{"tokbench_node_a": 1}' >"$work/head.log" 2>&1
"$ray_cli" start --address "127.0.0.1:$gcs_port" "${common[@]}" \
  --resources '{"tokbench_node_b": 1}' >"$work/worker.log" 2>&1
t1=$(date +%s%N)
echo "ray cluster: head + 1 node on 127.0.0.1:$gcs_port, up in $(((t1 - t0) / 1000000)) ms"
"$py" - "$sim_port" <<'PY'
import socket, sys, time
for _ in range(100):
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1).close()
        break
    except OSError:
        time.sleep(0.1)
else:
    sys.exit("check.sh: tokbench sim did not listen")
PY

launch=("$py" deploy/ray/launch.py --address "127.0.0.1:$gcs_port" --tokbench "$bin"
  --base-url "http://127.0.0.1:$sim_port")
has_shard=0 has_merge=0
"$bin" sweep --help 2>/dev/null | grep -q -- '--shard' && has_shard=1
"$bin" merge --help >/dev/null 2>&1 && has_merge=1
real=$((has_shard && has_merge))
standin_merge=(--merge-command "sh -c 'for d; do test -s \$d/summary.json || exit 1; done' sh {dirs}")

shape=(--concurrency 8,32 --random-input-len 128 --random-output-len 64)
if [ $real = 1 ]; then
  echo "== two shards, one per node (sweep --shard, merge)"
  "${launch[@]}" --shards 2 --duration 3s --margin 10 --out "$work/run" -- "${shape[@]}"
  test -s "$work/run/merged/summary.json"
  echo "== one process at the same total concurrency, for comparison"
  "$bin" sweep --base-url "http://127.0.0.1:$sim_port" --duration 3s --no-tui \
    --result-dir "$work/single" "${shape[@]}" >"$work/single.log" 2>&1 ||
    { cat "$work/single.log" >&2; exit 1; }
  "$py" - "$work/run/merged/summary.json" "$work/single/summary.json" <<'PY'
import json, sys
merged, single = (json.load(open(p))["levels"] for p in sys.argv[1:3])
def f(v, width, digits):
    return f"{v:>{width}.{digits}f}" if isinstance(v, (int, float)) else f"{str(v):>{width}}"
print("streams  run              shards  completed  output tok/s  TTFT p50 ms  TTFT p99 ms  ITL p99 ms")
for m, s in zip(merged, single):
    for name, l in (("merged (2 shards)", m), ("one process", s)):
        shards = len(l.get("shards") or []) or 1
        print(f"{l.get('max_concurrency', '?'):>7}  {name:<17}{shards:>6}  {l.get('completed', '?'):>9}  "
              f"{f(l.get('output_throughput'), 12, 1)}  {f(l.get('p50_ttft_ms'), 11, 2)}  "
              f"{f(l.get('p99_ttft_ms'), 11, 2)}  {f(l.get('p99_itl_ms'), 10, 2)}")
    if m.get("output_throughput") and s.get("output_throughput"):
        print(f"         merged/one output throughput: {m['output_throughput'] / s['output_throughput']:.3f}")
PY
elif [ $has_shard = 1 ]; then
  echo "== two shards, one per node (sweep --shard; no merge in this tokbench: a stand-in merge)"
  "${launch[@]}" --shards 2 --duration 3s --margin 10 --out "$work/run" "${standin_merge[@]}" -- "${shape[@]}"
  "$py" - "$work/run" <<'PY'
import json, sys
for i in (0, 1):
    s = json.load(open(f"{sys.argv[1]}/shard-{i}/summary.json"))
    levels = ", ".join(f"{l['max_concurrency']} streams: {l['completed']} done, "
                       f"{l['output_throughput']:.1f} tok/s, started {l['started_unix_s']:.3f}"
                       for l in s["levels"])
    print(f"shard {s['run']['shard']['index']}/{s['run']['shard']['count']} seed {s['run']['seed']}: {levels}")
PY
else
  echo "== two shards, one per node (no sweep --shard in this tokbench: stand-in commands)"
  standin=(--shard-command "{tokbench} sweep --base-url {base_url} --concurrency 2,4 --num-prompts 16
    --random-input-len 128 --random-output-len 64 --result-dir {result_dir} --no-tui")
  "${launch[@]}" --shards 2 --out "$work/run" "${standin[@]}" "${standin_merge[@]}"
fi
for i in 0 1; do test -s "$work/run/shard-$i/summary.json"; done
echo "ok: shard-0 and shard-1 collected to the driver"

echo "== three shards on two nodes: refused"
if out=$("${launch[@]}" --shards 3 --out "$work/run3" 2>&1); then
  echo "check.sh: 3 shards on 2 nodes was not refused" >&2; exit 1
fi
echo "$out"
case "$out" in *"3 shards need 3 Ray nodes"*"the cluster has 2"*) ;; *) exit 1 ;; esac

echo "== shard 1 fails: named"
if out=$("${launch[@]}" --shards 2 --out "$work/run-fail" \
  --shard-command "sh -c 'test {index} != 1 || (echo boom >&2; exit 3) && mkdir -p {result_dir}'" 2>&1); then
  echo "check.sh: a failing shard was not reported" >&2; exit 1
fi
echo "$out"
case "$out" in *"launch.py: shard 1 failed on node"*"exit 3: boom"*) ;; *) exit 1 ;; esac
echo "== no tokbench on the nodes: found before any shard starts"
if out=$("${launch[@]}" --shards 2 --out "$work/run-nobin" --tokbench /nonexistent/tokbench 2>&1); then
  echo "check.sh: a missing binary was not reported" >&2; exit 1
fi
echo "$out"
case "$out" in *"launch.py: shard 0 cannot start on node"*"no runnable tokbench at /nonexistent/tokbench"*) ;; *) exit 1 ;; esac
echo "check.sh: all checks passed"
