package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/integration/harness"
)

func TestMain(m *testing.M) {
	x, err := newEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: %v\n", err)
		os.Exit(1)
	}
	if x == nil {
		skipReason = "integration environment not set up: run `make integration` (needs GVX_BIN, CONTAINERD_BIN, IMAGES)"
	}
	e = x
	var before hostState
	if e != nil {
		before = snapshot(e)
	}
	code := m.Run()
	if golden != "" {
		_ = os.RemoveAll(filepath.Dir(golden)) // the docker tests' shared golden volume
	}
	if e != nil {
		harness.UnpinSharedNetNS()
		after := snapshot(e)
		e.close()
		if l := leaked(before, after); len(l) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: the suite left behind:\n  %s\n", strings.Join(l, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}
