package hostcreds

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// status returns the fields of a /proc/…/status text.
func status(text string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	return fields
}

// TestStart: a command started for uid 65534 holds, from its start, that
// uid and gid only, no capabilities and no_new_privs; no thread of the
// starting process is left with no_new_privs.
func TestStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: it starts a process as another uid")
	}
	cmd := exec.Command("/bin/cat", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout = &out
	if err := Start(cmd, 65534, 65533); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	st := status(out.String())
	for k, want := range map[string]string{"Uid": "65534 65534 65534 65534", "Gid": "65533 65533 65533 65533",
		"Groups": "", "CapEff": "0000000000000000", "CapPrm": "0000000000000000", "NoNewPrivs": "1"} {
		if st[k] != want {
			t.Errorf("started process's %s: %q, want %q", k, st[k], want)
		}
	}
	// The thread that forked it is ended (or, the main thread, parked)
	// with its goroutine: no goroutine runs with no_new_privs after.
	var wg sync.WaitGroup
	var kept atomic.Int32
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if data, err := os.ReadFile("/proc/thread-self/status"); err != nil || status(string(data))["NoNewPrivs"] != "0" {
				kept.Add(1)
			}
			time.Sleep(time.Millisecond) // hold the thread: others need theirs
		}()
	}
	wg.Wait()
	if n := kept.Load(); n > 0 {
		t.Errorf("%d goroutines started after Start ran with no_new_privs (or could not tell)", n)
	}
	// A binary in a directory uid may not search.
	dir := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/bin/cat")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cat"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(filepath.Join(dir, "cat"), "/proc/self/status")
	out.Reset()
	cmd.Stdout = &out
	if err := Start(cmd, 65534, 65533); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%s as uid 65534: %v", cmd.Path, err)
	}
	if st := status(out.String()); st["Uid"] != "65534 65534 65534 65534" {
		t.Errorf("a binary below a private directory: Uid %q", st["Uid"])
	}
	if want := filepath.Join(dir, "cat"); cmd.Path != want {
		t.Errorf("cmd.Path after Start: %q, want %q", cmd.Path, want)
	}

	// uid 0 starts the command unchanged.
	cmd = exec.Command("/bin/cat", "/proc/self/status")
	out.Reset()
	cmd.Stdout = &out
	if err := Start(cmd, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if st := status(out.String()); !strings.HasPrefix(st["Uid"], "0 ") || st["NoNewPrivs"] != "0" {
		t.Errorf("uid 0: Uid %q NoNewPrivs %q, want root and 0", st["Uid"], st["NoNewPrivs"])
	}
}
