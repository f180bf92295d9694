package integration

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecurityDirtyPipe: CVE-2022-0847 ("Dirty Pipe"). From inside a
// sandbox the attack marks a pipe's buffers mergeable, splices one byte of
// a file it may only read into the pipe and writes a payload after it —
// on a vulnerable kernel the payload lands in the file's page cache, read
// only or not. Its targets: a host file on a read-only bind mount, the
// attack's own binary (a host file, read-only too), and, as an
// unprivileged guest user, the image's /bin/busybox, whose lower layer
// every sandbox of the image shares. The attack reaches the splice and
// the write each time; no target reads the payload afterwards, inside or
// out: the host files' checksums, busybox's in a new sandbox, the host
// and the canary are unchanged.
func TestSecurityDirtyPipe(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	c := startCanary(t, "sec-dp-canary")
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, bytes.Repeat([]byte("A"), 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := buildTestdataOnce(t)
	attackSandbox(t, "sec-dp", "--mount", "type=bind,src="+dir+",dst=/ro,options=rbind:ro")
	host := snapshotHost(t)
	targetSum, binSum := sha(t, target), sha(t, bin)
	// busyboxSum is /bin/busybox's checksum in a new sandbox of the
	// image, which reads it from the host's snapshot.
	busyboxSum := func() string {
		t.Helper()
		cleanupTask(t, "sec-dp-sum")
		out, _, err := e.ctr(context.Background(), "run", "--rm", "--runtime", runtime, busybox, "sec-dp-sum", "sha256sum", "/bin/busybox")
		if err != nil || len(strings.Fields(out)) == 0 {
			t.Fatalf("busybox's checksum in a new sandbox: %q %v", out, err)
		}
		return strings.Fields(out)[0]
	}
	before := busyboxSum()
	// An unprivileged user runs a copy: /attack is root's.
	mustCtr(t, "task", "exec", "--exec-id", "cp", "sec-dp", "sh", "-c", "cp /attack/attack /tmp/attack && chmod 755 /tmp/attack")
	const payload = "PWNED"
	for i, tc := range []struct{ what, user, file string }{
		{"a host file on a read-only bind mount", "0", "/ro/target"},
		{"the attack's own binary, a host file on a read-only bind mount", "0", "/attack/attack"},
		{"the image's busybox, as an unprivileged user", "1000", "/bin/busybox"},
	} {
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", "dp"+string(rune('a'+i)), "--user", tc.user, "sec-dp",
			"/tmp/attack", "dirtypipe", tc.file, "4097", payload)
		if err != nil {
			t.Fatal(err)
		}
		out := r.stdout + r.stderr
		t.Logf("dirty pipe on %s: exit %d\n%s", tc.what, r.code, out)
		attackRan(t, "dirty pipe on "+tc.what, out, "DIRTYPIPE splice 1 err=<nil>", "DIRTYPIPE write 5 err=<nil>", "DIRTYPIPE reread 5", "DONE dirtypipe")
		if !strings.Contains(out, "DIRTYPIPE-CHANGED false") {
			t.Errorf("dirty pipe on %s: the file reads the payload afterwards inside the sandbox", tc.what)
		}
		if !strings.Contains(out, "DIRTYPIPE open-for-writing 0 err=") || strings.Contains(out, "DIRTYPIPE open-for-writing 0 err=<nil>") {
			t.Errorf("dirty pipe on %s: the attacker could open it for writing, so the attack proves nothing", tc.what)
		}
	}
	if got := sha(t, target); got != targetSum {
		t.Errorf("the host file on the read-only bind mount changed")
	}
	if got := sha(t, bin); got != binSum {
		t.Errorf("the attack's binary on the host changed")
	}
	if after := busyboxSum(); after != before {
		t.Errorf("the image's /bin/busybox in a new sandbox changed: %s → %s", before, after)
	}
	checkHostUnchanged(t, "CVE-2022-0847", host)
	c.check(t)
}
