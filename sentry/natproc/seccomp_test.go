package natproc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const filterChild = "GVX_NAT_FILTER_CHILD"

// TestFilter runs itself in a child that installs the NAT's filter and
// tries what the filter forbids: each must fail with EPERM while ordinary
// calls still work.
func TestFilter(t *testing.T) {
	if os.Getenv(filterChild) == "1" {
		filterChildMain()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestFilter$")
	cmd.Env = append(os.Environ(), filterChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "filter-ok") {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func filterChildMain() {
	fail := func(f string, a ...any) {
		os.Stdout.WriteString("FAIL: " + strings.TrimSpace(fmt.Sprintf(f, a...)) + "\n")
		os.Exit(1)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("no_new_privs: %v", err)
	}
	if err := installFilters(); err != nil {
		fail("install: %v", err)
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != unix.EPERM {
		fail("unshare: %v, want EPERM", err)
	}
	if err := unix.Setuid(0); err != unix.EPERM {
		fail("setuid: %v, want EPERM", err)
	}
	if err := unix.Exec("/bin/true", []string{"true"}, nil); err != unix.EPERM {
		fail("execve: %v, want EPERM", err)
	}
	if _, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0); err != nil {
		fail("socket: %v (the NAT needs it)", err)
	}
	os.Stdout.WriteString("filter-ok\n")
	os.Exit(0)
}
