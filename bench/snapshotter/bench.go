package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"github.com/gvxrun/gvx/bench/snapshotter/layered"
	"github.com/gvxrun/gvx/volume"
)

// benchFS measures every snapshotter on a new filesystem of type fstype.
func benchFS(ctx context.Context, fstype string, o options) error {
	n, sizeFlag := o.n, o.size
	if fstype == "ext4" {
		n, sizeFlag = o.nExt4, o.sizeExt4
	}
	size, err := volume.ParseSize(sizeFlag)
	if err != nil {
		return fmt.Errorf("snapshot size %q: %w", sizeFlag, err)
	}
	if fstype == "ext4" {
		// blockfile writes every snapshot in full here: the image's layers,
		// the concurrent test and the n containers, plus some slack.
		need := size * int64(o.layers+1+concurrency+n) * 5 / 4
		if err := checkFree("/var/tmp", need); err != nil {
			return err
		}
	}
	x, err := setup(ctx, fstype, size)
	if err != nil {
		return err
	}
	defer x.close()
	c, err := client.New(x.ctrd.Socket())
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, done, err := c.WithLease(ctx, leases.WithExpiration(24*time.Hour))
	if err != nil {
		return err
	}
	defer done(context.WithoutCancel(ctx))

	tarball := filepath.Join(x.dir, "layered.tar")
	if err := makeImage(tarball, o); err != nil {
		return err
	}
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	imgs, err := c.Import(ctx, f)
	f.Close()
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	img := client.NewImage(c, imgs[0])
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return err
	}
	// ChainIDs works in place, and the client caches the slice RootFS returns.
	chain := identity.ChainIDs(append([]digest.Digest(nil), diffIDs...))
	data := make([]byte, o.writeMiB<<20)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	var sns []*subject
	for _, name := range snapshotters {
		sns = append(sns, &subject{result: result{name: name}, sn: c.SnapshotService(name)})
	}
	fmt.Fprintf(os.Stderr, "snapbench: %s: %s on %s: %d unpacks, %d containers (load %s)\n",
		fstype, strings.Join(snapshotters, ", "), fstype, o.rounds, n, loadavg())
	if err := measure(ctx, x, c, img, chain, sns, n, data, o.rounds); err != nil {
		return err
	}
	var results []result
	for _, s := range sns {
		results = append(results, s.result)
	}
	report(os.Stdout, fstype, size, n, len(diffIDs), o, results)
	fmt.Printf("\nload average at the end: %s\n", loadavg())
	return nil
}

// loadavg is the 1, 5 and 15 minute load average: the machine is shared,
// and the numbers mean more next to it.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// makeImage writes busybox plus o.layers layers of o.layerMiB MiB of
// random 256 KiB files each.
func makeImage(dst string, o options) error {
	var layers []layered.Layer
	for l := range o.layers {
		dir := fmt.Sprintf("data%d", l+1)
		layer := layered.Layer{{Path: dir, Dir: true}}
		for i := range o.layerMiB * 4 {
			b := make([]byte, 256<<10)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			layer = append(layer, layered.Entry{Path: fmt.Sprintf("%s/f%03d", dir, i), Data: b})
		}
		layers = append(layers, layer)
	}
	return layered.AddLayers(filepath.Join(os.Getenv("IMAGES"), "busybox.tar"), dst, "gvx.test/snapbench:latest", layers...)
}

// checkFree fails unless the filesystem holding dir has need bytes free:
// a loop filesystem whose backing file hits a full disk turns read-only.
func checkFree(dir string, need int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return err
	}
	if avail := int64(st.Bavail) * st.Bsize; avail < need {
		return fmt.Errorf("%s has %s free, the ext4 run needs about %s (blockfile copies every snapshot in full): free space or lower -n-ext4/-size-ext4",
			dir, volume.FormatSize(avail), volume.FormatSize(need))
	}
	return nil
}
