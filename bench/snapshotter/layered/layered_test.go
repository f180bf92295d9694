package layered

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestAddLayers builds a one-layer archive, adds two layers and checks
// that index, manifest, config and docker manifest agree and that the
// layers hold the entries.
func TestAddLayers(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src.tar")
	base := archive{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)}
	ld, ln := base.put(gz(t, Layer{{Path: "bin", Dir: true}, {Path: "bin/sh", Data: []byte("sh")}}))
	cd, cn, _ := base.putJSON(map[string]any{"rootfs": map[string]any{"type": "layers", "diff_ids": []any{"sha256:x"}}, "history": []any{}})
	md, mn, _ := base.putJSON(map[string]any{"schemaVersion": 2, "config": map[string]any{"digest": cd, "size": cn},
		"layers": []any{map[string]any{"mediaType": mediaLayer, "digest": ld, "size": ln}}})
	base["index.json"], _ = json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{"digest": md, "size": mn}}})
	base["manifest.json"] = []byte(`[]`)
	if err := base.write(src); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst.tar")
	err := AddLayers(src, dst, "gvx.test/layered:v1",
		Layer{{Path: "/etc", Dir: true}, {Path: "/etc/motd", Data: []byte("two")}},
		Layer{{Path: "etc/motd", Whiteout: true}})
	if err != nil {
		t.Fatal(err)
	}
	a, err := readArchive(dst)
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Manifests []struct {
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(a["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index: %v %s", err, a["index.json"])
	}
	if n := index.Manifests[0].Annotations["io.containerd.image.name"]; n != "gvx.test/layered:v1" {
		t.Errorf("image name %q", n)
	}
	var m struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := a.blob(index.Manifests[0].Digest, &m); err != nil {
		t.Fatal(err)
	}
	var c struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []any
	}
	if err := a.blob(m.Config.Digest, &c); err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 3 || len(c.RootFS.DiffIDs) != 3 || len(c.History) != 2 {
		t.Fatalf("%d layers, %d diff_ids, %d history entries; want 3, 3, 2", len(m.Layers), len(c.RootFS.DiffIDs), len(c.History))
	}
	want := [][]string{{"etc/", "etc/motd"}, {"etc/.wh.motd"}}
	for i, l := range m.Layers[1:] {
		if got := names(t, a["blobs/sha256/"+l.Digest[len("sha256:"):]]); !equal(got, want[i]) {
			t.Errorf("layer %d: %v, want %v", i+2, got, want[i])
		}
	}
	var dm []struct{ Layers []string }
	if err := json.Unmarshal(a["manifest.json"], &dm); err != nil || len(dm) != 1 || len(dm[0].Layers) != 3 {
		t.Errorf("docker manifest: %v %s", err, a["manifest.json"])
	}
	if _, err := os.Stat(dst + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

func gz(t *testing.T, l Layer) []byte {
	raw, err := l.tar()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write(raw)
	w.Close()
	return b.Bytes()
}

func names(t *testing.T, blob []byte) []string {
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, h.Name)
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
