#!/usr/bin/env bash
# Runs a private containerd for demos and manual testing, fully contained in
# one directory:  hack/containerd.sh start DIR | stop DIR
# Binaries come from $CONTAINERD_BIN (the Makefile's cached build) and the
# gvx binaries from $GVX_BIN; both are put on PATH so containerd finds
# containerd-shim-gvx-v2 and gvx-sentry.
set -euo pipefail
cmd=${1:?usage: containerd.sh start|stop DIR}
dir=${2:?usage: containerd.sh start|stop DIR}
case $cmd in
start)
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	cat >"$dir/config.toml" <<TOML
version = 3
root = "$dir/root"
state = "$dir/state"
[grpc]
  address = "$dir/c.sock"
[ttrpc]
  address = "$dir/c.sock.ttrpc"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gvx]
  runtime_type = "io.containerd.gvx.v2"
TOML
	PATH="${GVX_BIN:+$GVX_BIN:}${CONTAINERD_BIN:+$CONTAINERD_BIN:}$PATH" \
		setsid containerd --config "$dir/config.toml" >"$dir/containerd.log" 2>&1 </dev/null &
	echo $! >"$dir/containerd.pid"
	for _ in $(seq 100); do
		[ -S "$dir/c.sock" ] && exit 0
		kill -0 "$(cat "$dir/containerd.pid")" 2>/dev/null || break
		sleep 0.1
	done
	echo "containerd.sh: containerd did not come up; see $dir/containerd.log:" >&2
	tail -20 "$dir/containerd.log" >&2
	exit 1
	;;
stop)
	[ -f "$dir/containerd.pid" ] || exit 0
	pid=$(cat "$dir/containerd.pid")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	# Unmount anything containerd left below the directory (snapshots, shm).
	{ grep -o " $dir/[^ ]*" /proc/self/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf "$dir"
	;;
*) echo "containerd.sh: unknown command $cmd" >&2; exit 2 ;;
esac
