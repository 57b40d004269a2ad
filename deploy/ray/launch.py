#!/usr/bin/env python3
"""Run a sharded tokbench sweep on a Ray cluster and merge it.

One shard per node: a placement group of N one-CPU bundles with strategy
SPREAD (checked: every bundle on its own node), a task per bundle that runs
the tokbench binary already present on that node with
`--shard I/N --start-at <now + margin> --duration S`, and returns its run
folder as the bytes of a tar archive. The driver unpacks them into
OUT/shard-I, runs `tokbench merge` into OUT/merged and prints its report.

    python3 deploy/ray/launch.py --address auto --shards 2 \\
        --base-url http://10.0.0.5:8000 --tokbench /opt/tokbench \\
        --duration 30s -- --model Qwen/Qwen3-8B --concurrency 64,256

Arguments after `--` go to `tokbench sweep` unchanged, after `--seed N` (one
seed the driver draws for every shard) unless they hold a --seed. The API key, when the
server needs one, is read from OPENAI_API_KEY on the driver and handed to
each task as an argument (not a runtime_env, which the dashboard shows); the
task puts it in tokbench's environment, never on its command line.

`--shard-command` and `--merge-command` replace the two commands (Python
format fields: {tokbench} {base_url} {index} {shards} {start_at} {duration}
{result_dir}, and {dirs} {out}), for a tokbench without the shard flags or
any other stand-in; the placement, collection and errors stay the same.
"""

import argparse
import datetime
import io
import os
import random
import shlex
import socket
import subprocess
import sys
import tarfile
import tempfile
import time

DEFAULT_SHARD = (
    "{tokbench} sweep --base-url {base_url} --shard {index}/{shards}"
    " --start-at {start_at} --duration {duration} --result-dir {result_dir} --no-tui"
)
DEFAULT_MERGE = "{tokbench} merge {dirs} -o {out}"


def die(message):
    print(f"launch.py: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args(argv):
    if "--" in argv:
        at = argv.index("--")
        argv, sweep = argv[:at], argv[at + 1 :]
    else:
        sweep = []
    p = argparse.ArgumentParser(
        prog="launch.py",
        description="Run tokbench shards on a Ray cluster, one per node, and merge them.",
        epilog="Arguments after -- go to `tokbench sweep`.",
    )
    p.add_argument("--base-url", required=True, help="the server root every shard loads")
    p.add_argument("--shards", type=int, required=True, help="number of shards = nodes used")
    p.add_argument("--tokbench", default="tokbench",
                   help="the tokbench binary: a path present on every node, and on the driver for the merge")
    p.add_argument("--duration", default="30s", help="seconds per level: 30, 30s, 2m (default 30s)")
    p.add_argument("--margin", type=float, default=60.0,
                   help="start level 1 this many seconds after launching (default 60: the warmup, two "
                        "answers' time at the default lengths, must fit)")
    p.add_argument("--address", default="auto", help="Ray cluster address (default auto: the local one)")
    p.add_argument("--strategy", default="SPREAD", choices=["SPREAD", "STRICT_SPREAD"],
                   help="placement strategy (default SPREAD, then checked: one bundle per node)")
    p.add_argument("--cpus", type=float, default=1.0, help="CPUs per shard's bundle (default 1)")
    p.add_argument("--out", default=None, help="driver folder for shard-I/ and merged/ (default results/ray-<UTC time>)")
    p.add_argument("--allow-missing", action="store_true",
                   help="merge the shards that finished when some failed (passed to tokbench merge)")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    p.add_argument("--no-report", action="store_true", help="do not print the merged report")
    p.add_argument("--shard-command", default=DEFAULT_SHARD, help=argparse.SUPPRESS)
    p.add_argument("--merge-command", default=DEFAULT_MERGE, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.sweep = sweep
    if args.shards < 1:
        die(f"--shards must be at least 1, not {args.shards}")
    if any(a == "--api-key" or a.startswith("--api-key=") for a in sweep):
        die("do not pass --api-key: a key on a command line is visible to every user of the node; export OPENAI_API_KEY")
    for flag in ("--shard", "--start-at", "--duration", "--result-dir", "--base-url", "--no-tui"):
        if any(a == flag or a.startswith(flag + "=") for a in sweep):
            die(f"{flag} is set by launch.py (see --help)")
    if args.margin < 0:
        die("--margin must not be negative")
    return args


def rfc3339(epoch):
    return datetime.datetime.fromtimestamp(int(epoch), datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def kill_with_parent():
    """In the child: SIGTERM when the Ray worker dies (a cancelled task, a
    driver gone), so no tokbench is left loading the server (Linux)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def probe_node(tokbench):
    """On the node, before any shard starts: its clock, and whether the
    binary is there and runs (`tokbench --version`)."""
    import ray  # in the worker

    out = {"host": socket.gethostname(), "node": ray.get_runtime_context().get_node_id(), "time": time.time()}
    try:
        proc = subprocess.run([tokbench, "--version"], capture_output=True, text=True, timeout=30)
        out["version"] = proc.stdout.strip() if proc.returncode == 0 else None
        out["why"] = None if proc.returncode == 0 else f"`{tokbench} --version` exited {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        out["version"], out["why"] = None, f"no runnable tokbench at {tokbench} ({type(e).__name__})"
    return out


def run_shard(index, argv_template, fields, api_key):
    """On the node: run one shard, return its folder as tar bytes."""
    import ray  # in the worker

    host = socket.gethostname()
    node = ray.get_runtime_context().get_node_id()
    base = {"index": index, "host": host, "node": node}
    tokbench = fields["tokbench"]
    if os.sep in tokbench and not os.access(tokbench, os.X_OK):
        return {**base, "ok": False, "why": f"no executable tokbench at {tokbench} on this node"}
    work = tempfile.mkdtemp(prefix=f"tokbench-shard{index}-")
    result_dir = os.path.join(work, "run")
    argv = [a.format(**fields, index=index, result_dir=result_dir) for a in argv_template]
    env = dict(os.environ)
    if api_key:
        env["OPENAI_API_KEY"] = api_key
    started = time.time()
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, preexec_fn=kill_with_parent)
    except FileNotFoundError:
        return {**base, "ok": False, "why": f"{argv[0]} not found on this node"}
    seconds = time.time() - started
    tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-1:] or [""]
    if proc.returncode != 0:
        return {**base, "ok": False, "why": f"exit {proc.returncode}: {tail[0]}", "seconds": seconds}
    if not os.path.isdir(result_dir):
        return {**base, "ok": False, "why": f"exit 0 but no run folder at {result_dir}", "seconds": seconds}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        tar.add(result_dir, arcname=".")
    files = sum(len(f) for _, _, f in os.walk(result_dir))
    subprocess.run(["rm", "-rf", work])
    return {**base, "ok": True, "tar": buf.getvalue(), "files": files, "seconds": seconds,
            "stdout": proc.stdout}


def unpack(data, into):
    os.makedirs(into)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:  # Python < 3.11.4: refuse anything outside the folder by hand
            for member in tar.getmembers():
                target = os.path.realpath(os.path.join(into, member.name))
                if not target.startswith(os.path.realpath(into)) or member.issym() or member.islnk():
                    raise ValueError(f"unsafe path in shard archive: {member.name}")
            tar.extractall(into)


def main(argv):
    args = parse_args(argv)
    try:
        import ray
        from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    except ImportError:
        die("Ray is not installed (pip install 'ray[default]') in " + sys.executable)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    try:
        ray.init(address=args.address, logging_level="ERROR", log_to_driver=False)
    except Exception as e:  # ConnectionError, or RuntimeError on an unknown address
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        die(f"no Ray cluster at --address {args.address} (start one: ray start --head): {first}")

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    usable = [n for n in nodes if n.get("Resources", {}).get("CPU", 0) >= args.cpus]
    if len(usable) < args.shards:
        die(f"{args.shards} shards need {args.shards} Ray nodes with {args.cpus:g} CPU free each, "
            f"the cluster has {len(usable)} (of {len(nodes)} alive): one shard per node")

    pg = placement_group([{"CPU": args.cpus}] * args.shards, strategy=args.strategy)
    try:
        ray.get(pg.ready(), timeout=60)
    except Exception:
        die(f"the placement group ({args.shards} bundles of {args.cpus:g} CPU, {args.strategy}) "
            "was not ready in 60 s: `ray status` shows what is in use")
    bundle_nodes = placement_group_table(pg)["bundles_to_node_id"]
    if len(set(bundle_nodes.values())) < args.shards:
        die(f"{args.strategy} put two shards on one node ({bundle_nodes}): free a node or use --strategy STRICT_SPREAD")

    # Preflight, one task per bundle: the binary on every node, and each
    # node's clock against the driver's (--start-at is wall-clock time on
    # each node: clocks that disagree start the shards apart).
    probe = ray.remote(probe_node)
    sent = time.time()
    probes = ray.get([
        probe.options(num_cpus=args.cpus, max_retries=0, scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=pg, placement_group_bundle_index=i)).remote(args.tokbench)
        for i in range(args.shards)])
    back = time.time()
    for i, p in enumerate(probes):
        if p["why"]:
            die(f"shard {i} cannot start on node {p['node'][:8]} ({p['host']}): {p['why']}")
        # The node read its clock between `sent` and `back`: the offset is
        # known to within that window.
        lo, hi = p["time"] - back, p["time"] - sent
        if lo > 0.25 or hi < -0.25:
            print(f"launch.py: WARNING: node {p['node'][:8]} ({p['host']}) clock is "
                  f"{(lo + hi) / 2:+.2f} s off the driver's: sync the clocks (NTP) or the shards start apart",
                  flush=True)
    if args.merge_command == DEFAULT_MERGE and os.sep in args.tokbench and not os.access(args.tokbench, os.X_OK):
        die(f"no executable tokbench at {args.tokbench} on the driver, which runs the merge")
    print(f"launch.py: {probes[0]['version']} on every node; preflight {back - sent:.2f} s", flush=True)

    start_epoch = time.time() + args.margin
    fields = {
        "tokbench": args.tokbench,
        "base_url": args.base_url,
        "shards": args.shards,
        "start_at": rfc3339(start_epoch),
        "duration": args.duration,
    }
    # One run seed for every shard (each mixes its index in; merge refuses
    # shards of different seeds); tokbench picks a random one per process
    # when none is given, so the driver picks it, unless the user did.
    if not any(a == "--seed" or a.startswith("--seed=") for a in args.sweep):
        args.sweep = ["--seed", str(random.SystemRandom().getrandbits(48))] + args.sweep
    template = shlex.split(args.shard_command) + args.sweep
    try:  # a bad field fails here, once, not in every task
        [a.format(**fields, index=0, result_dir="x") for a in template]
        [t.format(tokbench="x", out="x") for t in shlex.split(args.merge_command) if t != "{dirs}"]
    except (KeyError, IndexError, ValueError) as e:
        die(f"a command template has an unknown or broken field: {e} (literal braces are written {{{{ }}}})")
    api_key = os.environ.get("OPENAI_API_KEY") or None
    task = ray.remote(run_shard)
    refs = {}
    for i in range(args.shards):
        strategy = PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=i)
        ref = task.options(num_cpus=args.cpus, scheduling_strategy=strategy, max_retries=0).remote(
            i, template, fields, api_key)
        refs[ref] = i
    print(f"launch.py: {args.shards} shards on {len(set(bundle_nodes.values()))} nodes, "
          f"level 1 at {fields['start_at']}, {args.duration} per level, {shlex.join(args.sweep[:2])}", flush=True)

    results, failed = {}, []
    pending = list(refs)
    deadline = None if args.timeout is None else time.time() + args.timeout
    while pending:
        left = None if deadline is None else max(0.0, deadline - time.time())
        done, pending = ray.wait(pending, num_returns=1, timeout=left)
        if not done:
            names = ", ".join(str(refs[r]) for r in pending)
            die(f"shard(s) {names} still running after --timeout {args.timeout:g} s")
        ref = done[0]
        i = refs[ref]
        try:
            r = ray.get(ref)
        except Exception as e:  # the task raised, or died (node lost, worker killed)
            cause = getattr(e, "cause", None) or e
            first = (str(cause).strip().splitlines() or [""])[-1]
            first = f"{type(cause).__name__}: {first}" if first else type(cause).__name__
            r = {"index": i, "host": "?", "node": bundle_nodes.get(i, "?"), "ok": False,
                 "why": f"task failed: {first}"}
        results[i] = r
        where = f"node {r['node'][:8]} ({r['host']})"
        if r["ok"]:
            print(f"shard {i}: {where}: done in {r['seconds']:.1f} s, {r['files']} files, "
                  f"{len(r['tar']) / 1e3:.1f} kB", flush=True)
        else:
            failed.append(i)
            print(f"shard {i}: {where}: FAILED: {r['why']}", flush=True)
    remove_placement_group(pg)

    if failed and (not args.allow_missing or len(failed) == args.shards):
        failed.sort()
        r = results[failed[0]]
        others = f" (shards {', '.join(map(str, failed))} failed)" if len(failed) > 1 else ""
        die(f"shard {failed[0]} failed on node {r['node'][:8]} ({r['host']}): {r['why']}{others}")

    out = args.out or os.path.join("results", "ray-" + datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ"))
    if os.path.exists(out):
        die(f"--out {out} exists already: give a new folder")
    dirs = []
    for i in sorted(results):
        if results[i]["ok"]:
            d = os.path.join(out, f"shard-{i}")
            unpack(results[i]["tar"], d)
            dirs.append(d)
    merged = os.path.join(out, "merged")
    merge = []
    for token in shlex.split(args.merge_command):
        # {dirs} stands alone and becomes one argument per shard folder.
        merge += dirs if token == "{dirs}" else [token.format(tokbench=args.tokbench, out=merged)]
    if failed:
        merge.append("--allow-missing")
        print(f"launch.py: shards {', '.join(map(str, failed))} failed: merging the other {len(dirs)} (--allow-missing)")
    proc = subprocess.run(merge, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        die(f"merge failed (exit {proc.returncode}): {shlex.join(merge)}")
    if not os.path.isdir(merged):
        print(f"launch.py: the merge command wrote no folder at {merged}")
        return 0
    print(f"merged: {merged}")
    if not args.no_report and args.merge_command == DEFAULT_MERGE:
        subprocess.run([args.tokbench, "report", merged])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
