package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrecompiledSeccomp: a sandbox's Sentry and gofer lock themselves
// down with the seccomp programs gvx-sentry carries compiled ahead of
// time (sentry/prefilter), not compiled at start — on gVisor's netstack
// and on the host's network, whose filters differ — and the task runs
// under them. gVisor's debug log says which it used.
func TestPrecompiledSeccomp(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	for _, tc := range []struct {
		name  string
		flags []string
	}{
		{"netstack", nil},
		{"host-network", []string{"--net-host"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			logs := filepath.Join(dir, "logs")
			if err := os.Mkdir(logs, 0o755); err != nil {
				t.Fatal(err)
			}
			cfg := filepath.Join(dir, "config.toml")
			toml := fmt.Sprintf("sentry_flags = [\"--debug\", \"--debug-log=%s/\"]\n", logs)
			if err := os.WriteFile(cfg, []byte(toml), 0o644); err != nil {
				t.Fatal(err)
			}
			id := "prefilter-" + tc.name
			cleanupTask(t, id)
			args := append([]string{"run", "--rm", "--runtime", runtime, "--runtime-config-path", cfg}, tc.flags...)
			out := mustCtr(t, append(args, busybox, id, "sh", "-c", "echo under-the-filter; ls /proc/self/fd >/dev/null")...)
			if strings.TrimSpace(out) != "under-the-filter" {
				t.Errorf("the task's output: %q", out)
			}
			for _, kind := range []string{"boot", "gofer"} {
				files, _ := filepath.Glob(filepath.Join(logs, "*."+kind+".txt"))
				if len(files) == 0 {
					t.Fatalf("no %s log in %s", kind, logs)
				}
				for _, f := range files {
					data, err := os.ReadFile(f)
					if err != nil {
						t.Fatal(err)
					}
					log := string(data)
					if !strings.Contains(log, "Loaded precompiled seccomp instructions") || strings.Contains(log, "No precompiled program found") {
						i := strings.Index(log, "precompiled")
						t.Errorf("%s (%s): the filter was not the precompiled one: %q", filepath.Base(f), kind, log[max(i-200, 0):min(i+300, len(log))])
					}
				}
			}
		})
	}
}
