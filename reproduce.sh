#!/usr/bin/env bash
# Reproduce "Uniform Herding" (class-incremental CIFAR-100, 12 run IDs x 3 seeds): the one entry point
# for reviewers, on the host and as the Docker image's entrypoint. It only calls the `uh` command;
# `./reproduce.sh --help` lists the targets. docs/reproducing.md has the hardware and time estimates.
# The run ID lists mirror src/uniform_herding/catalogue/run_ids.py (tests/test_container.py checks that).
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
  all       first its price (uh price: runs and hours of the 36 runs and of the whole procedure,
            on the device that will train them: its own hours once uh doctor has timed it, else
            on a GPU the paper's T4 hours, named as such, and on a CPU none, saying so) and a
            question (y/N; --yes answers it); refused at once where this machine cannot train the
            profile. Then the paper's twelve run IDs in turn (finished runs are skipped; a failed
            run does not stop the others and is reported at the end, after check and report),
            then the procedure to a decided verdict, as 'next'. With --paper-runs-only, or seeds of
            your own (--seeds), it checks and reports once after the twelve. With --executor slurm:
            the whole procedure as Slurm jobs, to a decided verdict and its report, with no one at
            the terminal (docs/cluster.md)
  refresh   beyond the paper: the refresh-isolation study, ${REFRESH_IDS[*]} (r1-r3 and the
            runs they are compared with), in turn as 'all' does, then check and report
  smoke     the kick-the-tires run: the paper's twelve run IDs under the tiny synthetic 'smoke'
            profile (CPU, minutes, no download) into a scratch results directory, then check and
            report (r1-r3 too: ./reproduce.sh refresh --profile smoke --results-dir results-smoke);
            runs on every core at once unless --executor or --jobs says otherwise
  next      the procedure: check; while check says INCOMPLETE (exit 3) or UNDECIDED (exit 4) and
            the results' check_report.json names a next_step (the paper runs still missing, or the
            claims' next look), its run IDs on its pre-registered seeds, then check again; it stops
            when next_step is empty (the verdict is decided, or the registered seeds are spent),
            then reports and exits with check's status; it refuses a next_step it ran before, and
            more steps than the procedure's looks + 1
  check     compare the results with expected_results/ (verdicts per run ID and claim; exit 0
            RESULTS REPLICATED, 1 NOT REPLICATED, 2 bad input, 3 INCOMPLETE and 4 UNDECIDED:
            ./reproduce.sh next, 5 INCONCLUSIVE, 6 EXPECTED SET MATCHED: an expected set other
            than the shipped paper set, or a subset of its run IDs (--run-ids), matched: no badge)
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
  --paper-runs-only    all: stop after the paper's 36 runs (check and report once); ./reproduce.sh
                       next goes on from there
  --yes                all: start without asking, after the price (needed where standard input is
                       not a terminal)
  --executor E         local: every (run ID, seed) as a submitit job on this machine, one per
                       visible GPU (one per CPU core without one); slurm: all of them as one
                       Slurm job array, then follow with 'uh status'; for all, a chain of Slurm
                       jobs behind it goes on to a decided verdict and its report by itself (the
                       terminal may close; run again while it is active: refused); for the others,
                       when it is done, check and report
                       (docs/cluster.md; UH_SLURM_* set partition, time, ...).
                       Default: \$UH_EXECUTOR, else one run at a time. Results do not depend on it
  --cancel             all --executor slurm: cancel the results dir's chain (runs keep their
                       checkpoints); the same command without --cancel resumes from the results
  --jobs N             short for --executor local with N runs per GPU (N at once on a CPU)
                       (default: \$UH_JOBS)
  --run-ids IDS        check: only these run IDs of the expected set, comma-separated (B0,B3):
                       a subset, which the verdict names, never the badge (without it a run ID
                       of the set missing is INCOMPLETE)
  -h, --help           this help

SIGTERM or SIGINT (a scheduler, timeout, kill, Ctrl-C) is passed to the running uh, which keeps
every finished run and task; the script then says how to go on and exits with 128 + the signal.

Outside the container the first call creates ./.venv and installs the pinned project into it.
Environment: UH=/path/to/uh uses that executable instead; PYTHON picks the interpreter for the
venv.

Examples:
  ./reproduce.sh smoke
  ./reproduce.sh B3 --seeds "1993 2023"
  ./reproduce.sh all --jobs 3
  ./reproduce.sh all --executor slurm
  ./reproduce.sh all --yes
  ./reproduce.sh refresh
EOF
}

# The width a line may fill, as uh's (runs/terminal.py, columns): COLUMNS, else the terminal's, at least 100;
# 120 where neither says (a pipe, a log).
line_width() {
    local width=${COLUMNS:-}
    [[ -n "$width" || ! -t 2 ]] || width=$(stty size <&2 2>/dev/null) || true
    width=${width##* }
    [[ "$width" =~ ^[1-9][0-9]*$ ]] || width=120
    printf '%s' $((width < 100 ? 100 : width))
}
LINE_WIDTH=$(line_width)
readonly LINE_WIDTH

# "reproduce.sh: TEXT" on standard error, wrapped at spaces to LINE_WIDTH as uh wraps its lines (terminal.py,
# fit_line): continuation lines indented by 4, a word longer than a line (a path) never cut.
log() {
    local words word line="reproduce.sh:"
    read -r -d '' -a words <<<"$*" || true
    for word in ${words[@]+"${words[@]}"}; do
        if [[ $((${#line} + 1 + ${#word})) -gt $LINE_WIDTH && "$line" != reproduce.sh: ]]; then
            printf '%s\n' "$line" >&2
            line="    $word"
        else
            line+=" $word"
        fi
    done
    printf '%s\n' "$line" >&2
}

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
cancel=0
paper_runs_only=0
yes=0
jobs=""
executor=""
device=""
run_ids=""

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
        --paper-runs-only) paper_runs_only=1; shift ;;
        --cancel) cancel=1; shift ;;
        --yes) yes=1; shift ;;
        --jobs) need_value "$@"; jobs=$2; shift 2 ;;
        --jobs=*) jobs=${1#*=}; shift ;;
        --executor) need_value "$@"; executor=$2; shift 2 ;;
        --executor=*) executor=${1#*=}; shift ;;
        --device) need_value "$@"; device=$2; shift 2 ;;
        --device=*) device=${1#*=}; shift ;;
        --run-ids) need_value "$@"; run_ids=$2; shift 2 ;;
        --run-ids=*) run_ids=${1#*=}; shift ;;
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
[[ "$paper_runs_only" == 0 || "$target" == all ]] || usage_error "--paper-runs-only goes with the target all"
[[ "$yes" == 0 || "$target" == all ]] || usage_error "--yes goes with the target all"
[[ -z "$run_ids" || "$target" == check ]] || usage_error "--run-ids goes with the target check"
[[ "$cancel" == 0 || ("$target" == all && "${executor:-${UH_EXECUTOR:-}}" == slurm) ]] ||
    usage_error "--cancel goes with all --executor slurm"
# The procedure runs the registered seeds: `all` on seeds of one's own checks once (./reproduce.sh next goes on).
[[ "$target" != all || ${#seeds[@]} -eq 0 ]] || paper_runs_only=1
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
[[ -z "$run_ids" ]] || check_args+=(--run-ids "$run_ids")  # the target check only

report_args=()
[[ -z "$results_dir" ]] || report_args+=(--results-dir "$results_dir")
readonly CHECK_REPORT=${results_dir:-$REPO_DIR/results}/check_report.json  # what uh check writes

price_args=()
for seed in ${seeds[@]+"${seeds[@]}"}; do price_args+=(--seed "$seed"); done
[[ -z "$profile" ]] || price_args+=(--profile "$profile")
[[ -z "$results_dir" ]] || price_args+=(--results-dir "$results_dir")
[[ -z "$device" ]] || price_args+=(--device "$device")
[[ -z "$executor" ]] || price_args+=(--executor "$executor")

doctor_args=()
[[ -z "$profile" ]] || doctor_args+=(--profile "$profile")
[[ -z "$data_dir" ]] || doctor_args+=(--data-dir "$data_dir")
[[ -z "$results_dir" ]] || doctor_args+=(--results-dir "$results_dir")
[[ -z "$device" ]] || doctor_args+=(--device "$device")
[[ -z "$jobs" ]] || doctor_args+=(--jobs "$jobs")

# What to do after an interruption: uh run keeps finished runs and resumes an interrupted one.
resume_hint() {
    local how="run the same command again"
    [[ "$target" != next && ("$target" != all || "$paper_runs_only" == 1) ]] || how="./reproduce.sh next goes on"
    printf 'finished runs are kept and an interrupted run resumes from its last finished task: %s' "$how"
}

# SIGTERM and SIGINT reach the running child (uh, pytest) through this script: a scheduler, `timeout` or
# `kill PID` signal the script alone, and a child it did not stop would train on, orphaned. The child runs
# in the background so that a signal interrupts `wait`; `trap - INT` undoes the SIGINT that bash ignores in
# background commands.
child=""
in_child() {
    (trap - INT; exec "$@") &
    child=$!
    local status=0
    wait "$child" || status=$?
    child=""
    return "$status"
}

on_signal() {  # $1: TERM or INT, $2: its number
    if [[ -n "$child" ]]; then
        kill -s "$1" "$child" 2>/dev/null || true
        wait "$child" || true  # it writes what it finished before it exits
    fi
    log "stopped by SIG$1 (exit $((128 + $2))); $(resume_hint)"
    exit $((128 + $2))
}
trap 'on_signal TERM 15' TERM
trap 'on_signal INT 2' INT

run_uh() {
    log "+ uh $*"
    in_child "$UH" "$@"
}

# Exit at once when uh was stopped by SIGINT or SIGTERM sent to it alone (128 + signal). $2: what ran.
stop_if_interrupted() {
    if [[ $1 -eq 130 || $1 -eq 143 ]]; then
        log "$2 interrupted (exit $1); $(resume_hint)"
        exit "$1"
    fi
}

# `all`: its price, then a yes before the first run (asked on a terminal; --yes for scripts). uh price also
# refuses, once, a machine that cannot train the profile, where each of the twelve uh run would refuse it.
agree_to_price() {
    local answer=""
    run_uh price ${price_args[@]+"${price_args[@]}"} || exit $?
    [[ "$yes" == 0 ]] || return 0
    if [[ ! -t 0 ]]; then
        log "standard input is not a terminal, so no one can answer: pass --yes to start these runs"
        exit 2
    fi
    read -r -p "Start these runs? [y/N] " answer || true
    [[ "$answer" == [yY]* ]] || { log "nothing was run"; exit 1; }
}

# report after a check that exited $1: returns $1, or report's status where check passed and report failed.
report_after() {
    local rc=$1 status
    run_uh report ${report_args[@]+"${report_args[@]}"} || {
        status=$?
        log "uh report exited $status"
        [[ $rc -ne 0 ]] || rc=$status
    }
    return "$rc"
}

# check and report once, each run even if the other fails; returns the first failure's status.
check_and_report() {
    local rc=0
    run_uh check ${check_args[@]+"${check_args[@]}"} || { rc=$?; log "uh check exited $rc"; }
    [[ $rc -ne 3 && $rc -ne 4 ]] ||
        log "./reproduce.sh next runs what check_report.json's next_step names and checks again, to a decided verdict"
    report_after "$rc"
}

# Four lines from check_report.json, if the check that just exited $1 wrote it: next_step's run IDs, next_step's
# seeds (both empty when next_step is {}), the procedure's number of looks (0 without one), and the verdict, last
# as it is never empty ($(...) drops empty lines last).
read_check_report() {
    "$python" - "$CHECK_REPORT" "$1" <<'EOF'
import json, sys
try:
    with open(sys.argv[1]) as f:
        report = json.load(f)
except (OSError, ValueError):
    report = {}
if report.get("exit_code") != int(sys.argv[2]):  # an older check's report: this one stopped before writing
    report = {"verdict": {"line": f"not written (uh check exited {sys.argv[2]}; its message is above)"}}
step = report.get("next_step") or {}
print(*step.get("run_ids", []))
print(*step.get("seeds", []))
print(len((report.get("procedure") or {}).get("looks", [])))
verdict = report.get("verdict")
print((verdict.get("line") if isinstance(verdict, dict) else None) or "?")
EOF
}

# The procedure (`next`, and `all` after its runs): check; while check says INCOMPLETE (3) or UNDECIDED (4) and
# names a next_step, run its run IDs on its seeds and check again; then report. Exits with check's status
# (report's where check passed and report failed), after a line with the verdict. A step asked for again (those
# runs did not move the verdict), or more steps than the procedure's looks + 1, stop it in one line.
follow_procedure() {
    local rc status state verdict ids seeds seed step done_step ran=() looks step_args
    [[ "${executor:-${UH_EXECUTOR:-}}" != slurm ]] || run_args+=(--wait)  # check needs the results
    while true; do
        rc=0
        run_uh check ${check_args[@]+"${check_args[@]}"} || rc=$?
        state=$(read_check_report "$rc")
        { read -r -a ids; read -r -a seeds; read -r looks; read -r verdict; } <<<"$state"
        [[ ($rc -eq 3 || $rc -eq 4) && ${#ids[@]} -gt 0 ]] || break
        step="${ids[*]} on seeds ${seeds[*]}"
        for done_step in ${ran[@]+"${ran[@]}"}; do
            if [[ "$step" == "$done_step" ]]; then
                log "next_step asks again for $step, which ran before and did not move the verdict; stopping: see uh check's output above and uh status"
                exit 1
            fi
        done
        if [[ ${#ran[@]} -gt $looks ]]; then
            log "next_step asks for $step after ${#ran[@]} steps, the most its procedure can need (its $looks looks + 1); stopping: see uh check's output above and uh status"
            exit 1
        fi
        ran+=("$step")
        step_args=()
        for seed in ${seeds[@]+"${seeds[@]}"}; do step_args+=(--seed "$seed"); done
        log "check exited $rc; its next_step: $step"
        status=0
        run_uh run "${ids[@]}" ${step_args[@]+"${step_args[@]}"} ${run_args[@]+"${run_args[@]}"} || status=$?
        stop_if_interrupted "$status" "$step"
        if [[ $status -ne 0 ]]; then
            log "FAILED: $step (uh run exited $status); once the cause is fixed (uh status), ./reproduce.sh next goes on"
            exit 1
        fi
    done
    status=0
    report_after "$rc" || status=$?
    if [[ $status -ne $rc ]]; then  # the check passed, the report failed: the exit is the report's, not the verdict's
        log "verdict $verdict (uh check exit $rc); uh report failed (exit $status)"
    else
        log "verdict $verdict (exit $status)"
    fi
    exit "$status"
}

# run_each GROUP THEN ID...: the IDs in turn (a failed run does not stop the others, a signal does), then
# THEN: `procedure` (follow_procedure) or `check` (check and report once); on Slurm one array of the group
# instead, and exit.
run_each() {
    local group=$1 then=$2 id start status rc failed=()
    shift 2
    if [[ "${executor:-${UH_EXECUTOR:-}}" == slurm ]]; then  # one array of every run; returns after submitting
        if [[ "$then" == procedure ]]; then  # and the chain of jobs that follows the procedure behind it
            run_uh run "$group" ${run_args[@]+"${run_args[@]}"} --procedure || exit $?
            log "the chain goes on to a decided verdict and its report without this terminal; 'uh status' follows it"
        else
            run_uh run "$group" ${run_args[@]+"${run_args[@]}"}
            log "when 'uh status' shows every run done: ./reproduce.sh check; ./reproduce.sh report"
        fi
        exit 0
    fi
    for id in "$@"; do
        start=$SECONDS
        status=0
        run_uh run "$id" ${run_args[@]+"${run_args[@]}"} || status=$?
        stop_if_interrupted "$status" "$id"
        if [[ $status -eq 0 ]]; then
            log "$id done ($((SECONDS - start)) s)"
        else
            log "$id FAILED (exit $status after $((SECONDS - start)) s); going on with the others"
            failed+=("$id")
        fi
    done
    if [[ ${#failed[@]} -gt 0 ]]; then
        check_and_report || true
        log "FAILED run IDs: ${failed[*]} (re-run one with: ./reproduce.sh ID)"
        exit 1
    fi
    log "all $# run IDs done"
    [[ "$then" != procedure ]] || follow_procedure
    rc=0
    check_and_report || rc=$?
    exit "$rc"
}

# --- targets -----------------------------------------------------------------------------------------
case "$target" in
    all)
        [[ "$cancel" == 0 ]] || { run_uh run all ${run_args[@]+"${run_args[@]}"} --procedure --cancel; exit $?; }
        agree_to_price
        then=procedure
        [[ "$paper_runs_only" == 0 ]] || then=check
        run_each all "$then" "${RUN_IDS[@]}"
        ;;
    refresh) run_each refresh check "${REFRESH_IDS[@]}" ;;
    smoke)
        [[ "${executor:-${UH_EXECUTOR:-}}" != slurm ]] || run_args+=(--wait)  # check needs the results
        run_uh run all ${run_args[@]+"${run_args[@]}"}
        check_and_report
        log "smoke results in $results_dir"
        ;;
    doctor) run_uh doctor ${doctor_args[@]+"${doctor_args[@]}"} ;;
    check) run_uh check ${check_args[@]+"${check_args[@]}"} ;;
    next) follow_procedure ;;
    report) run_uh report ${report_args[@]+"${report_args[@]}"} ;;
    test)
        if [[ "${UH_IN_CONTAINER:-0}" == 1 ]]; then
            log "the test suite is not in the image; run ./reproduce.sh test on the host"
            exit 1
        fi
        log "+ $python -m pytest -q"
        in_child "$python" -m pytest -q
        ;;
    *) run_uh run "$target" ${run_args[@]+"${run_args[@]}"} ;;
esac
