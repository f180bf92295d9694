package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// TestSecurityNATControl: a NAT's control socket (root's, mode 0600, in
// the sandbox's sentry root) narrows the sandbox's egress and dials its
// guest ports, so whoever reaches it could lift a narrowing or reach a
// guest server. Every sandbox's host-side processes (its Sentry, its NAT)
// run as the same unprivileged uid, so a sandbox that escaped gVisor
// holds exactly the identity that must not reach another's socket. As
// sandbox B's NAT and Sentry uids, the attack connects to sandbox A's
// control socket and tries to take its path (chmod, rename, unlink, bind
// beside it); from A's own guest it connects to both sandboxes' sockets.
// Every attempt fails, while root's connection (the positive control:
// the socket is live and the attack code works) succeeds, and afterwards
// the same socket still carries root's requests.
func TestSecurityNATControl(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	const a, b = "sec-natctl-a", "sec-natctl-b"
	nat := []string{"--annotation", api.AnnotationNetwork + "=" + api.NetworkNAT}
	attackSandbox(t, a, nat...)
	attackSandbox(t, b, nat...)
	sentryRoot := func(id string) api.SentryRoot {
		return api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS))
	}
	ctl := sentryRoot(a).NATControl(a)
	before := socketOf(t, ctl)

	// B's host-side identities, read from its processes.
	type ident struct {
		name     string
		uid, gid uint32
	}
	var ids []ident
	for _, p := range []struct {
		name string
		pid  int
	}{{"B's NAT", natStats(t, b).Pid}, {"B's Sentry", taskPid(t, b)}} {
		uid, gid := procIDs(t, p.pid)
		if uid == 0 {
			t.Fatalf("%s (pid %d) runs as root", p.name, p.pid)
		}
		ids = append(ids, ident{p.name, uid, gid})
	}

	// The attack binary and its list where any uid can read them.
	dir, err := os.MkdirTemp("", "gvx-natctl-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	data, err := os.ReadFile(buildTestdataOnce(t))
	if err != nil {
		t.Fatal(err)
	}
	bin, list := filepath.Join(dir, "attack"), filepath.Join(dir, "sockets")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{{bin, data, 0o755}, {list, []byte(ctl + "\n"), 0o644}} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	host := func(who ident, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: who.uid, Gid: who.gid, Groups: []uint32{}}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("attack %s as %s (uid %d): %v\n%s", strings.Join(args, " "), who.name, who.uid, err, out)
		}
		t.Logf("attack %s on the host as %s (uid %d):\n%s", strings.Join(args, " "), who.name, who.uid, out)
		return string(out)
	}

	for _, who := range ids {
		out := host(who, "unix", list)
		attackRan(t, "control socket as "+who.name, out, "UNIX-TRIED", "DONE unix")
		if n := count(out, "UNIX-CONNECTS"); n != 0 {
			t.Errorf("as %s (uid %d) the attack connected to %s's control socket %d times", who.name, who.uid, a, n)
		}
		out = host(who, "squat", ctl)
		attackRan(t, "squat as "+who.name, out, "SQUAT chmod", "SQUAT rename", "SQUAT unlink", "SQUAT bind", "DONE squat")
		if n := count(out, "SQUAT-TOOK"); n != 0 {
			t.Errorf("as %s (uid %d) the attack took %d of 4 steps against %s's control socket", who.name, who.uid, n, a)
		}
		// Denied, not missed: a wrong path would say ENOENT.
		if strings.Contains(out, "no such file") {
			t.Errorf("the squat missed the socket (%s):\n%s", ctl, out)
		}
	}

	// From A's guest: both sandboxes' control sockets, by their host paths.
	guestList := filepath.Join(filepath.Dir(buildTestdataOnce(t)), "natctl")
	if err := os.WriteFile(guestList, []byte(ctl+"\n"+sentryRoot(b).NATControl(b)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := attack(t, a, "unix", "/attack/natctl")
	attackRan(t, "control sockets from the guest", out, "UNIX-TRIED", "DONE unix")
	if n := count(out, "UNIX-CONNECTS"); n != 0 {
		t.Errorf("A's guest connected to a NAT control socket %d times", n)
	}

	// The positive control: root connects (and the NAT shrugs off a
	// connection that says nothing).
	out = host(ident{"root", 0, 0}, "unix", list)
	if n := count(out, "UNIX-CONNECTS"); n != 1 {
		t.Errorf("root connected to %s's control socket %d times, want 1: the socket is not live, so the refusals above prove nothing", a, n)
	}
	if after := socketOf(t, ctl); after != before {
		t.Errorf("%s's control socket changed: %+v → %+v", a, before, after)
	}
	if err := api.SetNATNarrow(context.Background(), ctl, nil); err != nil {
		t.Errorf("root's request on %s's control socket after the attacks: %v", a, err)
	}
	if socks, _ := filepath.Glob(filepath.Join(string(sentryRoot(a)), "gvx-nat-squat*")); len(socks) != 0 {
		t.Errorf("the attack left %q", socks)
	}
}

// socket is what identifies a unix socket's file: its inode, owner and
// mode.
type socket struct {
	ino  uint64
	uid  uint32
	mode os.FileMode
}

func socketOf(t *testing.T, path string) socket {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("control socket: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	s := socket{st.Ino, st.Uid, fi.Mode()}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 || st.Uid != 0 {
		t.Fatalf("%s is %+v, want a socket of root's, mode 0600", path, s)
	}
	return s
}

// procIDs is the real uid and gid of host process pid.
func procIDs(t *testing.T, pid int) (uid, gid uint32) {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("process %d: %v", pid, err)
	}
	for _, l := range strings.Split(string(status), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n, err := strconv.ParseUint(f[1], 10, 32)
		switch {
		case err != nil:
		case f[0] == "Uid:":
			uid = uint32(n)
		case f[0] == "Gid:":
			gid = uint32(n)
		}
	}
	return uid, gid
}
