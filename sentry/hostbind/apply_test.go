package hostbind

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestApplyPropagation (root): in a private mount namespace made a slave
// of the host's (as gvx-sentry's is), a clone of a directory on a shared
// mount receives a mount the host makes under the source afterwards, and
// a recursively read-only clone is read-only at its submount; the host
// sees no clone.
func TestApplyPropagation(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	if os.Getenv("HOSTBIND_CHILD") != "" {
		applyChild(t)
		return
	}
	root := t.TempDir()
	src, flag, staging := filepath.Join(root, "src"), filepath.Join(root, "flag"), filepath.Join(root, "staging")
	for _, d := range []string{filepath.Join(src, "prop"), filepath.Join(src, "tmpfs"), flag} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(flag, "flagFile"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--bind", src, src}, {"--make-rshared", src}, {"-t", "tmpfs", "none", filepath.Join(src, "tmpfs")}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-R", "-l", src).Run() })
	// The child prepares its clones, then waits for the host's mount on
	// its stdin.
	cmd := exec.Command("/proc/self/exe", "-test.run=^TestApplyPropagation$")
	cmd.Env = append(os.Environ(), "HOSTBIND_CHILD=1", "HOSTBIND_SRC="+src, "HOSTBIND_STAGING="+staging)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS} // as volmount.Reexec
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = outW, outW
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	outW.Close()
	buf := make([]byte, 6)
	if _, err := outR.Read(buf); err != nil || string(buf) != "ready\n" {
		in.Close()
		rest, _ := readAll(outR)
		_ = cmd.Wait()
		t.Fatalf("child: %q%s %v", buf, rest, err)
	}
	if out, err := exec.Command("mount", "--bind", flag, filepath.Join(src, "prop")).CombinedOutput(); err != nil {
		t.Fatalf("mount on the host: %v: %s", err, out)
	}
	in.Close()
	rest, _ := readAll(outR)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, rest)
	}
	if m, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(m), staging) {
		t.Errorf("a clone is mounted on the host:\n%s", m)
	}
}

func readAll(f *os.File) (string, error) {
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String(), nil
		}
	}
}

func applyChild(t *testing.T) {
	src, staging := os.Getenv("HOSTBIND_SRC"), os.Getenv("HOSTBIND_STAGING")
	fail := func(f string, a ...any) {
		os.Stdout.WriteString("error " + strings.TrimSpace(fmt.Sprintf(f, a...)) + "\n")
		os.Exit(1)
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		fail("slave: %v", err)
	}
	s := &specs.Spec{Mounts: []specs.Mount{
		{Destination: "/b", Type: "bind", Source: src, Options: []string{"rbind", "rprivate", "rro"}},
	}}
	binds, err := Plan(s, staging, nil)
	if err != nil || len(binds) != 1 {
		fail("plan: %+v %v", binds, err)
	}
	if err := Apply(s, binds, nil); err != nil {
		fail("apply: %v", err)
	}
	ro := s.Mounts[0].Source
	os.Stdout.WriteString("ready\n")
	buf := make([]byte, 1)
	_, _ = os.Stdin.Read(buf) // the host mounted
	if _, err := os.Stat(filepath.Join(ro, "prop", "flagFile")); err != nil {
		fail("the host's mount did not propagate to the clone: %v", err)
	}
	os.Exit(0)
}
