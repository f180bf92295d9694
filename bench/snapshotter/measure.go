package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
)

// snapshotters are measured in this order, in the same run (-snapshotters).
var snapshotters = []string{"ext4lite", "blockfile", "overlayfs"}

// result is what one snapshotter measured on one filesystem.
type result struct {
	name       string
	unpack     []time.Duration // one per round
	prepare    []time.Duration // one per container
	imageDisk  int64           // space the unpacked image took
	prepDisk   int64           // space N prepared containers took
	writeDisk  int64           // ... after each wrote its data
	remove     []time.Duration // Remove of each container's snapshot
	concurrent time.Duration   // wall time of concurrent Prepares
}

// subject is one snapshotter being measured.
type subject struct {
	result
	sn     snapshots.Snapshotter
	keys   []string
	mounts [][]mount.Mount
}

// chunk is how many containers one snapshotter handles before the next
// takes its turn: the snapshotters alternate, so that the load of this
// shared machine falls on all of them alike, and the space each chunk
// takes is measured with statfs while only its snapshotter works.
const chunk = 10

// measure unpacks the image rounds times with each snapshotter, prepares
// n containers from it with each, writes data into each container and
// removes everything again.
func measure(ctx context.Context, x *env, c *client.Client, img client.Image, chain []digest.Digest, sns []*subject, n int, data []byte, rounds int) error {
	for round := range rounds {
		for _, s := range sns {
			if err := removeChain(ctx, c, s.sn, chain); err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			d, err := s.disk(x, func() error {
				start := time.Now()
				if err := img.Unpack(ctx, s.name); err != nil {
					return fmt.Errorf("unpack %d: %w", round+1, err)
				}
				s.unpack = append(s.unpack, time.Since(start))
				return nil
			})
			if err != nil {
				return err
			}
			s.imageDisk = d
		}
	}
	top := chain[len(chain)-1].String()
	for from := 0; from < n; from += chunk {
		for _, s := range sns {
			d, err := s.disk(x, func() error {
				for i := from; i < min(from+chunk, n); i++ {
					key := fmt.Sprintf("%s-c%03d", s.name, i)
					start := time.Now()
					m, err := s.sn.Prepare(ctx, key, top)
					if err != nil {
						return fmt.Errorf("prepare %d: %w", i, err)
					}
					s.prepare = append(s.prepare, time.Since(start))
					s.keys, s.mounts = append(s.keys, key), append(s.mounts, m)
				}
				return nil
			})
			if err != nil {
				return err
			}
			s.prepDisk += d
		}
	}
	for _, s := range sns {
		if err := s.concurrentPrepares(ctx, c, top); err != nil {
			return err
		}
	}
	for _, s := range sns {
		s.writeDisk = s.prepDisk
	}
	for from := 0; from < n; from += chunk {
		for _, s := range sns {
			d, err := s.disk(x, func() error {
				for i := from; i < min(from+chunk, n); i++ {
					if err := writeInto(x.dir, s.mounts[i], data); err != nil {
						return fmt.Errorf("container %d: %w", i, err)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
			s.writeDisk += d
		}
	}
	for i := range n {
		for _, s := range sns {
			start := time.Now()
			if err := s.sn.Remove(ctx, s.keys[i]); err != nil {
				return fmt.Errorf("%s: remove %s: %w", s.name, s.keys[i], err)
			}
			s.remove = append(s.remove, time.Since(start))
		}
	}
	for _, s := range sns {
		if err := removeChain(ctx, c, s.sn, chain); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	return nil
}

// concurrency is how many Prepares run at once in the concurrent test.
const concurrency = 8

// concurrentPrepares prepares concurrency containers at once and records
// the wall time until all are ready; blockfile copies inside its metadata
// transaction, so its Prepares queue behind each other. They are removed
// again right away.
func (s *subject) concurrentPrepares(ctx context.Context, c *client.Client, top string) error {
	errs := make(chan error, concurrency)
	start := time.Now()
	for i := range concurrency {
		go func() {
			_, err := s.sn.Prepare(ctx, fmt.Sprintf("%s-concurrent%d", s.name, i), top)
			errs <- err
		}()
	}
	var first error
	for range concurrency {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	s.concurrent = time.Since(start)
	for i := range concurrency {
		if err := s.sn.Remove(ctx, fmt.Sprintf("%s-concurrent%d", s.name, i)); err != nil && !errdefs.IsNotFound(err) && first == nil {
			first = err
		}
	}
	if err := gcSync(ctx, c); err != nil && first == nil {
		first = err
	}
	if first != nil {
		return fmt.Errorf("%s: concurrent prepares: %w", s.name, first)
	}
	return nil
}

// disk runs fn and returns the space it took on the filesystem under
// test, labelling errors with the snapshotter's name.
func (s *subject) disk(x *env, fn func() error) (int64, error) {
	before, err := x.used()
	if err != nil {
		return 0, err
	}
	if err := fn(); err != nil {
		return 0, fmt.Errorf("%s: %w", s.name, err)
	}
	after, err := x.used()
	return after - before, err
}

// removeChain removes the image's committed snapshots (top first) and
// runs containerd's garbage collector, which deletes them in the backend
// snapshotter, so that the next measurement starts from an empty one.
func removeChain(ctx context.Context, c *client.Client, sn snapshots.Snapshotter, chain []digest.Digest) error {
	for i := len(chain) - 1; i >= 0; i-- {
		if err := sn.Remove(ctx, chain[i].String()); err != nil && !errdefs.IsNotFound(err) {
			return fmt.Errorf("remove %s: %w", chain[i], err)
		}
	}
	return gcSync(ctx, c)
}

// gcSync runs containerd's garbage collector and waits for it: removing
// a snapshot through containerd only drops its metadata, the backend
// snapshotter deletes it when the collector runs. Deleting a lease
// synchronously is the client's way to run it.
func gcSync(ctx context.Context, c *client.Client) error {
	ls := c.LeasesService()
	l, err := ls.Create(ctx, leases.WithRandomID())
	if err != nil {
		return err
	}
	return ls.Delete(ctx, l, leases.SynchronousDelete)
}

// writeInto mounts a container's snapshot, writes data into a new file,
// fsyncs it and unmounts.
func writeInto(tmp string, m []mount.Mount, data []byte) error {
	dir, err := os.MkdirTemp(tmp, "m-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := mount.All(m, dir); err != nil {
		return fmt.Errorf("mount: %w", err)
	}
	werr := func() error {
		f, err := os.Create(filepath.Join(dir, "bench-data"))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(data); err != nil {
			return err
		}
		return f.Sync()
	}()
	if err := mount.UnmountAll(dir, 0); err != nil {
		return fmt.Errorf("unmount: %w", err)
	}
	return werr
}
