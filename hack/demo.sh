#!/usr/bin/env bash
# make demo: gvx's main job, through its Go SDK (examples/episode): an RL
# episode with Docker inside an unprivileged gVisor sandbox — a clone of a
# golden /var/lib/docker volume (built once and cached), dockerd inside, an
# inner `docker run`, a file written and read back, the timings, nothing
# left behind; a tree-search step (checkpoint, rollback, fork) on a plain
# sandbox — then a sandbox from the shell with gvx run.
# The embedded containerd (gvx's own, `gvx containerd`) starts and stops
# with the demo; its images stay in $CACHE/demo for the next run.
set -euo pipefail
: "${GVX_BIN:?}" "${IMAGES:?}"
cache=${CACHE:-$HOME/.cache/gvx}/demo
state=/run/gvx-demo
"$GVX_BIN/episode" --bin-dir "$GVX_BIN" --image "$IMAGES/dind.tar" --preload "$IMAGES/busybox.tar" \
	--cache "$cache" --state-dir "$state"
echo "==> the shell's way: gvx run --rm IMAGE COMMAND"
cmd=(gvx run --rm --state-dir "$state" --data-dir "$cache/containerd" --namespace gvx-demo "$IMAGES/busybox.tar"
	sh -c 'echo "guest kernel: $(uname -sr); guest user: $(id -un) (host uid 100000)"')
echo "  ${cmd[*]}"
t0=$(date +%s%N)
PATH="$GVX_BIN:$PATH" "${cmd[@]}" 2> >(grep -v '^gvx: ' >&2)
echo "  ($(( ($(date +%s%N) - t0) / 1000000 )) ms, embedded containerd started and stopped included)"
