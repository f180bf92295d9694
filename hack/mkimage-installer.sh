#!/usr/bin/env bash
# Builds gvx's node installer image (what deploy/base's DaemonSet runs)
# from locally built binaries, with no registry and no base image:
#   hack/mkimage-installer.sh OUT.tar [REF] [BIN_DIR]
# REF defaults to gvx.test/gvx-installer:latest, BIN_DIR to _output/bin.
# The image holds Debian's busybox-static (sh and the tools install.sh
# uses, nsenter included), gvx's binaries in /gvx/bin and the script at
# /gvx/install.sh. Import it on nodes (ctr -n k8s.io images import) or
# push it to a registry (crane push, skopeo copy oci-archive:OUT.tar ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: mkimage-installer.sh OUT.tar [REF] [BIN_DIR]}
ref=${2:-gvx.test/gvx-installer:latest}
bin=${3:-$here/../_output/bin}
bb=${BUSYBOX:-/bin/busybox}
[ -x "$bb" ] || { echo "mkimage-installer: $bb missing: apt-get install busybox-static" >&2; exit 1; }
{ ldd "$bb" 2>&1 || true; } | grep -q "not a dynamic" || {
	echo "mkimage-installer: $bb is not static: apt-get install busybox-static" >&2; exit 1; }
for b in containerd-shim-gvx-v2 gvx-shim gvx-sentry gvx-runtime gvx-hook gvx-pause gvx-relay gvx-nat gvx; do
	[ -x "$bin/$b" ] || { echo "mkimage-installer: $bin/$b missing: run make build" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,proc,sys,dev,tmp,host,gvx/bin}
chmod 1777 "$root/tmp"
cp "$bb" "$root/bin/busybox"
for app in $("$bb" --list); do
	[ "$app" = busybox ] || ln -sf /bin/busybox "$root/bin/$app"
done
cp "$bin"/{containerd-shim-gvx-v2,gvx-shim,gvx-sentry,gvx-runtime,gvx-hook,gvx-pause,gvx-relay,gvx-nat,gvx} "$root/gvx/bin/"
install -m 0755 "$here/../deploy/installer/install.sh" "$root/gvx/install.sh"
"$here/oci-archive.sh" "$root" "$out" "$ref" '["/gvx/install.sh","install"]' '["PATH=/bin"]'
