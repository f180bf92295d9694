// Package loopdev tells whether a file backs a loop device.
//
// gvx-sentry mounts an ext4lite volume through an auto-clearing loop
// device in the sandbox's private mount namespace; after the sandbox is
// deleted the device detaches asynchronously, and a volume file should not
// be removed or reused until it has.
package loopdev

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Attached reports whether a loop device is backed by the file at path.
func Attached(path string) bool {
	abs, err := filepath.Abs(path)
	if err != nil {
		return false
	}
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == abs {
			return true
		}
	}
	return false
}

// WaitDetached waits (up to 15 s) until no loop device is backed by the
// file at path.
func WaitDetached(ctx context.Context, path string) error {
	deadline := time.Now().Add(15 * time.Second)
	for Attached(path) {
		if time.Now().After(deadline) {
			return errors.New(path + " is still attached to a loop device 15 s after its sandbox was deleted")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
