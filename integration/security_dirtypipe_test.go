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
// every sandbox of the image shares; in docker mode, from inner
// containers, the attack's binary through two read-only binds and, as uid
// 1000, the inner image's busybox. The attack reaches the splice and the
// write each time; no target reads the payload afterwards, inside or out:
// the host files' checksums, busybox's in a new sandbox and a new inner
// container, the host and the canary are unchanged.
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
	const dk = "sec-dp-docker"
	dockerAttackSandbox(t, dk)
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
	const payload = "PWNED"
	// check asserts that the attack on what ran to its end and changed
	// nothing the attacker could see.
	check := func(what, out string) {
		t.Helper()
		attackRan(t, "dirty pipe on "+what, out, "DIRTYPIPE splice 1 err=<nil>", "DIRTYPIPE write 5 err=<nil>", "DIRTYPIPE reread 5", "DONE dirtypipe")
		if !strings.Contains(out, "DIRTYPIPE-CHANGED false") {
			t.Errorf("dirty pipe on %s: the file reads the payload afterwards inside the sandbox", what)
		}
		if !strings.Contains(out, "DIRTYPIPE open-for-writing 0 err=") || strings.Contains(out, "DIRTYPIPE open-for-writing 0 err=<nil>") {
			t.Errorf("dirty pipe on %s: the attacker could open it for writing, so the attack proves nothing", what)
		}
	}
	for i, tc := range []struct{ what, user, file string }{
		{"a host file on a read-only bind mount", "0", "/ro/target"},
		{"the attack's own binary, a host file on a read-only bind mount", "0", "/attack/attack"},
		{"the image's busybox, as an unprivileged user", "1000", "/bin/busybox"},
	} {
		r, err := e.ctrResult(context.Background(), "task", "exec", "--exec-id", "dp"+string(rune('a'+i)), "--user", tc.user, "sec-dp",
			"/attack/attack", "dirtypipe", tc.file, "4097", payload)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("dirty pipe on %s: exit %d\n%s%s", tc.what, r.code, r.stdout, r.stderr)
		check(tc.what, r.stdout+r.stderr)
	}

	// Docker mode: the same from inner containers, through two read-only
	// binds (host → sandbox → container), and as uid 1000 on the inner
	// image's busybox (dockerd's overlay2 on the episode volume).
	innerSum := func() string {
		return strings.TrimSpace(ctrSh(t, dk, "docker run --rm --pull never gvx.test/busybox:latest sha256sum /bin/busybox"))
	}
	innerBefore := innerSum()
	for _, tc := range []struct{ what, user, file string }{
		{"the attack's binary from an inner container (host → sandbox → container, read-only)", "0", "/attack/attack"},
		{"the inner image's busybox, as an unprivileged user of an inner container", "1000", "/bin/busybox"},
	} {
		check(tc.what, ctrSh(t, dk, "docker run --rm --pull never --user "+tc.user+" -v /attack:/attack:ro gvx.test/busybox:latest /attack/attack dirtypipe "+tc.file+" 4097 "+payload+" 2>&1"))
	}
	if after := innerSum(); after == "" || after != innerBefore {
		t.Errorf("the inner image's /bin/busybox in a new inner container: %q → %q", innerBefore, after)
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
