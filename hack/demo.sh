#!/usr/bin/env bash
# make demo: a private containerd, the locally built busybox image, and one
# task in a gVisor sandbox through containerd-shim-gvx-v2. Prints the
# guest's kernel and the sandbox's host credentials, then cleans up.
set -euo pipefail
: "${CONTAINERD_BIN:?}" "${GVX_BIN:?}" "${IMAGES:?}"
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /run/gvx-demo.XXXXXX)
export PATH="$GVX_BIN:$CONTAINERD_BIN:$PATH"
ctr() { command ctr --address "$dir/c.sock" --namespace gvx-demo "$@" 2> >(grep -v 'cgroup v1 is deprecated' >&2); }
cleanup() {
	ctr task kill -s KILL demo >/dev/null 2>&1 || true
	ctr task rm -f demo >/dev/null 2>&1 || true
	ctr container rm demo >/dev/null 2>&1 || true
	"$here/containerd.sh" stop "$dir"
	# The namespace's parent cgroup, which runtimes leave (empty) behind.
	rmdir /sys/fs/cgroup/*/gvx-demo /sys/fs/cgroup/gvx-demo 2>/dev/null || true
}
trap cleanup EXIT

echo "==> starting a private containerd in $dir"
"$here/containerd.sh" start "$dir"
echo "==> importing the locally built image"
ctr images import "$IMAGES/busybox.tar" >/dev/null
echo "==> ctr run --runtime io.containerd.gvx.v2 gvx.test/busybox:latest demo"
ctr run -d --runtime io.containerd.gvx.v2 gvx.test/busybox:latest demo \
	sh -c 'echo "guest kernel: $(uname -s) $(uname -r)"; echo "guest user: $(id)"; sleep 30' >/dev/null
sleep 0.3
ctr task exec --exec-id hello demo sh -c 'echo "guest kernel: $(uname -s) $(uname -r)"; echo "guest sees itself as: $(id)"'
echo "==> the sandbox's processes as the host sees them"
shim=$(pgrep -f 'containerd-shim-gvx-v2 .*-id demo' | head -1)
printf '%-8s %-10s %-22s %-10s %-8s %s\n' PID ROLE HOST-UID NoNewPrivs Seccomp uid_map
for pid in $(pgrep -P "$shim"; for c in $(pgrep -P "$shim"); do pgrep -P "$c"; done); do
	[ -r "/proc/$pid/status" ] || continue
	role=$(tr "\0" " " <"/proc/$pid/cmdline" | awk "{print \$1}"); role=${role:-stub}
	uid=$(awk '/^Uid:/{print $2}' "/proc/$pid/status")
	nnp=$(awk '/^NoNewPrivs:/{print $2}' "/proc/$pid/status")
	sc=$(awk '/^Seccomp:/{print $2}' "/proc/$pid/status")
	printf '%-8s %-10s %-22s %-10s %-8s %s\n' "$pid" "$role" "$uid" "$nnp" "$sc" "$(xargs <"/proc/$pid/uid_map")"
done
echo "==> cleaning up"
