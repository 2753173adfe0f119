#!/usr/bin/env bash
# The timed tier on a busy machine (docs/testing.md): run `scripts/test.sh --timed` N times in a row
# (default 3) while two CPU-bound Python loops keep both cores busy; the loops are killed at exit,
# whatever happens. Prints one line per run and exits 0 only when every run passed.
#
#     bash scripts/load_check.sh [N] [pytest arguments ...]     e.g. bash scripts/load_check.sh 5 -k advisor
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-3}
shift || true
if ! [[ "$RUNS" =~ ^[1-9][0-9]*$ ]]; then
    echo "load_check.sh: N must be a positive number of runs, not '$RUNS'" >&2
    exit 2
fi
PY=${PYTHON:-python3}
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/profview-load-check.XXXXXX")

BURNERS=()
stop_burners() {
    for pid in "${BURNERS[@]}"; do
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    BURNERS=()
}
trap stop_burners EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for _ in 1 2; do                       # the load: one busy loop per core
    "$PY" -c "while True: pass" &
    BURNERS+=("$!")
done

failed=0
for run in $(seq 1 "$RUNS"); do
    log="$LOGS/run$run.log"
    start=$(date +%s)
    bash scripts/test.sh --timed "$@" >"$log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    result=$(grep -E '^(=+ )?[0-9]+ (passed|failed|error)' "$log" | sed 's/=//g; s/^ *//; s/ *$//' | paste -sd ';' - | sed 's/;/; /g')
    if [ "$rc" -eq 0 ]; then word=PASS; else word=FAIL; failed=$((failed + 1)); fi
    line="run $run/$RUNS: $word (exit $rc, ${secs} s, load average $load): ${result:-no pytest summary, see $log}"
    echo "$line"
    if [ "$rc" -ne 0 ]; then
        grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /'
    fi
done

echo "load check: $((RUNS - failed)) of $RUNS runs passed with two busy loops on the cores (logs in $LOGS)"
[ "$failed" -eq 0 ]
