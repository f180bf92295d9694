#!/usr/bin/env bash
# make fuzz: fuzz every target with one worker until it has had FUZZCPU
# (default 10m) of CPU time — in rounds of FUZZROUND (default 2m, wall
# time; each round goes on from the corpus the earlier ones grew in
# Go's fuzz cache), so that a busy machine lengthens the run instead of
# shortening the fuzzing — and print a table of targets × CPU time ×
# crashes. FUZZTIME=<duration> instead runs each target once for that
# wall time (the figure is then whatever CPU it got). A crash leaves its
# input in the package's testdata/fuzz/<target>/ (commit it with the fix).
# FUZZ=regexp limits the targets (matched against "dir target").
set -uo pipefail
FUZZTIME=${FUZZTIME:-}
FUZZCPU=${FUZZCPU:-10m}
FUZZROUND=${FUZZROUND:-2m}
# seconds of a Go-style duration (Ns, Nm, Nh).
seconds() {
	case $1 in
	*h) echo $((${1%h} * 3600)) ;;
	*m) echo $((${1%m} * 60)) ;;
	*s) echo "${1%s}" ;;
	*) echo "$1" ;;
	esac
}
cpu_goal=$(seconds "$FUZZCPU")
tck=$(getconf CLK_TCK)
cd "$(dirname "$0")/.."
# module dir | package | target
targets=(
	". ./oci FuzzPrepare"
	". ./config FuzzParse"
	". ./volume FuzzParseSuperblock"
	". ./volume FuzzCheckStructure"
	". ./pool FuzzServeConn"
	". ./pool/client FuzzQuery"
	"sentry ./monitor FuzzAnswerStart"
	"sentry ./monitor FuzzReceive"
	"sentry ./monitor FuzzRead"
	"sentry ./monitor FuzzParseSignal"
	"api . FuzzDecodeVolumes"
	". ./snapshotter FuzzMaxSize"
	". ./serve FuzzHandler"
	". ./serve/connect FuzzUnaryAndStream"
	". ./serve/envd FuzzEnvdRequest"
	". ./serve/envd FuzzParseEntries"
	". ./serve/envd FuzzCheckSignature"
)
# round_ok: a round's exit status rc is a pass — 0, or Go's fuzzing
# coordinator (before go1.27) reporting its own -fuzztime deadline as a
# failure when a worker is mid-input at the end (go.dev/issue/75804): no
# input failed and none was written.
round_ok() {
	local rc=$1 log=$2 corpus=$3 files_before=$4
	[[ $rc -eq 0 ]] && return 0
	[[ $(ls "$corpus" 2>/dev/null | wc -l) -eq $files_before ]] &&
		grep -q '^    context deadline exceeded$' "$log" && ! grep -q -e '^panic' -e 'Failing input written' "$log"
}
results=()
failed=0
for t in "${targets[@]}"; do
	read -r mod pkg name <<<"$t"
	[[ -n "${FUZZ:-}" && ! "$mod $pkg $name" =~ $FUZZ ]] && continue
	# CPU time of the go test process tree (coordinator and worker).
	corpus="$mod/${pkg#./}/testdata/fuzz/$name"
	files_before=$(ls "$corpus" 2>/dev/null | wc -l)
	before=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
	start=$(date +%s)
	log=$(mktemp)
	rounds=0
	while :; do
		rounds=$((rounds + 1))
		( cd "$mod" && go test -run '^$' -fuzz "^${name}\$" -fuzztime "${FUZZTIME:-$FUZZROUND}" -parallel 1 "$pkg" ) >"$log" 2>&1
		rc=$?
		ticks=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
		cpu=$(( (ticks - before) / tck ))
		# One round only with FUZZTIME; otherwise until the CPU goal, or a
		# failure (reported below).
		if [[ -n $FUZZTIME || $cpu -ge $cpu_goal ]] || ! round_ok "$rc" "$log" "$corpus" "$files_before"; then
			break
		fi
	done
	crashes=0
	note=""
	if [[ $rc -ne 0 ]] && round_ok "$rc" "$log" "$corpus" "$files_before"; then
		# Go's fuzzing coordinator (before go1.27) can report its own
		# -fuzztime deadline as a failure when a worker is mid-input at
		# the end (go.dev/issue/75804): no input failed, none was written.
		rc=0
		note=" (the coordinator's end-of-time race, go.dev/issue/75804: no failing input)"
	fi
	if [[ $rc -ne 0 ]]; then
		crashes=1
		failed=1
		echo "== $name failed:"; grep -v '^fuzz: elapsed' "$log" | tail -20
	fi
	p=${pkg#./}
	p=${p#.}
	label=$p
	[[ $mod != . ]] && label="$mod${p:+/$p}"
	results+=("$(printf '%-28s %-20s %6.1f CPU-min %4ds wall %2d round(s) %d crash(es)' "$label" "$name" "$(echo "$cpu/60" | bc -l)" $(( $(date +%s) - start )) $rounds $crashes)$note")
	echo "${results[-1]}" # as it completes, too: a run stopped early keeps its figures
	rm -f "$log"
done
printf '%s\n' "${results[@]}"
exit $failed
