#!/usr/bin/env bash
# Builds the images critest v1.34 pulls, locally and offline, and pushes
# them to a registry on loopback under their original repository paths:
#   CRANE=crane hack/mkimage-critest.sh 127.0.0.1:PORT
# containerd then pulls e.g. registry.k8s.io/e2e-test-images/busybox:1.29-2
# from http://127.0.0.1:PORT/v2/e2e-test-images/busybox/... through a
# hosts.toml mirror (integration/critest). Every image is Debian's
# busybox-static (hack/mkimage-busybox.sh) with at most one layer on top,
# added by `crane mutate`:
#   registry.k8s.io/e2e-test-images/busybox:1.29-2   busybox, sh, and pgrep and ipcs as shell scripts
#   registry.k8s.io/pause:3.10.2                     + /pause, sentry/cmd/gvx-pause (the pod sandbox image)
#   registry.k8s.io/e2e-test-images/nginx:1.14-2     + a Go stand-in for nginx on :80 (integration/testdata/nginx)
#   gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64 + the same on :12003
#   registry.k8s.io/e2e-test-images/httpd:2.4.39-4   + busybox httpd on :80 (httpd-foreground)
#   registry.k8s.io/e2e-test-images/nonewprivs:1.3   + /usr/local/bin/nnp, set-user-ID root (integration/testdata/euid)
#   gcr.io/k8s-staging-cri-tools/test-image-user-{uid,username,uid-group,username-group}, -predefined-group
#   gcr.io/k8s-staging-cri-tools/test-image-{1,2,3,latest}, test-image-tags:{1,2,3} (one image), test-image-tag:{test,all}
# Not built: gcr.io/k8s-staging-cri-tools/test-image-digest@sha256:9700f9a2…,
# pinned by a digest no local build can reproduce (critest's "public image
# with digest" spec fails for every runtime here).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
reg=${1:?usage: CRANE=crane mkimage-critest.sh REGISTRY (host:port on loopback)}
case $reg in
127.* | localhost:* | \[::1\]:*) ;;
*) echo "mkimage-critest: $reg is not a loopback registry" >&2; exit 2 ;;
esac
crane=${CRANE:-crane}
go=${GO:-go}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
k8s=$reg/e2e-test-images
cri=$reg/k8s-staging-cri-tools
c() {
	local out
	out=$("$crane" --insecure "$@" 2>&1) || { echo "mkimage-critest: crane $*: $out" >&2; return 1; }
}

# layer NAME: packs $work/NAME/ (root's files) into $work/NAME.tar.
layer() {
	tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/$1" -cf "$work/$1.tar" .
}

# The base: busybox as built (an OCI layout of one image), plus the two
# commands critest runs that Debian's busybox-static lacks: pgrep
# (execSync with timeout) and ipcs -m (HostIpc), as shell scripts.
"$here/mkimage-busybox.sh" "$work/busybox.tar" registry.k8s.io/e2e-test-images/busybox:1.29-2 '["sh"]' >/dev/null
mkdir "$work/busybox"
tar -C "$work/busybox" -xf "$work/busybox.tar"
c push "$work/busybox" "$reg/gvx-critest/busybox-static:latest"
mkdir -p "$work/tools/bin"
cat >"$work/tools/bin/pgrep" <<'SH'
#!/bin/sh
# pgrep PATTERN: the pids of the processes whose name matches PATTERN.
rc=1
for d in /proc/[0-9]*; do
	read -r name <"$d/comm" 2>/dev/null || continue
	if echo "$name" | grep -qE -- "$1"; then echo "${d#/proc/}"; rc=0; fi
done
exit $rc
SH
cat >"$work/tools/bin/ipcs" <<'SH'
#!/bin/sh
# ipcs [-m]: the System V shared memory segments (/proc/sysvipc/shm).
echo "------ Shared Memory Segments --------"
echo "key        shmid      owner      perms      bytes      nattch"
tail -n +2 /proc/sysvipc/shm 2>/dev/null | while read -r key shmid perms size cpid lpid nattch uid rest; do
	printf '0x%08x %-10s %-10s %-10s %-10s %-10s\n' "$key" "$shmid" "$uid" "$perms" "$size" "$nattch"
done
SH
chmod 0755 "$work/tools/bin/pgrep" "$work/tools/bin/ipcs"
layer tools
c mutate "$reg/gvx-critest/busybox-static:latest" --append "$work/tools.tar" -t "$k8s/busybox:1.29-2"
base=$k8s/busybox:1.29-2
# image REF [crane mutate flags]: base plus what the flags add.
image() {
	local ref=$1
	shift
	c mutate "$base" "$@" -t "$ref"
}

(cd "$here/.." && CGO_ENABLED=0 "$go" build -o "$work/bin/nginx" ./integration/testdata/nginx &&
	CGO_ENABLED=0 "$go" build -o "$work/bin/nnp" ./integration/testdata/euid)
(cd "$here/../sentry" && CGO_ENABLED=0 "$go" build -o "$work/bin/pause" ./cmd/gvx-pause)

# The sandbox image: gvx-pause as /pause. Its process is named "pause", as
# the real one: critest's `pgrep sleep` looks into pods that share their
# pid namespace, where a busybox sleep would be found.
d=$work/pause
mkdir -p "$d"
install -m 0755 "$work/bin/pause" "$d/pause"
layer pause
image "$reg/pause:3.10.2" --append "$work/pause.tar" --cmd /pause

for v in nginx:80 hostnet:12003; do
	d=$work/${v%%:*}
	mkdir -p "$d/usr/sbin" "$d/usr/share/nginx/html" "$d/etc/nginx/conf.d" "$d/var/run"
	install -m 0755 "$work/bin/nginx" "$d/usr/sbin/nginx"
	printf '<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head><body><h1>Welcome to nginx!</h1></body></html>\n' >"$d/usr/share/nginx/html/index.html"
	printf 'server {\n    listen       %s;\n    server_name  localhost;\n}\n' "${v#*:}" >"$d/etc/nginx/conf.d/default.conf"
	layer "${v%%:*}"
done
image "$k8s/nginx:1.14-2" --append "$work/nginx.tar" --cmd 'nginx,-g,daemon off;'
image "$cri/hostnet-nginx-amd64:latest" --append "$work/hostnet.tar" --cmd 'nginx,-g,daemon off;'

d=$work/httpd
mkdir -p "$d/usr/local/apache2/htdocs" "$d/usr/local/bin"
echo '<html><body><h1>It works!</h1></body></html>' >"$d/usr/local/apache2/htdocs/index.html"
printf '#!/bin/sh\necho "httpd: busybox httpd serving /usr/local/apache2/htdocs on :80" >&2\nexec httpd -f -v -p 80 -h /usr/local/apache2/htdocs\n' >"$d/usr/local/bin/httpd-foreground"
chmod 0755 "$d/usr/local/bin/httpd-foreground"
layer httpd
image "$k8s/httpd:2.4.39-4" --append "$work/httpd.tar" --cmd httpd-foreground

d=$work/nnp
mkdir -p "$d/usr/local/bin"
install -m 4755 "$work/bin/nnp" "$d/usr/local/bin/nnp"
layer nnp
image "$k8s/nonewprivs:1.3" --append "$work/nnp.tar" --cmd /usr/local/bin/nnp

image "$cri/test-image-user-uid:latest" --user 1002
image "$cri/test-image-user-username:latest" --user www-data
image "$cri/test-image-user-uid-group:latest" --user 1003:1004
image "$cri/test-image-user-username-group:latest" --user www-data:1004

d=$work/group
mkdir -p "$d/etc" "$d/home/default-user"
printf 'root:x:0:0:root:/root:/bin/sh\nwww-data:x:33:33:www-data:/var/www:/bin/false\nnobody:x:65534:65534:nobody:/:/bin/false\ndefault-user:x:1000:1000::/home/default-user:/bin/sh\n' >"$d/etc/passwd"
printf 'root:x:0:\nwww-data:x:33:\nnogroup:x:65534:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n' >"$d/etc/group"
layer group
image "$cri/test-image-predefined-group:latest" --append "$work/group.tar" --user 1000

# Images that differ by one file named after them, as critest's own
# (images/image-test: ADD $TEST); test-image-tags' three tags are one image.
for t in test-image-1 test-image-2 test-image-3 test-image-latest same-image test all; do
	mkdir -p "$work/t-$t"
	: >"$work/t-$t/$t"
	layer "t-$t"
done
for t in test-image-1 test-image-2 test-image-3 test-image-latest; do
	image "$cri/$t:latest" --append "$work/t-$t.tar"
done
image "$cri/test-image-tags:1" --append "$work/t-same-image.tar"
c tag "$cri/test-image-tags:1" 2
c tag "$cri/test-image-tags:1" 3
image "$cri/test-image-tag:test" --append "$work/t-test.tar"
image "$cri/test-image-tag:all" --append "$work/t-all.tar"
echo "mkimage-critest: pushed critest's images to $reg"
