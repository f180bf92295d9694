package cgroups

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

func TestKill(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a cgroup")
	}
	path := fmt.Sprintf("/gvx-killtest-%d", os.Getpid())
	dir := filepath.Join("/sys/fs/cgroup", "pids", path) // cgroup v1
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup", path) // v2
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot create a cgroup: %v", err)
	}
	defer Remove(context.Background(), path)
	var cmds []*exec.Cmd
	for i := 0; i < 2; i++ {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
		go func() { _ = c.Wait() }() // reap, as a parent does
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(c.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := Kill(path, 5*time.Second)
	if err != nil || n != 2 {
		t.Fatalf("Kill = %d, %v; want 2, nil", n, err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); len(data) != 0 {
		t.Errorf("cgroup still holds %q", data)
	}
	if n, err := Kill(path, time.Second); n != 0 || err != nil {
		t.Errorf("second Kill = %d, %v; want 0, nil", n, err)
	}
	if n, err := Kill("/gvx-no-such-cgroup", time.Second); n != 0 || err != nil {
		t.Errorf("Kill of a missing cgroup = %d, %v", n, err)
	}
}
