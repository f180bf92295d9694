#!/usr/bin/env bash
# Builds gvx's dind image from Debian packages only: debootstrap bookworm
# (minbase) + docker.io, docker-compose, iptables, busybox-static, with
# hack/dind/gvx-dind as its entrypoint.  hack/mkimage-dind.sh OUT.tar [REF]
# Takes a couple of minutes; the Makefile caches the result by content hash.
set -euo pipefail
out=${1:?usage: mkimage-dind.sh OUT.tar [REF]}
ref=${2:-gvx.test/dind:latest}
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "mkimage-dind: debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.dind.XXXXXX")
cleanup() {
	for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT
root=$work/rootfs
echo "mkimage-dind: debootstrap bookworm (about a minute)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
	{ tail -20 "$work/debootstrap.log" >&2; exit 1; }
# No service starts during package installation.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
echo "mkimage-dind: installing docker.io, docker-compose, iptables"
chroot "$root" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	docker.io docker-compose iptables busybox-static procps iproute2 ca-certificates kmod' >"$work/apt.log" 2>&1 ||
	{ tail -20 "$work/apt.log" >&2; exit 1; }
umount "$root/proc"
chroot "$root" sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/*.log /usr/share/doc /usr/share/man'
rm -f "$root/usr/sbin/policy-rc.d"
# gVisor implements the legacy iptables interface, not nftables: docker's
# embedded DNS (the rules redirecting 127.0.0.11:53) needs the legacy tools.
chroot "$root" sh -c 'update-alternatives --set iptables /usr/sbin/iptables-legacy && update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy' >/dev/null
install -m 0755 "$here/dind/gvx-dind" "$root/usr/local/bin/gvx-dind"
COMPRESS=none "$here/oci-archive.sh" "$root" "$out" "$ref" '["/usr/local/bin/gvx-dind"]'
