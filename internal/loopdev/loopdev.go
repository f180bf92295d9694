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

// Backing returns the loop device ("/dev/loopN") backed by the file fi
// describes ("" if none): compared by identity, not path, so a file found
// through another name, or whose device names it "(deleted)" while it is
// still there under a new name, is found too.
func Backing(fi os.FileInfo) string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		bst, err := os.Stat(strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)"))
		if err == nil && os.SameFile(fi, bst) {
			return "/dev/" + filepath.Base(filepath.Dir(filepath.Dir(f)))
		}
	}
	return ""
}

// Device returns the loop device backed by the file at path ("" if none).
func Device(path string) (string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	return Backing(st), nil
}

// Attached reports whether a loop device is backed by the file at path.
func Attached(path string) bool {
	dev, err := Device(path)
	return err == nil && dev != ""
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
