#!/usr/bin/env bash
# Installs the Debian packages gvx's build, tests and demo use, if missing.
set -euo pipefail
pkgs=(busybox-static e2fsprogs xfsprogs btrfs-progs iptables iproute2 containernetworking-plugins debootstrap file runc)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "deps: missing Debian packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
	exit 1
fi
echo "deps: installing ${missing[*]}"
apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
