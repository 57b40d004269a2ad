#!/usr/bin/env bash
# Run a sharded tokbench sweep on Kubernetes and merge it (docs/machines.md).
# It renders the manifests beside this script with the
# shard count and a start time computed now (now + --margin), applies the
# shared volume and the shards' Indexed Job, waits for that Job to finish,
# applies the merge Job, waits for it, and prints the merged report.
#
#   deploy/kubernetes/submit.sh --base-url http://vllm.default:8000 --shards 4 \
#     --image registry.example/tokbench:0.1 --duration 2m \
#     -- --model Qwen/Qwen3-8B --concurrency 64,256,1024
#
# Arguments after `--` go to `tokbench sweep` unchanged (the concurrency of a
# level is the run's total: each shard takes its part), after `--seed N`
# (one random seed for every shard) unless they hold a --seed. The API key, if the
# server needs one, comes from $OPENAI_API_KEY: it is put in the Secret
# tokbench-api-key (read from a file descriptor, never on a command line) and
# reaches tokbench through the environment. `--render-only DIR` writes the
# rendered manifests to DIR and touches no cluster (the test suite checks
# them that way); otherwise they are kept in ./<run name>.k8s/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

usage() {
  cat <<'EOF'
usage: submit.sh --base-url URL --shards N [options] [-- SWEEP_ARGS...]

  --base-url URL        the server root every shard loads (no /v1)
  --shards N            number of shards (pods), N >= 1
  --image IMAGE         tokbench image (default tokbench:latest; see Dockerfile)
  --duration S          seconds per level: 30, 30s, 2m (default 60s)
  --margin SECONDS      start level 1 this long after submitting (default 120:
                        image pulls, scheduling and the warmup, two answers'
                        time at the default lengths, must fit in it)
  --start-at TIME       an explicit start instead (RFC 3339 or Unix seconds)
  --run-name NAME       names the Jobs and the folder (default tokbench-<UTC time>)
  --pvc NAME            the ReadWriteMany claim (default tokbench-results)
  --pvc-size SIZE       its size when created (default 5Gi)
  --storage-class NAME  its storage class (default: the cluster's default)
  --secret NAME         Secret holding the key as `api-key` (default tokbench-api-key)
  --cpu CPU             CPU request of each shard (default 1)
  --namespace NS        namespace for everything (default: kubectl's current)
  --timeout SECONDS     how long to wait for the shards (default 7200)
  --allow-missing       merge even if shards are missing (also chosen
                        automatically when some shards failed)
  --fetch DIR           copy the merged folder to DIR (a new folder) afterwards
  --helper-image IMAGE  image of the fetch pod, needs tar (default busybox:1.37)
  --render-only DIR     write the rendered manifests to DIR; apply nothing
EOF
}

die() {
  echo "submit.sh: $*" >&2
  exit 1
}

base_url='' shards='' image='tokbench:latest' duration='60s' margin=120 start_at=''
run_name="tokbench-$(date -u +%Y%m%d-%H%M%S)" pvc='tokbench-results' pvc_size='5Gi'
storage_class='' secret='tokbench-api-key' cpu='1' namespace='' timeout=7200
allow_missing=0 fetch_dir='' helper_image='busybox:1.37' render_dir=''
sweep_args=()

need_value() { [ "$#" -ge 2 ] || die "$1 needs a value"; }
while [ "$#" -gt 0 ]; do
  case "$1" in
    --base-url) need_value "$@"; base_url=$2; shift 2 ;;
    --shards) need_value "$@"; shards=$2; shift 2 ;;
    --image) need_value "$@"; image=$2; shift 2 ;;
    --duration) need_value "$@"; duration=$2; shift 2 ;;
    --margin) need_value "$@"; margin=$2; shift 2 ;;
    --start-at) need_value "$@"; start_at=$2; shift 2 ;;
    --run-name) need_value "$@"; run_name=$2; shift 2 ;;
    --pvc) need_value "$@"; pvc=$2; shift 2 ;;
    --pvc-size) need_value "$@"; pvc_size=$2; shift 2 ;;
    --storage-class) need_value "$@"; storage_class=$2; shift 2 ;;
    --secret) need_value "$@"; secret=$2; shift 2 ;;
    --cpu) need_value "$@"; cpu=$2; shift 2 ;;
    --namespace | -n) need_value "$@"; namespace=$2; shift 2 ;;
    --timeout) need_value "$@"; timeout=$2; shift 2 ;;
    --allow-missing) allow_missing=1; shift ;;
    --fetch) need_value "$@"; fetch_dir=$2; shift 2 ;;
    --helper-image) need_value "$@"; helper_image=$2; shift 2 ;;
    --render-only) need_value "$@"; render_dir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; sweep_args=("$@"); break ;;
    *) die "unknown option $1 (sweep flags go after --; see --help)" ;;
  esac
done

# --- checks: one line each, before anything is applied ----------------------
[ -n "$base_url" ] || die "--base-url is required"
[ -n "$shards" ] || die "--shards is required"
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || die "--shards must be a whole number >= 1, not '$shards'"
[[ "$margin" =~ ^[0-9]+$ ]] || die "--margin must be whole seconds, not '$margin'"
[[ "$timeout" =~ ^[1-9][0-9]*$ ]] || die "--timeout must be whole seconds, not '$timeout'"
[[ "$duration" =~ ^[0-9]+(\.[0-9]+)?(s|m|h)?$ ]] || die "--duration must look like 30, 30s or 2m, not '$duration'"
dns_label='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
# Job names and the pods' hostnames derived from them stay under 63 characters.
[[ "$run_name" =~ $dns_label && ${#run_name} -le 40 ]] ||
  die "--run-name must be lowercase letters, digits and '-', at most 40 characters, not '$run_name'"
for name in "$pvc" "$secret"; do
  [[ "$name" =~ $dns_label && ${#name} -le 63 ]] || die "'$name' is not a valid Kubernetes name"
done
[[ "$image" =~ ^[A-Za-z0-9._/:@-]+$ ]] || die "--image '$image' is not an image reference"
[[ "$helper_image" =~ ^[A-Za-z0-9._/:@-]+$ ]] || die "--helper-image '$helper_image' is not an image reference"
[[ "$pvc_size" =~ ^[0-9]+(Ki|Mi|Gi|Ti|k|M|G|T)?$ ]] || die "--pvc-size must look like 5Gi, not '$pvc_size'"
[[ "$cpu" =~ ^[0-9]+(\.[0-9]+|m)?$ ]] || die "--cpu must look like 1, 0.5 or 500m, not '$cpu'"
[ -z "$storage_class" ] || [[ "$storage_class" =~ ^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$ ]] ||
  die "--storage-class '$storage_class' is not a valid name"
[ -z "$fetch_dir" ] || [ ! -e "$fetch_dir" ] ||
  die "--fetch $fetch_dir exists already: kubectl cp would copy into it; give a new folder"
for arg in "${sweep_args[@]}"; do
  case "$arg" in
    --api-key | --api-key=*)
      die "do not pass --api-key: a key on a command line is visible to anyone who can read the Job; export OPENAI_API_KEY (it goes into the Secret $secret)" ;;
    --shard | --shard=* | --start-at | --start-at=* | --duration | --duration=* | \
      --result-dir | --result-dir=* | --base-url | --base-url=* | --no-tui)
      die "$arg is set by submit.sh (use its own options: see --help)" ;;
    --seed | --seed=*) have_seed=1 ;;
  esac
done
# Every shard must draw from one run seed (each mixes its index into it;
# merge refuses shards of different seeds), and tokbench picks a random one
# per process when none is given: so one is chosen here, unless given.
if [ -z "${have_seed:-}" ]; then
  seed=$(( (RANDOM << 30) | (RANDOM << 15) | RANDOM ))
  sweep_args=(--seed "$seed" "${sweep_args[@]}")
fi

# --- rendering --------------------------------------------------------------
# A double-quoted YAML scalar; `$(` doubled so the kubelet does not expand it.
yaml_quote() {
  local s=$1 bs='\' q='"' var='$('
  s=${s//"$bs"/"$bs$bs"}
  s=${s//"$q"/"$bs$q"}
  s=${s//"$var"/"\$$var"}
  printf '"%s"' "$s"
}

utc_of_epoch() {
  date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r "$1" +%Y-%m-%dT%H:%M:%SZ
}

# is_failed I: index I is in $failed_indexes, the Job's `.status.failedIndexes`
# ("1,3-5"): its folder, absent or cut short, is left out of the merge.
failed_indexes=''
is_failed() {
  local part parts
  IFS=',' read -ra parts <<<"$failed_indexes"
  for part in "${parts[@]}"; do
    if [[ "$part" =~ ^([0-9]+)-([0-9]+)$ ]]; then
      ((BASH_REMATCH[1] <= $1 && $1 <= BASH_REMATCH[2])) && return 0
    elif [ "$part" = "$1" ]; then
      return 0
    fi
  done
  return 1
}

# render TEMPLATE OUT: every @NAME@ replaced. Values were checked above or
# are quoted here; list-valued ones become one YAML item a line. Every
# replacement is a quoted "$var": bash 5.2 reads `\` and `&` in a bare one.
render() {
  local text
  text=$(<"$1")
  local item_indent='            '
  local args_yaml='' dirs_yaml='' merge_flags=''
  local arg i
  for arg in "${sweep_args[@]}"; do
    args_yaml+="${item_indent}- $(yaml_quote "$arg")"$'\n'
  done
  for ((i = 0; i < shards; i++)); do
    is_failed "$i" || dirs_yaml+="${item_indent}- /results/${run_name}/shard-${i}"$'\n'
  done
  [ "$allow_missing" = 1 ] && merge_flags="${item_indent}- --allow-missing"$'\n'
  local class_block=''
  [ -n "$storage_class" ] && class_block=$'\n'"  storageClassName: ${storage_class}"
  # Whole lines holding only a list placeholder: replaced by the items (or
  # removed when there are none).
  text=${text//$'@SWEEP_ARGS@\n'/"$args_yaml"}
  text=${text//$'@SHARD_DIRS@\n'/"$dirs_yaml"}
  text=${text//$'@MERGE_FLAGS@\n'/"$merge_flags"}
  text=${text//$'\n@STORAGE_CLASS@'/"$class_block"}
  text=${text//@RUN@/"$run_name"}
  text=${text//@SHARDS@/"$shards"}
  text=${text//@IMAGE@/"$image"}
  text=${text//@HELPER_IMAGE@/"$helper_image"}
  text=${text//@PVC@/"$pvc"}
  text=${text//@PVC_SIZE@/"$pvc_size"}
  text=${text//@SECRET@/"$secret"}
  text=${text//@CPU@/"$cpu"}
  text=${text//@DURATION@/"$duration"}
  text=${text//@START_AT@/"$start_at_rendered"}
  # Quoted in the templates already: escape without adding quotes.
  local url
  url=$(yaml_quote "$base_url")
  url=${url#\"}
  url=${url%\"}
  text=${text//@BASE_URL@/"$url"}
  if [[ "$text" =~ @[A-Z_]+@ ]]; then
    die "internal: placeholder ${BASH_REMATCH[0]} left unrendered in $1"
  fi
  printf '%s\n' "$text" >"$2"
}

compute_start() {
  if [ -n "$start_at" ]; then
    start_at_rendered=$start_at
  else
    start_at_rendered=$(utc_of_epoch $(($(date +%s) + margin)))
  fi
}

render_all() {
  local out=$1
  mkdir -p "$out"
  local name
  for name in pvc shards-job merge-job fetch-pod; do
    render "$here/$name.yaml" "$out/$name.yaml"
  done
}

if [ -n "$render_dir" ]; then
  compute_start
  render_all "$render_dir"
  echo "rendered $run_name: $shards shards, level 1 at $start_at_rendered, into $render_dir"
  exit 0
fi

# --- applying ---------------------------------------------------------------
command -v kubectl >/dev/null 2>&1 || die "kubectl is not installed (or use --render-only DIR)"
kc=(kubectl)
[ -n "$namespace" ] && kc+=(--namespace "$namespace")
# The rendered manifests are kept: for `kubectl delete -f`, and for fetching
# the merged folder later (fetch-pod.yaml).
work=${run_name}.k8s
mkdir -p "$work"

if [ -n "${OPENAI_API_KEY:-}" ]; then
  # From a file descriptor, so the key is in no process's argument list.
  "${kc[@]}" create secret generic "$secret" \
    --from-file=api-key=<(printf '%s' "$OPENAI_API_KEY") \
    --dry-run=client -o yaml | "${kc[@]}" apply -f - >/dev/null
  echo "Secret $secret: key from OPENAI_API_KEY"
fi

start_at_rendered=placeholder
render_all "$work"
"${kc[@]}" apply -f "$work/pvc.yaml"
# The start time is computed as late as possible: right before the Job.
compute_start
render "$here/shards-job.yaml" "$work/shards-job.yaml"
"${kc[@]}" apply -f "$work/shards-job.yaml"
echo "$run_name: $shards shards, level 1 at $start_at_rendered, $duration per level"

# poll_job NAME SECONDS: poll the Job until its Complete or Failed condition
# is true (kubectl wait takes one condition, and a failed pod must not mean
# waiting for the whole timeout), printing its counts when they change. Sets
# job_result (Complete or Failed), succeeded, failed_indexes and ready_late
# (the first time every pod was ready was after --start-at). Exits on timeout.
poll_job() {
  local job="job/$1" deadline=$(($(date +%s) + $2)) last='' state conditions active failed ready
  local want=$3 start_epoch=${4:-} all_ready=''
  ready_late=''
  while :; do
    state=$("${kc[@]}" get "$job" -o 'jsonpath={range .status.conditions[?(@.status=="True")]}{.type}{" "}{end}|{.status.active}|{.status.succeeded}|{.status.failed}|{.status.failedIndexes}|{.status.ready}')
    IFS='|' read -r conditions active succeeded failed failed_indexes ready <<<"$state"
    succeeded=${succeeded:-0}
    local line="active ${active:-0}, ready ${ready:-0}, succeeded $succeeded, failed ${failed:-0}"
    if [ "$line" != "$last" ]; then
      echo "$1: $line"
      last=$line
    fi
    if [ -n "$start_epoch" ] && [ -z "$all_ready" ] && [ "${ready:-0}" -ge "$want" ]; then
      all_ready=$(date +%s)
      [ "$all_ready" -le "$start_epoch" ] || ready_late=$((all_ready - start_epoch))
    fi
    case " $conditions " in
      *" Complete "*) job_result=Complete; return ;;
      *" Failed "*) job_result=Failed; return ;;
    esac
    [ "$(date +%s)" -lt "$deadline" ] ||
      die "$1 did not finish within ${2}s; see: ${kc[*]} describe $job"
    sleep "${TOKBENCH_SUBMIT_POLL_S:-5}"
  done
}

start_epoch=''
[[ "$start_at_rendered" =~ ^[0-9]+$ ]] && start_epoch=$start_at_rendered
[ -n "$start_epoch" ] || start_epoch=$(date -u -d "$start_at_rendered" +%s 2>/dev/null || true)
poll_job "${run_name}-shards" "$timeout" "$shards" "$start_epoch"
if [ -n "$ready_late" ]; then
  echo "WARNING: not every shard was running until ${ready_late}s after --start-at: a shard that starts late refuses to run; raise --margin"
fi
if [ "$job_result" = Failed ]; then
  [ "$succeeded" -gt 0 ] ||
    die "every shard failed; see: ${kc[*]} logs -l tokbench/run=$run_name --prefix --all-containers"
  echo "shards ${failed_indexes:-?} failed: merging the $succeeded that finished (--allow-missing)"
  allow_missing=1
fi

render "$here/merge-job.yaml" "$work/merge-job.yaml"
"${kc[@]}" apply -f "$work/merge-job.yaml"
poll_job "${run_name}-merge" 600 1
if [ "$job_result" != Complete ]; then
  "${kc[@]}" logs "job/${run_name}-merge" -c merge >&2 || true
  die "the merge Job failed; its log is above"
fi
"${kc[@]}" logs "job/${run_name}-merge" -c merge
"${kc[@]}" logs "job/${run_name}-merge" -c report
echo "merged folder: /results/${run_name}/merged on the claim $pvc"

render "$here/fetch-pod.yaml" "$work/fetch-pod.yaml"
if [ -n "$fetch_dir" ]; then
  "${kc[@]}" apply -f "$work/fetch-pod.yaml"
  "${kc[@]}" wait --for=condition=Ready --timeout=300s "pod/${run_name}-fetch" >/dev/null
  "${kc[@]}" cp "${run_name}-fetch:/results/${run_name}/merged" "$fetch_dir"
  "${kc[@]}" delete pod "${run_name}-fetch" --wait=false >/dev/null
  echo "copied to $fetch_dir"
else
  echo "to copy it here:"
  echo "  ${kc[*]} apply -f $work/fetch-pod.yaml"
  echo "  ${kc[*]} wait --for=condition=Ready pod/${run_name}-fetch"
  echo "  ${kc[*]} cp ${run_name}-fetch:/results/${run_name}/merged ./${run_name}"
  echo "  ${kc[*]} delete -f $work/fetch-pod.yaml"
fi
echo "manifests: $work/ (${kc[*]} delete -f $work/ removes the Jobs; keep pvc.yaml's claim for the next run)"
