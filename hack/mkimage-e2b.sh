#!/usr/bin/env bash
# Builds an E2B-style template image from Debian packages only: debootstrap
# bookworm (minbase: bash, coreutils, findutils) plus a user `user` (uid
# 1000, home /home/user), which the e2b SDKs assume (they run every command
# as `/bin/bash -l -c`). No registry involved.
#   hack/mkimage-e2b.sh OUT.tar [REF [PACKAGES [OVERLAY-DIR]]]
# PACKAGES (space-separated) are installed with apt; OVERLAY-DIR is copied
# to /home/user, owned by user (the swebench example's repository).
# The Makefile caches the result by the hash of what goes into it.
set -euo pipefail
out=${1:?usage: mkimage-e2b.sh OUT.tar [REF [PACKAGES [OVERLAY-DIR]]]}
ref=${2:-gvx.test/e2b-base:latest}
pkgs=${3:-}
overlay=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || { echo "mkimage-e2b: debootstrap missing: apt-get install debootstrap" >&2; exit 1; }
[ -z "$overlay" ] || [ -d "$overlay" ] || { echo "mkimage-e2b: overlay $overlay is not a directory" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.e2b.XXXXXX")
cleanup() {
	umount -l "$work/rootfs/proc" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
root=$work/rootfs
retry() {
	local log=$1 n
	shift
	for n in 1 2 3; do
		"$@" >"$log" 2>&1 && return 0
		echo "mkimage-e2b: attempt $n failed: $(grep -E '^E:|rror' "$log" | tail -1)" >&2
		sleep $((n * 5))
	done
	tail -20 "$log" >&2
	return 1
}
echo "mkimage-e2b: debootstrap bookworm minbase for $ref (about a minute)"
bootstrap() { rm -rf "$root" && debootstrap --variant=minbase bookworm "$root" "$mirror"; }
retry "$work/debootstrap.log" bootstrap
if [ -n "$pkgs" ]; then
	echo "mkimage-e2b: installing $pkgs"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod +x "$root/usr/sbin/policy-rc.d"
	mount -t proc proc "$root/proc"
	retry "$work/apt.log" chroot "$root" sh -c "apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $pkgs"
	umount "$root/proc"
	rm -f "$root/usr/sbin/policy-rc.d"
fi
chroot "$root" sh -c 'apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/*.log /usr/share/doc /usr/share/man /usr/share/locale/*'
chroot "$root" useradd --uid 1000 --user-group --create-home --home-dir /home/user --shell /bin/bash user
if [ -n "$overlay" ]; then
	cp -a "$overlay/." "$root/home/user/"
	chown -R 1000:1000 "$root/home/user"
fi
echo e2b >"$root/etc/hostname"
KEEP_OWNERS=1 "$here/oci-archive.sh" "$root" "$out" "$ref" '["sleep","infinity"]' \
	'["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","HOME=/root"]'
