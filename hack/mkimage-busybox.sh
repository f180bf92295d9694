#!/usr/bin/env bash
# Builds a single-layer image archive from Debian's busybox-static, with no
# registry: hack/mkimage-busybox.sh OUT.tar [REF [CMD-JSON]]
# Import it with `ctr images import OUT.tar` or `docker load -i OUT.tar`.
set -euo pipefail
out=${1:?usage: mkimage-busybox.sh OUT.tar [REF]}
ref=${2:-gvx.test/busybox:latest}
cmd=${3:-'["sh"]'}
bb=${BUSYBOX:-/bin/busybox}
[ -x "$bb" ] || { echo "mkimage-busybox: $bb missing: apt-get install busybox-static" >&2; exit 1; }
file "$bb" 2>/dev/null | grep -q "statically linked" || ldd "$bb" 2>&1 | grep -q "not a dynamic" || {
	echo "mkimage-busybox: $bb is not static: apt-get install busybox-static" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,root,var/tmp,usr/bin,usr/sbin}
chmod 1777 "$root/tmp" "$root/var/tmp"
cp "$bb" "$root/bin/busybox"
for app in $("$bb" --list); do
	[ "$app" = busybox ] || ln -sf /bin/busybox "$root/bin/$app"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'root:*:19000:0:99999:7:::\n' >"$root/etc/shadow"
chmod 600 "$root/etc/shadow"
echo gvx >"$root/etc/hostname"
"$(dirname "$0")/oci-archive.sh" "$root" "$out" "$ref" "$cmd"
