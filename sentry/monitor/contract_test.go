package monitor

import (
	"os"
	"os/exec"
	"testing"

	"github.com/gvxrun/gvx/sentry/internal/contractroot"
)

// TestContract: a monitor's start socket is where contract.json's layout
// puts it.
func TestContract(t *testing.T) {
	c := contractroot.Load(t)
	root := t.TempDir()
	if _, err := Spawn(exec.Command("true"), root, "t1"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(contractroot.Path(t, c, root, "monitor_socket"))
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("no socket at contract.json's monitor_socket: %v", err)
	}
	if !Has(root, "t1") {
		t.Error("Has does not see it")
	}
}
