package janitor

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFIFOs: a FIFO directory nobody holds open and older than a minute
// goes; one a process holds open, a young one and one holding another
// kind of file stay; a dry run removes nothing.
func TestFIFOs(t *testing.T) {
	root := t.TempDir()
	old := time.Now().Add(-2 * fifoMinAge)
	mk := func(name string, age time.Time, files ...string) string {
		t.Helper()
		dir := filepath.Join(root, name)
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := syscall.Mkfifo(filepath.Join(dir, f), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chtimes(dir, age, age); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dead := mk("dead", old, "e1-stdout", "e1-stderr")
	held := mk("held", old, "e2-stdout", "e2-stderr")
	young := mk("young", time.Now(), "e3-stdout")
	other := mk("other", time.Now(), "e4-stdout")
	if err := os.WriteFile(filepath.Join(other, "notes"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(other, old, old); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(held, "e2-stderr"), os.O_RDWR, 0) // O_RDWR: no wait for a writer
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	sweepOnce := func(dry bool) *Report {
		s := &sweep{o: Options{FIFODirs: []string{root, filepath.Join(root, "missing")}, DryRun: dry}, r: &Report{DryRun: dry}, now: time.Now()}
		s.fifos(context.Background())
		return s.r
	}
	for _, dry := range []bool{true, false} {
		r := sweepOnce(dry)
		if len(r.Items) != 1 || r.Items[0].Kind != KindFIFO || r.Items[0].What != dead || r.Items[0].Err != nil {
			t.Fatalf("dry run %v: %+v, want only %s", dry, r.Items, dead)
		}
		_, err := os.Stat(dead)
		if dry != (err == nil) {
			t.Errorf("dry run %v: %s: %v", dry, dead, err)
		}
	}
	for _, d := range []string{held, young, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s removed: %v", d, err)
		}
	}
}
