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
# Package downloads occasionally fail for a moment: try each step 3 times.
retry() {
	local log=$1 n
	shift
	for n in 1 2 3; do
		"$@" >"$log" 2>&1 && return 0
		echo "mkimage-dind: attempt $n failed: $(grep -E '^E:|rror' "$log" | tail -1)" >&2
		sleep $((n * 5))
	done
	tail -20 "$log" >&2
	return 1
}
echo "mkimage-dind: debootstrap bookworm (about a minute)"
bootstrap() { rm -rf "$root" && debootstrap --variant=minbase bookworm "$root" "$mirror"; }
retry "$work/debootstrap.log" bootstrap
# No service starts during package installation.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod +x "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
echo "mkimage-dind: installing docker.io, docker-compose, iptables"
retry "$work/apt.log" chroot "$root" sh -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
	docker.io docker-compose iptables busybox-static procps iproute2 ca-certificates kmod'
umount "$root/proc"
chroot "$root" sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/*.log /usr/share/doc /usr/share/man'
rm -f "$root/usr/sbin/policy-rc.d"
# gVisor implements the legacy iptables interface, not nftables: docker's
# embedded DNS (the rules redirecting 127.0.0.11:53) needs the legacy tools.
chroot "$root" sh -c 'update-alternatives --set iptables /usr/sbin/iptables-legacy && update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy' >/dev/null
install -m 0755 "$here/dind/gvx-dind" "$root/usr/local/bin/gvx-dind"
COMPRESS=none "$here/oci-archive.sh" "$root" "$out" "$ref" '["/usr/local/bin/gvx-dind"]'
