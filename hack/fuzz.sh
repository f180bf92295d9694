#!/usr/bin/env bash
# make fuzz: fuzz every target with one worker until it has had FUZZCPU
# (default 10m) of CPU time — in rounds of FUZZROUND (default 2m, wall
# time; each round goes on from the corpus the earlier ones grew in
# Go's fuzz cache), so that a busy machine lengthens the run instead of
# shortening the fuzzing — and print a table of targets × CPU time ×
# crashes. FUZZTIME=<duration> instead runs each target once for that
# wall time (the figure is then whatever CPU it got). A crash leaves its
# input in the package's testdata/fuzz/<target>/ (commit it with the fix).
# FUZZ=regexp limits the targets (matched against "dir target");
# FUZZJOBS=n fuzzes n targets at a time (default 1).
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
# fuzz_one fuzzes one target until its CPU goal (or one FUZZTIME round)
# and prints its result line, also into the file res; it fails if the
# target found a crash. It runs in a subshell of its own: the CPU counted
# is its children's.
fuzz_one() {
	local mod=$1 pkg=$2 name=$3 res=$4
	# CPU time of the go test process tree (coordinator and worker).
	local corpus="$mod/${pkg#./}/testdata/fuzz/$name"
	local files_before before start log rounds=0 rc ticks cpu self=$BASHPID
	files_before=$(ls "$corpus" 2>/dev/null | wc -l)
	before=$(awk '{print $14+$15+$16+$17}' /proc/$self/stat)
	start=$(date +%s)
	log=$(mktemp)
	while :; do
		rounds=$((rounds + 1))
		( cd "$mod" && go test -run '^$' -fuzz "^${name}\$" -fuzztime "${FUZZTIME:-$FUZZROUND}" -parallel 1 "$pkg" ) >"$log" 2>&1
		rc=$?
		ticks=$(awk '{print $14+$15+$16+$17}' /proc/$self/stat)
		cpu=$(( (ticks - before) / tck ))
		# One round only with FUZZTIME; otherwise until the CPU goal, or a
		# failure (reported below).
		if [[ -n $FUZZTIME || $cpu -ge $cpu_goal ]] || ! round_ok "$rc" "$log" "$corpus" "$files_before"; then
			break
		fi
	done
	local crashes=0 note=""
	if [[ $rc -ne 0 ]] && round_ok "$rc" "$log" "$corpus" "$files_before"; then
		# Go's fuzzing coordinator (before go1.27) can report its own
		# -fuzztime deadline as a failure when a worker is mid-input at
		# the end (go.dev/issue/75804): no input failed, none was written.
		rc=0
		note=" (the coordinator's end-of-time race, go.dev/issue/75804: no failing input)"
	fi
	if [[ $rc -ne 0 ]]; then
		crashes=1
		echo "== $name failed:"; grep -v '^fuzz: elapsed' "$log" | tail -20
	fi
	local p=${pkg#./}
	p=${p#.}
	local label=$p
	[[ $mod != . ]] && label="$mod${p:+/$p}"
	printf '%-28s %-20s %6.1f CPU-min %4ds wall %2d round(s) %d crash(es)%s\n' "$label" "$name" "$(echo "$cpu/60" | bc -l)" $(( $(date +%s) - start )) $rounds $crashes "$note" | tee "$res"
	rm -f "$log"
	[[ $crashes -eq 0 ]]
}

# FUZZJOBS targets at a time (default 1: each has one worker, so 2 on a
# 2-CPU machine halves the wall time); each result line is printed as its
# target completes (a run stopped early keeps its figures), then all of
# them in the targets' order.
jobs=${FUZZJOBS:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
failed=0
i=0
for t in "${targets[@]}"; do
	read -r mod pkg name <<<"$t"
	[[ -n "${FUZZ:-}" && ! "$mod $pkg $name" =~ $FUZZ ]] && continue
	while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do
		wait -n || failed=1
	done
	i=$((i + 1))
	fuzz_one "$mod" "$pkg" "$name" "$out/$(printf %03d $i)" &
done
while [[ $(jobs -rp | wc -l) -gt 0 ]]; do
	wait -n || failed=1
done
echo "== every target, in order:"
cat "$out"/* 2>/dev/null
exit $failed
