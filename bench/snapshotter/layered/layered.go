// Package layered makes multi-layer test images.
//
// It adds layers to an OCI image archive such as the one
// hack/mkimage-busybox.sh writes (an OCI layout in a tar, one manifest),
// without a registry or a builder.
package layered

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"
)

// Entry is one file system change in a layer.
type Entry struct {
	// Path inside the image, e.g. "etc/motd" (a leading / is ignored).
	Path string
	// Dir makes a directory (mode 0755 unless Mode is set).
	Dir bool
	// Whiteout deletes Path from the layers below (an OCI ".wh." file).
	Whiteout bool
	// Data is the content of a regular file (mode 0644 unless Mode is set).
	Data []byte
	// Mode overrides the permission bits.
	Mode int64
}

// Layer is the entries of one layer, applied in order.
type Layer []Entry

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// archive is an OCI layout held in memory: file name → content.
type archive map[string][]byte

// AddLayers reads the OCI archive src, adds layers on top of its image,
// and writes the result to dst as an image named ref.
func AddLayers(src, dst, ref string, layers ...Layer) error {
	a, err := readArchive(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	if err := a.addLayers(ref, layers); err != nil {
		return fmt.Errorf("add layers to %s: %w", src, err)
	}
	if err := a.write(dst); err != nil {
		return fmt.Errorf("write %s: %w", dst, err)
	}
	return nil
}

func readArchive(p string) (archive, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	a := archive{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return a, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		a[path.Clean(strings.TrimPrefix(h.Name, "./"))] = b
	}
}

// blob reads the JSON blob with the given digest into v.
func (a archive) blob(digest string, v any) error {
	b, ok := a["blobs/sha256/"+strings.TrimPrefix(digest, "sha256:")]
	if !ok {
		return fmt.Errorf("blob %s missing", digest)
	}
	return json.Unmarshal(b, v)
}

// put stores a blob and returns its descriptor fields.
func (a archive) put(b []byte) (digest string, size int64) {
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	a["blobs/sha256/"+h] = b
	return "sha256:" + h, int64(len(b))
}

func (a archive) putJSON(v any) (string, int64, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", 0, err
	}
	d, n := a.put(b)
	return d, n, nil
}

func (a archive) addLayers(ref string, layers []Layer) error {
	var index map[string]any
	if err := json.Unmarshal(a["index.json"], &index); err != nil {
		return fmt.Errorf("index.json: %w", err)
	}
	descs, _ := index["manifests"].([]any)
	if len(descs) != 1 {
		return fmt.Errorf("index.json has %d manifests, want 1", len(descs))
	}
	desc, _ := descs[0].(map[string]any)
	var manifest, config map[string]any
	if err := a.blob(fmt.Sprint(desc["digest"]), &manifest); err != nil {
		return err
	}
	cdesc, _ := manifest["config"].(map[string]any)
	if err := a.blob(fmt.Sprint(cdesc["digest"]), &config); err != nil {
		return err
	}
	rootfs, _ := config["rootfs"].(map[string]any)
	diffIDs, _ := rootfs["diff_ids"].([]any)
	history, _ := config["history"].([]any)
	mlayers, _ := manifest["layers"].([]any)
	for i, l := range layers {
		raw, err := l.tar()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i+1, err)
		}
		sum := sha256.Sum256(raw)
		diffIDs = append(diffIDs, "sha256:"+hex.EncodeToString(sum[:]))
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
		if _, err := zw.Write(raw); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		d, n := a.put(gz.Bytes())
		mlayers = append(mlayers, map[string]any{"mediaType": mediaLayer, "digest": d, "size": n})
		history = append(history, map[string]any{"created_by": fmt.Sprintf("gvx layered: layer %d of %d", i+1, len(layers))})
	}
	rootfs["diff_ids"] = diffIDs
	config["history"] = history
	cd, cn, err := a.putJSON(config)
	if err != nil {
		return err
	}
	manifest["config"] = map[string]any{"mediaType": mediaConfig, "digest": cd, "size": cn}
	manifest["layers"] = mlayers
	md, mn, err := a.putJSON(manifest)
	if err != nil {
		return err
	}
	tag := ref[strings.LastIndex(ref, ":")+1:]
	index["manifests"] = []any{map[string]any{
		"mediaType": mediaManifest, "digest": md, "size": mn,
		"annotations": map[string]any{"io.containerd.image.name": ref, "org.opencontainers.image.ref.name": tag},
	}}
	b, err := json.Marshal(index)
	if err != nil {
		return err
	}
	a["index.json"] = b
	if _, ok := a["manifest.json"]; ok { // docker-save layout, for docker load
		var paths []string
		for _, l := range mlayers {
			paths = append(paths, "blobs/sha256/"+strings.TrimPrefix(fmt.Sprint(l.(map[string]any)["digest"]), "sha256:"))
		}
		b, err := json.Marshal([]map[string]any{{
			"Config": "blobs/sha256/" + strings.TrimPrefix(cd, "sha256:"), "RepoTags": []string{ref}, "Layers": paths,
		}})
		if err != nil {
			return err
		}
		a["manifest.json"] = b
	}
	return nil
}

// tar renders the layer as an uncompressed tar.
func (l Layer) tar() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	for _, e := range l {
		p := strings.TrimPrefix(path.Clean("/"+e.Path), "/")
		h := &tar.Header{Name: p, ModTime: epoch, Format: tar.FormatPAX}
		switch {
		case e.Whiteout:
			h.Name = path.Join(path.Dir(p), ".wh."+path.Base(p))
			h.Typeflag, h.Mode = tar.TypeReg, 0o644
		case e.Dir:
			h.Name += "/"
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(e.Data))
		}
		if e.Mode != 0 {
			h.Mode = e.Mode
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !e.Dir && !e.Whiteout {
			if _, err := tw.Write(e.Data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// write stores the archive as a tar at p (atomically: via p.tmp).
func (a archive) write(p string) error {
	f, err := os.Create(p + ".tmp")
	if err != nil {
		return err
	}
	defer os.Remove(p + ".tmp")
	defer f.Close()
	tw := tar.NewWriter(f)
	names := make([]string, 0, len(a))
	for n := range a {
		names = append(names, n)
	}
	sort.Strings(names)
	dirs := map[string]bool{}
	for _, n := range names {
		for d := path.Dir(n); d != "." && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl)
	for _, d := range dl {
		if err := tw.WriteHeader(&tar.Header{Name: d + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
	}
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(a[n])), ModTime: time.Unix(0, 0)}); err != nil {
			return err
		}
		if _, err := tw.Write(a[n]); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(p+".tmp", p)
}
