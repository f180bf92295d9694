package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	sdk "github.com/gvxrun/gvx"
)

// TestSDKPrefetch: Prefetch imports an image archive and unpacks it for
// the snapshotter ahead of New, in a namespace that has never seen it; a
// second Prefetch finds it ready; a missing image is named in the error.
func TestSDKPrefetch(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	const ns = "gvxprefetch"
	dir, err := os.MkdirTemp("/run", "gvxsdk-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx := context.Background()
	c, err := sdk.Connect(ctx, sdk.Options{Containerd: e.Socket(), Namespace: ns, BinDir: e.gvxBin, StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	nctx := namespaces.WithNamespace(ctx, ns)
	t.Cleanup(func() {
		is := c.Containerd().ImageService()
		imgs, _ := is.List(nctx)
		for _, img := range imgs {
			if err := is.Delete(nctx, img.Name, images.SynchronousDelete()); err != nil {
				t.Errorf("delete image %s: %v", img.Name, err)
			}
		}
		if err := c.Containerd().NamespaceService().Delete(ctx, ns); err != nil {
			t.Errorf("delete namespace %s: %v", ns, err)
		}
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	if imgs, _ := c.Containerd().ListImages(nctx); len(imgs) != 0 {
		t.Fatalf("namespace %s already has images: %v", ns, imgs)
	}
	t0 := time.Now()
	if err := c.Prefetch(ctx, busyboxArchive()); err != nil {
		t.Fatalf("Prefetch: %v", err)
	}
	first := time.Since(t0)
	imgs, err := c.Containerd().ListImages(nctx)
	if err != nil || len(imgs) != 1 {
		t.Fatalf("images after Prefetch: %v, %v; want the archive's one", imgs, err)
	}
	sn := sdk.DefaultSnapshotter
	if ok, err := imgs[0].IsUnpacked(nctx, sn); err != nil || !ok {
		t.Errorf("%s unpacked for %s after Prefetch: %v, %v", imgs[0].Name(), sn, ok, err)
	}
	t0 = time.Now()
	if err := c.Prefetch(ctx, busyboxArchive()); err != nil {
		t.Fatalf("second Prefetch: %v", err)
	}
	t.Logf("Prefetch: %v the first time, %v when ready", first, time.Since(t0))
	missing := filepath.Join(t.TempDir(), "none.tar")
	err = c.Prefetch(ctx, "gvx.test/no-such-image:1", missing)
	if err == nil || !strings.Contains(err.Error(), "gvx.test/no-such-image:1") || !strings.Contains(err.Error(), missing) {
		t.Errorf("Prefetch of missing images: %v; want an error naming both", err)
	}
	if errors.Is(err, sdk.ErrClosed) {
		t.Errorf("Prefetch of missing images: %v", err)
	}
}
