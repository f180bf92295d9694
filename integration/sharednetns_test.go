package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/integration/harness"
)

// TestGoferSharedNetNS: the gofers of two sandboxes share one empty
// network namespace, the one gVisor pinned at gvx's --shared-root
// (sandboxes, each with a sentry root of its own, used to get a namespace
// and a bind mount per gofer: ≈ 150 KiB of kernel memory and a host mount
// each); the Sentries keep namespaces of their own; no task's root has a
// pin of its own; and `gvx gc`, once no sandbox is left, unpins it.
func TestGoferSharedNetNS(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ids := []string{"sharedns-a", "sharedns-b"}
	for _, id := range ids {
		cleanupTask(t, id)
		mustCtr(t, "run", "-d", "--runtime", runtime, busybox, id, "sleep", "100000")
	}
	pin := harness.SharedNetNS()
	var pinned syscall.Stat_t
	if err := syscall.Stat(pin, &pinned); err != nil {
		t.Fatalf("no shared pin: %v", err)
	}
	sentryNS := map[string]bool{}
	for _, id := range ids {
		root := harness.State.SentryRoot(id)
		gofers, sentries := sandboxProcs(t, root)
		if len(gofers) == 0 || len(sentries) == 0 {
			t.Fatalf("%s: gofers %v, Sentries %v under %s", id, gofers, sentries, root)
		}
		for _, g := range gofers {
			if ns := netNS(t, g); ns != pinned.Ino {
				t.Errorf("%s: gofer %d is in network namespace %d, not the pinned %d", id, g, ns, pinned.Ino)
			}
		}
		for _, s := range sentries {
			ns := netNS(t, s)
			if ns == pinned.Ino || sentryNS[formatIno(ns)] {
				t.Errorf("%s: Sentry %d shares network namespace %d", id, s, ns)
			}
			sentryNS[formatIno(ns)] = true
		}
		if own := harness.MountsUnder(root + "/"); len(own) > 0 {
			t.Errorf("%s: mounts under its sentry root: %v", id, own)
		}
	}
	for _, id := range ids {
		removeTask(t, id)
	}
	out := gvx(t, "gc", "--containerd", e.Socket(), "--state-dir", harness.State.Dir, "--min-age", "0", "--grace", "2s")
	if len(harness.MountsUnder(pin)) > 0 {
		t.Errorf("gvx gc left the shared pin %s:\n%s", pin, out)
	} else if !strings.Contains(out, pin) {
		t.Errorf("gvx gc does not report unpinning %s:\n%s", pin, out)
	}
}

// sandboxProcs lists the gofer and Sentry processes of the sandbox whose
// gVisor root is below root.
func sandboxProcs(t *testing.T, root string) (gofers, sentries []int) {
	t.Helper()
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		data, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil || !strings.Contains(string(data), root+"/") {
			continue
		}
		argv := strings.Split(string(data), "\x00")
		pid, _ := strconv.Atoi(filepath.Base(d))
		switch argv[0] {
		case "runsc-gofer":
			gofers = append(gofers, pid)
		case "runsc-sandbox":
			sentries = append(sentries, pid)
		}
	}
	return gofers, sentries
}

// netNS is the inode of process pid's network namespace.
func netNS(t *testing.T, pid int) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join("/proc", strconv.Itoa(pid), "ns", "net"), &st); err != nil {
		t.Fatalf("network namespace of %d: %v", pid, err)
	}
	return st.Ino
}

func formatIno(i uint64) string { return strconv.FormatUint(i, 10) }
