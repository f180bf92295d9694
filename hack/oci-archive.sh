#!/usr/bin/env bash
# Packs a root filesystem directory into a single-layer image archive that
# both `ctr images import` (OCI layout: index.json) and `docker load`
# (docker-save layout: manifest.json) accept. No registry involved.
#   hack/oci-archive.sh ROOTFS OUT.tar REF [CMD-JSON] [ENV-JSON]
# (KEEP_OWNERS=1: keep the files' owners instead of making them root's)
set -euo pipefail
root=${1:?usage: oci-archive.sh ROOTFS OUT.tar REF [CMD-JSON] [ENV-JSON]}
out=${2:?}
ref=${3:?}
cmd=${4:-'["sh"]'}
env=${5:-'["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]'}
compress=${COMPRESS:-gzip}
mkdir -p "$(dirname "$out")"
work=$(mktemp -d "$(dirname "$out")/.oci-archive.XXXXXX")
trap 'rm -rf "$work"' EXIT
blobs=$work/oci/blobs/sha256
mkdir -p "$blobs"
# Device nodes come from the runtime, never from the image. Files are
# root's unless KEEP_OWNERS=1 keeps the rootfs's owners (a user's home).
owners=(--owner=0 --group=0)
[ "${KEEP_OWNERS:-}" = 1 ] && owners=()
tar --sort=name --mtime=@0 "${owners[@]}" --numeric-owner --exclude='./dev/*' \
	-C "$root" -cf "$work/layer.tar" .
diffid=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
if [ "$compress" = gzip ]; then
	gzip -n -1 -c "$work/layer.tar" >"$work/layer.blob"
	rm "$work/layer.tar"
	ltype=application/vnd.oci.image.layer.v1.tar+gzip
else
	mv "$work/layer.tar" "$work/layer.blob"
	ltype=application/vnd.oci.image.layer.v1.tar
fi
ldig=$(sha256sum "$work/layer.blob" | cut -d' ' -f1)
lsize=$(stat -c %s "$work/layer.blob")
mv "$work/layer.blob" "$blobs/$ldig"
printf '{"architecture":"amd64","os":"linux","config":{"Env":%s,"Cmd":%s,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"gvx hack/oci-archive.sh"}]}' \
	"$env" "$cmd" "$diffid" >"$work/config.json"
cdig=$(sha256sum "$work/config.json" | cut -d' ' -f1)
csize=$(stat -c %s "$work/config.json")
mv "$work/config.json" "$blobs/$cdig"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"%s","digest":"sha256:%s","size":%s}]}' \
	"$cdig" "$csize" "$ltype" "$ldig" "$lsize" >"$work/manifest.json"
mdig=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
msize=$(stat -c %s "$work/manifest.json")
mv "$work/manifest.json" "$blobs/$mdig"
echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci/oci-layout"
printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
	"$mdig" "$msize" "$ref" "${ref##*:}" >"$work/oci/index.json"
# docker-save layout, for `docker load` inside a sandbox.
printf '[{"Config":"blobs/sha256/%s","RepoTags":["%s"],"Layers":["blobs/sha256/%s"]}]' "$cdig" "$ref" "$ldig" >"$work/oci/manifest.json"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/oci" -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "oci-archive: wrote $ref to $out ($(du -h "$out" | cut -f1))"
