package monitor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

// TestSpawnCreate: the create SpawnCreate starts has CreateHereEnv, the
// start socket as fd 3 (a listening socket at the container's monitor
// path) and the report pipe as fd 4; "ok" is a create done while the
// process goes on, "error: …" its failure, and a process that exits
// without a report is a failure naming gvx-sentry, its socket removed.
func TestSpawnCreate(t *testing.T) {
	root := t.TempDir()
	sock := api.SentryRoot(root).MonitorSocket("c1")
	done := filepath.Join(t.TempDir(), "done")
	// It reports, then goes on (as the monitor would), and shows the
	// socket was its own while it ran.
	script := `test "$` + CreateHereEnv + `" = 1 || { echo "error: no env" >&4; exit 1; }
		test -S "$1" || { echo "error: no socket" >&4; exit 1; }
		echo ok >&4; exec 4>&-; sleep 0.2; touch "$2"`
	t0 := time.Now()
	if err := SpawnCreate(exec.Command("sh", "-c", script, "sh", sock, done), root, "c1"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := os.Stat(done); err == nil {
		t.Error("SpawnCreate waited for the process, not its report")
	}
	for deadline := t0.Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(done); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the create did not go on after its report")
		}
	}
	if fi, err := os.Lstat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("start socket: %v", err)
	}

	err := SpawnCreate(exec.Command("sh", "-c", `echo "error: creating container: bad spec" >&4`), root, "c2")
	if err == nil || err.Error() != "creating container: bad spec" {
		t.Errorf("failed create: %v", err)
	}
	if _, err := os.Lstat(api.SentryRoot(root).MonitorSocket("c2")); !os.IsNotExist(err) {
		t.Errorf("a failed create's socket left: %v", err)
	}
	err = SpawnCreate(exec.Command("sh", "-c", "exit 3"), root, "c3")
	if err == nil || !strings.Contains(err.Error(), api.SentryBinary) {
		t.Errorf("a create that died: %v, want an error naming %s", err, api.SentryBinary)
	}
	if _, err := os.Lstat(api.SentryRoot(root).MonitorSocket("c3")); !os.IsNotExist(err) {
		t.Errorf("a dead create's socket left: %v", err)
	}
	if err := SpawnCreate(exec.Command("/nonexistent"), root, "c4"); err == nil {
		t.Error("a create that cannot start: no error")
	}
}
