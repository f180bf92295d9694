#!/usr/bin/env bash
# Builds a single-layer OCI image archive from Debian's busybox-static, with
# no registry: hack/mkimage-busybox.sh OUT.tar [REF]
# Import it with: ctr images import OUT.tar
set -euo pipefail
out=${1:?usage: mkimage-busybox.sh OUT.tar [REF]}
ref=${2:-gvx.test/busybox:latest}
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
blobs=$work/oci/blobs/sha256
mkdir -p "$blobs"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
gzip -n -1 -c "$work/layer.tar" >"$work/layer.tgz"
ldig=$(sha256sum "$work/layer.tgz" | cut -d' ' -f1)
lsize=$(stat -c %s "$work/layer.tgz")
mv "$work/layer.tgz" "$blobs/$ldig"
cat >"$work/config.json" <<JSON
{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["sh"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:$diffid"]},"history":[{"created_by":"gvx hack/mkimage-busybox.sh"}]}
JSON
cdig=$(sha256sum "$work/config.json" | cut -d' ' -f1)
csize=$(stat -c %s "$work/config.json")
mv "$work/config.json" "$blobs/$cdig"
cat >"$work/manifest.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:$cdig","size":$csize},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"sha256:$ldig","size":$lsize}]}
JSON
mdig=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
msize=$(stat -c %s "$work/manifest.json")
mv "$work/manifest.json" "$blobs/$mdig"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
cat >"$work/oci/index.json" <<JSON
{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:$mdig","size":$msize,"annotations":{"io.containerd.image.name":"$ref","org.opencontainers.image.ref.name":"${ref##*:}"}}]}
JSON
mkdir -p "$(dirname "$out")"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "mkimage-busybox: wrote $ref to $out"
