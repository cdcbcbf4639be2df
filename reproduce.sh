#!/usr/bin/env bash
# Reproduce "Uniform Herding" (class-incremental CIFAR-100, 12 run IDs x 3 seeds): the one entry point
# for reviewers, on the host and as the Docker image's entrypoint. It only calls the `uh` command;
# `./reproduce.sh --help` lists the targets. docs/reproducing.md has the hardware and time estimates.
# The run ID lists mirror src/uniform_herding/config.py (tests/test_container.py checks that).
set -euo pipefail

readonly RUN_IDS=(B0 B1 B2 B3 a1 a2 a3 a4 s1 s2 s3 s4)  # the paper's twelve (PAPER_RUNS): `all`
readonly BEYOND_PAPER_IDS=(r1 r2 r3)                     # beyond the paper (BEYOND_PAPER)
readonly REFRESH_IDS=(B1 B3 r1 r2 r3)                    # `refresh` (RUN_GROUPS["refresh"])
readonly VALID_TARGETS="RUN_ID (${RUN_IDS[*]} ${BEYOND_PAPER_IDS[*]}), all, next, refresh, smoke, doctor, check, report, test"
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
readonly REPO_DIR

usage() {
    cat <<EOF
Usage: ./reproduce.sh TARGET [OPTIONS]

Targets:
  doctor    the preflight, first on a new machine (minutes): versions against the paper's pins,
            the GPU, the archive, disk; a self-test of the fp16 GPU path against Lightning's stock
            path; a timed step and the estimated hours of every run ID (uh doctor)
  RUN_ID    one run ID, every seed: ${RUN_IDS[*]}; beyond the paper: ${BEYOND_PAPER_IDS[*]}
  all       the paper's twelve run IDs in turn (finished runs are skipped; a failed run does not
            stop the others and is reported at the end), then check and report
  refresh   beyond the paper: the refresh-isolation study, ${REFRESH_IDS[*]} (r1-r3 and the
            runs they are compared with), in turn as 'all' does, then check and report
  smoke     the kick-the-tires run: the paper's twelve run IDs under the tiny synthetic 'smoke'
            profile (CPU, minutes, no download) into a scratch results directory, then check and
            report (r1-r3 too: ./reproduce.sh refresh --profile smoke --results-dir results-smoke);
            runs on every core at once unless --executor or --jobs says otherwise
  next      where check said UNDECIDED (exit 4): the run IDs and pre-registered seeds of the claims'
            next look (next_step in the results' check_report.json), then check again, look by
            look, until the verdict is decided; then report
  check     compare the results with expected_results/ (verdicts per run ID and claim; exit 0
            RESULTS REPLICATED, 1 NOT REPLICATED, 3 INCOMPLETE, 4 UNDECIDED: ./reproduce.sh next,
            5 INCONCLUSIVE)
  report    tables and figures from the results
  test      the project's test suite (python -m pytest -q)

Options:
  --seeds "S1 S2 ..."  seeds (default: uh's, 1993 2023 42); also --seed S, repeated
  --profile P          paper (default), smoke, cifar10, cifar10-cpu or cifar10-cpu-long
                       (sizes only; docs/reproducing.md, "Profiles")
  --device D           auto (default: the GPU for paper and cifar10, refused at once without a
                       usable one; the CPU for the small profiles), cuda, or cpu to insist; smoke
                       always runs on the CPU, where its expected results were made
  --data-dir D         CIFAR-100 directory (default: \$UH_DATA_DIR, else the repo's ./data);
                       relative paths are taken from the current directory
  --results-dir R      results directory (default: \$UH_RESULTS_DIR, else the repo's ./results;
                       for smoke: \$UH_SMOKE_RESULTS_DIR, else ./results-smoke)
  --force              run again even if a result exists
  --executor E         local: every (run ID, seed) as a submitit job on this machine, one per
                       visible GPU (one per CPU core without one); slurm: all of them as one
                       Slurm job array, then follow with 'uh status' and run check and report
                       when it is done (docs/cluster.md; UH_SLURM_* set partition, time, ...).
                       Default: \$UH_EXECUTOR, else one run after another. Results do not depend on it
  --jobs N             short for --executor local with N runs per GPU (N at once on a CPU)
                       (default: \$UH_JOBS)
  -h, --help           this help

Outside the container the first call creates ./.venv and installs the pinned project into it.
Environment: UH=/path/to/uh uses that executable instead; PYTHON picks the interpreter for the venv.

Examples:
  ./reproduce.sh smoke
  ./reproduce.sh B3 --seeds "1993 2023"
  ./reproduce.sh all --jobs 3
  ./reproduce.sh all --executor slurm
  ./reproduce.sh all
  ./reproduce.sh refresh
EOF
}

log() { printf 'reproduce.sh: %s\n' "$*" >&2; }

usage_error() {
    log "$*"
    log "valid targets: ${VALID_TARGETS}; see ./reproduce.sh --help"
    exit 2
}

is_run_id() {
    local id
    for id in "${RUN_IDS[@]}" "${BEYOND_PAPER_IDS[@]}"; do
        [[ "$1" == "$id" ]] && return 0
    done
    return 1
}

# --- arguments ---------------------------------------------------------------------------------------
target=""
seeds=()
profile=""
data_dir=""
results_dir=""
force=0
jobs=""
executor=""
device=""

need_value() { [[ $# -ge 2 && -n "$2" ]] || usage_error "option $1 needs a value"; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --seeds) need_value "$@"; read -r -a more <<<"$2"; seeds+=("${more[@]}"); shift 2 ;;
        --seeds=*) read -r -a more <<<"${1#*=}"; seeds+=("${more[@]}"); shift ;;
        --seed) need_value "$@"; seeds+=("$2"); shift 2 ;;
        --seed=*) seeds+=("${1#*=}"); shift ;;
        --profile) need_value "$@"; profile=$2; shift 2 ;;
        --profile=*) profile=${1#*=}; shift ;;
        --data-dir) need_value "$@"; data_dir=$2; shift 2 ;;
        --data-dir=*) data_dir=${1#*=}; shift ;;
        --results-dir) need_value "$@"; results_dir=$2; shift 2 ;;
        --results-dir=*) results_dir=${1#*=}; shift ;;
        --force) force=1; shift ;;
        --jobs) need_value "$@"; jobs=$2; shift 2 ;;
        --jobs=*) jobs=${1#*=}; shift ;;
        --executor) need_value "$@"; executor=$2; shift 2 ;;
        --executor=*) executor=${1#*=}; shift ;;
        --device) need_value "$@"; device=$2; shift 2 ;;
        --device=*) device=${1#*=}; shift ;;
        -*) usage_error "unknown option '$1'" ;;
        *)
            [[ -z "$target" ]] || usage_error "one target at a time (got '$target' and '$1')"
            target=$1
            shift
            ;;
    esac
done

[[ -n "$target" ]] || usage_error "no target given"
case "$target" in
    all | next | refresh | smoke | doctor | check | report | test) ;;
    *) is_run_id "$target" || usage_error "unknown target '$target'" ;;
esac
for seed in ${seeds[@]+"${seeds[@]}"}; do
    [[ "$seed" =~ ^[0-9]+$ ]] || usage_error "seed '$seed' is not a non-negative integer"
done
[[ -z "$jobs" || "$jobs" =~ ^[1-9][0-9]*$ ]] || usage_error "--jobs '$jobs' is not a positive integer"
[[ -z "$executor" || "$executor" == local || "$executor" == slurm ]] ||
    usage_error "--executor '$executor' is not local or slurm"
[[ -z "$device" || "$device" == auto || "$device" == cuda || "$device" == cpu ]] ||
    usage_error "--device '$device' is not auto, cuda or cpu"
[[ "$target" != next || ${#seeds[@]} -eq 0 ]] || usage_error "next takes its seeds from the procedure, not --seed"
if [[ "$target" == smoke ]]; then
    [[ -z "$profile" || "$profile" == smoke ]] || usage_error "smoke always uses --profile smoke"
    [[ -z "$device" || "$device" == cpu ]] || usage_error "smoke always runs on the CPU (--device cpu)"
    profile=smoke
    device=cpu  # its expected results are a CPU's, and a CPU-only cluster has no GPU to give it
    results_dir=${results_dir:-${UH_SMOKE_RESULTS_DIR:-$REPO_DIR/results-smoke}}
    # every core at once (one run per core; results do not depend on it)
    [[ -n "$executor$jobs${UH_EXECUTOR:-}${UH_JOBS:-}" ]] || executor=local
fi
# Relative directories (options or UH_* variables) are the caller's, not the repo's (we cd there below).
data_dir=${data_dir:-${UH_DATA_DIR:-}}
results_dir=${results_dir:-${UH_RESULTS_DIR:-}}
absolute() { if [[ -z "$1" || "$1" == /* ]]; then printf '%s' "$1"; else printf '%s/%s' "$PWD" "$1"; fi; }
data_dir=$(absolute "$data_dir")
results_dir=$(absolute "$results_dir")

# --- the environment: the image's, a given UH, or ./.venv ------------------------------------------------
cd "$REPO_DIR"  # repo-relative paths (expected_results/, ./data, ./results) resolve from here
python=${PYTHON:-python3}
if [[ -n "${UH:-}" ]]; then
    :  # a given uh executable (tests substitute a fake)
elif [[ "${UH_IN_CONTAINER:-0}" == 1 ]]; then
    UH=$(command -v uh) || { log "uh is not on PATH in this container"; exit 1; }
else
    venv=${UH_VENV:-$REPO_DIR/.venv}
    if [[ ! -x "$venv/bin/uh" ]]; then
        log "setting up $venv (one time: torch and the pinned dependencies, a few GB)"
        [[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
        # On an NVIDIA host the paper's torch, as in the image: CUDA 12.8 (driver >= 570) from the PyTorch
        # index. Elsewhere, or where that index cannot be reached, PyPI's (CUDA 13.0: driver >= 580 for a GPU).
        cuda_runtime=(-c constraints-cu130.txt)
        if [[ -e /proc/driver/nvidia/version ]] || command -v nvidia-smi >/dev/null 2>&1; then
            if "$venv/bin/python" -m pip install --retries 1 --timeout 30 -c constraints.txt \
                --extra-index-url "${UH_TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu128}" \
                "torch==2.11.0+cu128" "torchvision==0.26.0+cu128"; then
                cuda_runtime=()
            else
                log "the PyTorch cu128 index could not be reached: installing PyPI's torch 2.11.0 (CUDA 13.0), which needs NVIDIA driver >= 580"
            fi
        fi
        "$venv/bin/python" -m pip install -c constraints.txt ${cuda_runtime[@]+"${cuda_runtime[@]}"} -e ".[dev]"
    fi
    UH=$venv/bin/uh
    python=$venv/bin/python
fi

# --- uh's arguments ----------------------------------------------------------------------------------
run_args=()
for seed in ${seeds[@]+"${seeds[@]}"}; do run_args+=(--seed "$seed"); done
[[ -z "$profile" ]] || run_args+=(--profile "$profile")
[[ -z "$data_dir" ]] || run_args+=(--data-dir "$data_dir")
[[ -z "$results_dir" ]] || run_args+=(--results-dir "$results_dir")
[[ "$force" == 0 ]] || run_args+=(--force)
[[ -z "$jobs" ]] || run_args+=(--jobs "$jobs")
[[ -z "$executor" ]] || run_args+=(--executor "$executor")
[[ -z "$device" ]] || run_args+=(--device "$device")

check_args=()
[[ -z "$results_dir" ]] || check_args+=(--results-dir "$results_dir")
[[ -z "$profile" ]] || check_args+=(--profile "$profile")

report_args=()
[[ -z "$results_dir" ]] || report_args+=(--results-dir "$results_dir")

doctor_args=()
[[ -z "$profile" ]] || doctor_args+=(--profile "$profile")
[[ -z "$data_dir" ]] || doctor_args+=(--data-dir "$data_dir")
[[ -z "$results_dir" ]] || doctor_args+=(--results-dir "$results_dir")
[[ -z "$device" ]] || doctor_args+=(--device "$device")
[[ -z "$jobs" ]] || doctor_args+=(--jobs "$jobs")

run_uh() {
    log "+ uh $*"
    "$UH" "$@"
}

# check and report, each run even if the other fails; returns the first failure's status.
check_and_report() {
    local rc=0 status
    run_uh check ${check_args[@]+"${check_args[@]}"} || { status=$?; log "uh check exited $status"; rc=$status; }
    [[ $rc -ne 4 ]] || log "UNDECIDED: ./reproduce.sh next runs the claims' next look (check_report.json's next_step)"
    run_uh report ${report_args[@]+"${report_args[@]}"} || {
        status=$?
        log "uh report exited $status"
        [[ $rc -ne 0 ]] || rc=$status
    }
    return "$rc"
}

# each given run ID in turn, then check and report; a failed run does not stop the others, a signal does.
# run_each GROUP ID...: the IDs in turn, then check and report; on Slurm one array of the group instead.
run_each() {
    local group=$1 id start status rc failed=()
    shift
    if [[ "${executor:-${UH_EXECUTOR:-}}" == slurm ]]; then  # one array of every run; returns after submitting
        run_uh run "$group" ${run_args[@]+"${run_args[@]}"}
        log "when 'uh status' shows every run done: ./reproduce.sh check; ./reproduce.sh report"
        exit 0
    fi
    for id in "$@"; do
        start=$SECONDS
        if run_uh run "$id" ${run_args[@]+"${run_args[@]}"}; then
            log "$id done ($((SECONDS - start)) s)"
        else
            status=$?
            if [[ $status -eq 130 || $status -eq 143 ]]; then  # SIGINT / SIGTERM: stop everything
                log "$id interrupted (exit $status); its last finished task is kept, re-run to resume"
                exit "$status"
            fi
            log "$id FAILED (exit $status after $((SECONDS - start)) s); going on with the others"
            failed+=("$id")
        fi
    done
    rc=0
    check_and_report || rc=$?
    if [[ ${#failed[@]} -gt 0 ]]; then
        log "FAILED run IDs: ${failed[*]} (re-run one with: ./reproduce.sh ID)"
        exit 1
    fi
    log "all $# run IDs done"
    exit "$rc"
}

# --- targets -----------------------------------------------------------------------------------------
case "$target" in
    all) run_each all "${RUN_IDS[@]}" ;;
    refresh) run_each refresh "${REFRESH_IDS[@]}" ;;
    smoke)
        [[ "${executor:-${UH_EXECUTOR:-}}" != slurm ]] || run_args+=(--wait)  # check needs the results
        run_uh run all ${run_args[@]+"${run_args[@]}"}
        check_and_report
        log "smoke results in $results_dir"
        ;;
    doctor) run_uh doctor ${doctor_args[@]+"${doctor_args[@]}"} ;;
    check) run_uh check ${check_args[@]+"${check_args[@]}"} ;;
    next)
        report_json=${results_dir:-$REPO_DIR/results}/check_report.json
        [[ "${executor:-${UH_EXECUTOR:-}}" != slurm ]] || run_args+=(--wait)  # check needs the results
        while true; do
            rc=0
            run_uh check ${check_args[@]+"${check_args[@]}"} || rc=$?
            [[ $rc -eq 4 ]] || break
            # next_step: {"run_ids": [...], "seeds": [...]}, written by the check just above
            read -r -a step_ids < <("$python" -c 'import json,sys; print(*json.load(open(sys.argv[1]))["next_step"]["run_ids"])' "$report_json")
            read -r -a step_seeds < <("$python" -c 'import json,sys; print(*json.load(open(sys.argv[1]))["next_step"]["seeds"])' "$report_json")
            step_args=()
            for seed in "${step_seeds[@]}"; do step_args+=(--seed "$seed"); done
            log "the claims' next look: ${step_ids[*]} on seeds ${step_seeds[*]}"
            run_uh run "${step_ids[@]}" "${step_args[@]}" ${run_args[@]+"${run_args[@]}"}
        done
        run_uh report ${report_args[@]+"${report_args[@]}"} || true
        exit "$rc"
        ;;
    report) run_uh report ${report_args[@]+"${report_args[@]}"} ;;
    test)
        if [[ "${UH_IN_CONTAINER:-0}" == 1 ]]; then
            log "the test suite is not in the image; run ./reproduce.sh test on the host"
            exit 1
        fi
        log "+ $python -m pytest -q"
        "$python" -m pytest -q
        ;;
    *) run_uh run "$target" ${run_args[@]+"${run_args[@]}"} ;;
esac
