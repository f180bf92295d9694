package testfs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestHolders finds this process by its open file on a loop filesystem,
// and the mount namespace that has it mounted.
func TestHolders(t *testing.T) {
	mnt := LoopFS(t, "ext4", "16M")
	f, err := os.Create(filepath.Join(mnt, "held"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	loops := LoopsUnder(filepath.Dir(mnt) + "/")
	if len(loops) != 1 {
		t.Fatalf("loop devices on the test's image: %v, want one", loops)
	}
	h := strings.Join(Holders(strings.Fields(loops[0])[0]), "\n")
	for _, want := range []string{
		"has it mounted at " + mnt,
		fmt.Sprintf("pid %d (", os.Getpid()),
		"(" + filepath.Join(mnt, "held") + ")",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("holders lack %q:\n%s", want, h)
		}
	}
}

// helperEnv makes TestMountNSHelper a process in a new mount namespace
// that (value "detach") detaches its copies of /tmp's mounts or ("keep")
// keeps them, says "ready" and waits for its stdin to close.
const helperEnv = "GVX_TESTFS_HELPER"

func TestMountNSHelper(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		t.Skip("a helper process of TestDetachCopies")
	case "detach":
		DetachCopies(os.TempDir())
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// TestDetachCopies: a process that enters a new mount namespace while
// another test's loop filesystem is mounted keeps that filesystem, and
// its loop device, after the test unmounts it — unless it detaches its
// copies as RunPrivate does.
func TestDetachCopies(t *testing.T) {
	RequireRoot(t)
	RequireTools(t, "mkfs.ext4", "losetup")
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "fs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	Sh(t, "truncate", "-s", "16M", img)
	Sh(t, "mkfs.ext4", "-q", "-F", img)
	Sh(t, "mount", "-o", "loop", img, mnt)
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = exec.Command("umount", "-d", mnt).Run()
		}
	})
	helper := func(mode string) (*exec.Cmd, io.WriteCloser) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestMountNSHelper$")
		cmd.Env = append(os.Environ(), helperEnv+"="+mode)
		cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { in.Close(); _ = cmd.Wait() })
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("helper %s: %q, %v", mode, line, err)
			}
			if line == "ready\n" {
				break
			}
		}
		return cmd, in
	}
	detacher, _ := helper("detach")
	keeper, keeperIn := helper("keep")
	Sh(t, "umount", "-d", mnt)
	mounted = false
	loops := LoopsUnder(img)
	if len(loops) != 1 {
		t.Fatalf("loop devices on %s after its unmount with a helper keeping a copy: %v, want one", img, loops)
	}
	h := strings.Join(Holders(strings.Fields(loops[0])[0]), "\n")
	if !strings.Contains(h, fmt.Sprintf("pid %d (", keeper.Process.Pid)) || strings.Contains(h, fmt.Sprintf("pid %d (", detacher.Process.Pid)) {
		t.Errorf("holders: want the keeping helper %d only, not the detaching one %d:\n%s", keeper.Process.Pid, detacher.Process.Pid, h)
	}
	keeperIn.Close()
	_ = keeper.Wait()
	deadline := time.Now().Add(10 * time.Second)
	for len(LoopsUnder(img)) > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if l := LoopsUnder(img); len(l) > 0 {
		t.Errorf("loop device left on %s with only the detaching helper alive: %v; held by %s", img, l, strings.Join(Holders(strings.Fields(l[0])[0]), "; "))
	}
}
