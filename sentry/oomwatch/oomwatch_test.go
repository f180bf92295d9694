package oomwatch

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOOMKills: the kill count is read from v1's memory.oom_control and
// v2's memory.events alike, again and again from the same open file.
func TestOOMKills(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
		"memory.events":      "low 0\nhigh 12\nmax 4\noom 3\noom_kill 3\noom_group_kill 0\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if n := oomKills(f); n != 3 {
				t.Errorf("%s read %d: oom_kill %d, want 3", name, i, n)
			}
		}
		f.Close()
	}
}

// TestWatchWithoutSandbox: a watcher whose create ended without a pid
// file returns at once.
func TestWatchWithoutSandbox(t *testing.T) {
	if err := Watch([]string{"999999999", filepath.Join(t.TempDir(), "pid"), "1"}); err != nil {
		t.Error(err)
	}
	if err := Watch([]string{"x"}); err == nil {
		t.Error("bad arguments taken")
	}
}
