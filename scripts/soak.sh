#!/usr/bin/env bash
# soak.sh N TIMEOUT RUN LIMIT: run the e2e package (the tests `make test` runs there) N times beside
# two CPU-bound busy loops, to find the flakes a loaded CI box would find. The test binary is compiled
# once; each run's output goes to bin/soak/run-K.log. After each failed run the failing tests are
# printed with their failure lines (testify's Error Trace … Messages blocks, panics, timeouts); at the
# end a summary: runs, failed runs, how often each test failed. TIMEOUT bounds each run (go test's
# -timeout); a run slower than LIMIT (make test's TEST_TIMEOUT) is reported as one that would have
# timed out in make test. RUN, when not empty, is passed as -test.run (to soak a subset). Exit
# status 1 if any run failed.
set -uo pipefail

n=${1:-5}
timeout=${2:-12m}
run=${3:-}
limit=${4:-}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
out=$root/bin/soak
mkdir -p "$out"
rm -f "$out"/run-*.log

echo "== soak: compiling the e2e test binary"
go test -c -o "$out/e2e.test" ./test/e2e/ || exit 2

# Two busy loops, started here and always stopped, whatever ends the script.
busy=()
stop_busy() {
	for pid in "${busy[@]}"; do kill "$pid" 2>/dev/null; done
	for pid in "${busy[@]}"; do wait "$pid" 2>/dev/null; done
	busy=()
}
trap stop_busy EXIT
trap 'stop_busy; exit 130' INT TERM
for _ in 1 2; do
	(while :; do :; done) &
	busy+=("$!")
done
echo "== soak: $n runs of ./test/e2e/ (timeout $timeout${run:+, -run '$run'}) beside 2 busy loops (pids ${busy[*]})"

# failures prints, from a non-verbose go test log, each failed test's name
# and the lines that say why it failed.
failures() {
	awk '
		/^--- FAIL: / || /^    --- FAIL: / { print; next }
		inblock && !/^ +\t/ { inblock = 0 }
		/Error Trace:/ { inblock = 1 }
		inblock { print; next }
		/^panic: / || /test timed out after/ || /^FAIL\t/ { print }
	' "$1"
}

# seconds converts a Go duration of one unit (90s, 12m, 1h) to seconds.
seconds() {
	case $1 in
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo 0 ;;
	esac
}
limit_s=$(seconds "${limit:-0s}")

failed=0
slow=0
declare -A count
for k in $(seq 1 "$n"); do
	log=$out/run-$k.log
	start=$(date +%s)
	(cd "$root/test/e2e" && "$out/e2e.test" -test.count=1 -test.parallel="${SOAK_PARALLEL:-4}" -test.timeout="$timeout" ${run:+-test.run="$run"}) >"$log" 2>&1
	rc=$?
	took=$(($(date +%s) - start))
	if [ "$limit_s" -gt 0 ] && [ "$took" -gt "$limit_s" ]; then
		slow=$((slow + 1))
		echo "-- run $k/$n took ${took}s: longer than the make test timeout $limit"
	fi
	if [ "$rc" -eq 0 ]; then
		echo "-- run $k/$n: ok (${took}s)"
		continue
	fi
	failed=$((failed + 1))
	echo "-- run $k/$n: FAIL (exit $rc, ${took}s, log $log)"
	failures "$log" | sed 's/^/   /'
	for t in $(grep -oE '^--- FAIL: [^ ]+' "$log" | awk '{print $3}'); do
		count[$t]=$((${count[$t]:-0} + 1))
	done
	if grep -q 'test timed out after' "$log"; then
		count["(timeout)"]=$((${count["(timeout)"]:-0} + 1))
	fi
done

echo
echo "== soak summary: $n runs, $failed failed${limit:+, $slow longer than the make test timeout $limit}"
for t in "${!count[@]}"; do echo "   ${count[$t]}x $t"; done | sort -rn
[ "$failed" -eq 0 ]
