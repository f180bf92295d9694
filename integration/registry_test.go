package integration

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// testRegistry is a minimal, read-only OCI distribution server on
// 127.0.0.1 (the pull half of the distribution spec: /v2/, manifests by
// tag or digest, blobs) serving the one image of an OCI image archive as
// repo:tag. Docker tests start it to pull through a NAT sandbox's
// 10.0.2.2.
type testRegistry struct {
	port      int
	repo, tag string
	manifest  string // digest
	mediaType string
	blobs     map[string][]byte // digest → content (manifest included)
	manifests atomic.Int64      // manifest requests served
	blobsGot  atomic.Int64      // blob GETs served
	requests  atomic.Int64      // every request
}

// startRegistry serves the image of the OCI archive at path, with a layer
// of files (path → content) on top when files is not empty, as repo:tag.
// The extra layer makes the image one no local store has: a pull must
// fetch its config and that layer.
func startRegistry(t *testing.T, path, repo, tag string, files map[string]string) *testRegistry {
	t.Helper()
	r := &testRegistry{repo: repo, tag: tag, blobs: map[string][]byte{}}
	if err := r.load(path); err != nil {
		t.Fatalf("test registry: %v", err)
	}
	if len(files) > 0 {
		if err := r.addLayer(files); err != nil {
			t.Fatalf("test registry: %v", err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.port = ln.Addr().(*net.TCPAddr).Port
	srv := &http.Server{Handler: r}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

// load reads the archive's blobs and its index's one manifest.
func (r *testRegistry) load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var index []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		name := strings.TrimPrefix(h.Name, "./")
		if h.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", path, name, err)
		}
		if d, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			r.blobs["sha256:"+d] = data
		} else if name == "index.json" {
			index = data
		}
	}
	var idx struct {
		Manifests []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil || len(idx.Manifests) != 1 {
		return fmt.Errorf("%s: index.json: want one manifest (%v)", path, err)
	}
	r.manifest, r.mediaType = idx.Manifests[0].Digest, idx.Manifests[0].MediaType
	if _, ok := r.blobs[r.manifest]; !ok {
		return fmt.Errorf("%s: manifest %s missing", path, r.manifest)
	}
	return nil
}

// put stores data as a blob and returns its digest.
func (r *testRegistry) put(data []byte) string {
	d := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	r.blobs[d] = data
	return d
}

// addLayer puts an uncompressed layer of files on top of the image: a new
// config (its diff_ids) and a new manifest.
func (r *testRegistry) addLayer(files map[string]string) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := io.WriteString(tw, body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	ld := r.put(layer.Bytes())
	var m map[string]any
	if err := json.Unmarshal(r.blobs[r.manifest], &m); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	cfgDesc, _ := m["config"].(map[string]any)
	var cfg map[string]any
	if err := json.Unmarshal(r.blobs[fmt.Sprint(cfgDesc["digest"])], &cfg); err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	rootfs, _ := cfg["rootfs"].(map[string]any)
	if rootfs == nil {
		return fmt.Errorf("image config has no rootfs")
	}
	rootfs["diff_ids"] = append(rootfs["diff_ids"].([]any), ld)
	cdata, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	cfgDesc["digest"], cfgDesc["size"] = r.put(cdata), len(cdata)
	m["layers"] = append(m["layers"].([]any), map[string]any{
		"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": layer.Len()})
	mdata, err := json.Marshal(m)
	if err != nil {
		return err
	}
	r.manifest = r.put(mdata)
	return nil
}

// ref is the image's reference as a guest reaches the registry at host.
func (r *testRegistry) ref(host string) string {
	return fmt.Sprintf("%s:%d/%s:%s", host, r.port, r.repo, r.tag)
}

// ServeHTTP implements http.Handler.
func (r *testRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		http.Error(w, "read-only registry", http.StatusMethodNotAllowed)
		return
	}
	p := req.URL.Path
	if p == "/v2/" || p == "/v2" {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
		return
	}
	rest, ok := strings.CutPrefix(p, "/v2/"+r.repo+"/")
	if !ok {
		http.Error(w, `{"errors":[{"code":"NAME_UNKNOWN"}]}`, http.StatusNotFound)
		return
	}
	kind, ref, _ := strings.Cut(rest, "/")
	var data []byte
	switch kind {
	case "manifests":
		if ref != r.tag && ref != r.manifest {
			http.Error(w, `{"errors":[{"code":"MANIFEST_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		r.manifests.Add(1)
		data = r.blobs[r.manifest]
		w.Header().Set("Content-Type", r.mediaType)
		w.Header().Set("Docker-Content-Digest", r.manifest)
	case "blobs":
		var found bool
		if data, found = r.blobs[ref]; !found {
			http.Error(w, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`, http.StatusNotFound)
			return
		}
		if req.Method == http.MethodGet {
			r.blobsGot.Add(1)
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", ref)
	default:
		http.NotFound(w, req)
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(data)))
	if req.Method == http.MethodGet {
		w.Write(data)
	}
}
