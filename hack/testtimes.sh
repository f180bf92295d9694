#!/usr/bin/env bash
# testtimes.sh LOG [N]: the N (default 12) slowest top-level tests of a
# `go test -v` log, their sum and the total, in a few lines for the end of
# a CI log (which may show only its tail); and, when the run timed out,
# what was running then. It never fails: it only reports.
log=${1:?usage: testtimes.sh LOG [N]}
n=${2:-12}
[ -r "$log" ] || { echo "testtimes: no log $log"; exit 0; }
awk -v n="$n" '
/^--- (PASS|FAIL|SKIP): Test[^\/ ]* \(/ {
	d = $4; gsub(/[()s]/, "", d)
	name[++k] = $3 ($2 == "FAIL:" ? "(FAIL)" : ""); secs[k] = d + 0; total += d
}
/^running tests:/ { running = 1; next }
running && /^\t/ { sub(/^\t/, ""); busy = busy (busy ? ", " : "") $0; next }
running { running = 0 }
END {
	if (k == 0 && busy == "") { print "testtimes: no finished tests in the log"; exit }
	# selection sort of the n largest: the lists are short.
	line = ""; top = 0
	for (i = 1; i <= n && i <= k; i++) {
		m = 0
		for (j = 1; j <= k; j++) if (!(j in used) && (m == 0 || secs[j] > secs[m])) m = j
		used[m] = 1; top += secs[m]
		line = line (line ? ", " : "") sprintf("%s %.0fs", name[m], secs[m])
	}
	printf "slowest tests: %s\n", line
	printf "tests finished: %d in %.0f s (the %d slowest: %.0f s)\n", k, total, (n < k ? n : k), top
	if (busy != "") printf "still running at the timeout: %s\n", busy
}' "$log"
