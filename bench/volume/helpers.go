package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gvxrun/gvx/volume"
)

// warm reads a golden image once (untimed), so that no method pays for
// bringing it into the page cache.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for {
		_, err := f.Read(buf)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("warm up: read %s: %w", path, err)
		}
	}
}

// checkCopy makes sure a copy has the source's length.
func checkCopy(g golden, dst string) error {
	st, err := os.Stat(dst)
	if err != nil {
		return fmt.Errorf("check copy: %w", err)
	}
	if st.Size() != g.size {
		return fmt.Errorf("copy %s has %d bytes, want %d", dst, st.Size(), g.size)
	}
	return nil
}

// copyKind judges from the space a copy took what kind of copy it was.
func copyKind(space int64, g golden) string {
	switch {
	case space < g.alloc/4:
		return "shared extents (reflink)"
	case space < g.size*19/20:
		return "copy, sparse"
	default:
		return "copy, full (holes filled)"
	}
}

// watch reports a long-running copy on stderr every few seconds with
// the space allocated to dst so far; the returned function stops it.
func watch(label, dst string) func() {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		start := time.Now()
		t := time.NewTicker(3 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				a, _ := allocated(dst)
				progress("%s: %s so far, %s allocated to the copy", label, fmtDur(time.Since(start).Truncate(time.Second)), volume.FormatSize(a))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
	}
}

// lastPart returns what follows the last ": " in an error message, e.g.
// "Operation not supported".
func lastPart(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndex(s, ": "); i >= 0 {
		return s[i+2:]
	}
	return s
}

// sizeName renders a size for file names: 4G, 256M.
func sizeName(n int64) string {
	if n%(1<<30) == 0 {
		return strconv.FormatInt(n>>30, 10) + "G"
	}
	return strconv.FormatInt(n>>20, 10) + "M"
}
