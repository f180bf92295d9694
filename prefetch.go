package gvx

import (
	"context"
	"errors"
	"sync"
)

// Prefetch makes images ready for New ahead of time: an image archive is
// imported (once per file content), and each image unpacked for the
// client's snapshotter, so that a New of it later pays neither. Images are
// prepared concurrently; an image named by reference must already be in
// containerd (gvx pulls from no registry). The error names each image
// that could not be prepared.
func (c *Client) Prefetch(ctx context.Context, images ...string) error {
	if c.isClosed() {
		return newError("prefetch", "", ErrClosed, nil)
	}
	ctx = c.Context(ctx)
	errs := make([]error, len(images))
	var wg sync.WaitGroup
	for i, ref := range images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.resolver().Resolve(ctx, ref); err != nil {
				errs[i] = errorf("prefetch", "", kindOf(err), "image %s: %w", ref, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
