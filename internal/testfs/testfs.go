// Package testfs gives tests real filesystems.
//
// It re-runs a test binary in a private mount namespace and makes
// loop-mounted XFS (reflink) and ext4 (no reflink) filesystems that are
// released, and checked for leftover loop devices, at cleanup.
package testfs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/mountinfo"
)

// RunPrivate runs the tests. As root, it first re-executes the test binary
// in a private mount namespace (marked by the environment variable env):
// the loop mounts the tests make are then invisible to, and cannot be
// pinned by, sandboxes started meanwhile on the machine, and the kernel
// tears them down, detaching their auto-clear loop devices, when the test
// process exits, even if it is killed before its cleanups run. Nor does
// it pin theirs: the copies of other tests' mounts below the temporary
// directory that the new namespace starts with are detached
// (DetachCopies). It returns
// the exit code for os.Exit. In that namespace gvx's state directory
// (api.DefaultStateDir) is an empty tmpfs, so what the tests write there
// (volume marks, records) never reaches the host's.
func RunPrivate(m *testing.M, env string) int {
	if os.Geteuid() != 0 || fuzzWorker() {
		return m.Run()
	}
	if os.Getenv(env) != "" {
		DetachCopies(os.TempDir())
		if err := shieldState(); err != nil {
			fmt.Fprintf(os.Stderr, "%v\n", err)
			return 2
		}
		return m.Run()
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS} // Go makes "/" rprivate
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.Exited():
		return ee.ExitCode()
	default:
		fmt.Fprintf(os.Stderr, "re-exec in a private mount namespace: %v\n", err)
		return 2
	}
}

// DetachCopies detaches, in this process's own (new, private) mount
// namespace, every mount below dir: copies of other processes' mounts
// (another test's loop filesystems in its t.TempDir()) that the new
// namespace took at its creation and would otherwise keep — the
// filesystem and its auto-clear loop device stay alive while any
// namespace has it mounted — until this process exits, minutes later for
// a fuzz run. Only for a process that has just entered a private mount
// namespace: elsewhere it would unmount the host's.
func DetachCopies(dir string) {
	for _, p := range mountinfo.Under(filepath.Clean(dir) + "/") {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}

// shieldState mounts an empty tmpfs on gvx's state directory in this
// (private) mount namespace.
func shieldState() error {
	if err := os.MkdirAll(api.DefaultStateDir, 0o711); err != nil {
		return fmt.Errorf("shield %s: %w", api.DefaultStateDir, err)
	}
	if err := syscall.Mount("gvx-test-state", api.DefaultStateDir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0711"); err != nil {
		return fmt.Errorf("shield %s with a tmpfs: %w", api.DefaultStateDir, err)
	}
	return nil
}

// fuzzWorker reports whether this is a go test -fuzz worker: it talks to
// its coordinator over inherited descriptors that a re-exec would drop,
// and fuzz targets mount nothing.
func fuzzWorker() bool {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.fuzzworker") {
			return true
		}
	}
	return false
}

// RequireRoot skips tests that mount.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to loop-mount filesystems (run go test as root)")
	}
}

// RequireTools skips when a program the test needs is missing.
func RequireTools(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := Tool(n); err != nil {
			t.Skipf("skipping: %s not installed (apt-get install e2fsprogs xfsprogs)", n)
		}
	}
}

// Tool finds a program on PATH or in the sbin directories root's PATH has.
func Tool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// Sh runs a command and fails the test, with its output, if it fails.
func Sh(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// LoopFS makes a filesystem of type fstype ("xfs": reflink on by default;
// "ext4": no reflink) of the given size ("2G") in a sparse file under
// t.TempDir(), loop-mounts it and returns the mount point. Cleanup
// unmounts it, which detaches its auto-clear loop device, and fails the
// test if a loop device is left on the file or on any file inside it.
func LoopFS(t testing.TB, fstype, size string) string {
	t.Helper()
	RequireRoot(t)
	RequireTools(t, "mkfs."+fstype, "losetup")
	dir := t.TempDir()
	img := filepath.Join(dir, fstype+".img")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	Sh(t, "truncate", "-s", size, img)
	if fstype == "ext4" {
		Sh(t, "mkfs.ext4", "-q", "-F", img)
	} else {
		Sh(t, "mkfs."+fstype, "-q", img)
	}
	Sh(t, "mount", "-o", "loop", img, mnt)
	t.Cleanup(func() {
		if l := LoopsUnder(mnt + "/"); len(l) > 0 {
			t.Errorf("loop devices left on files in %s: %v", mnt, l)
		}
		if out, err := exec.Command("umount", "-d", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount -d %s: %v\n%s", mnt, err, out)
		}
		// The unmount does not reach copies of the mount in mount
		// namespaces made meanwhile (a sandbox's, a gofer's, another
		// test binary's): "/" is private here, and in the tests' own
		// namespace. Such a copy keeps the loop device until its
		// namespace's last process is gone, which teardown may still
		// be doing.
		deadline := time.Now().Add(10 * time.Second)
		for len(LoopsUnder(img)) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if l := LoopsUnder(img); len(l) > 0 {
			t.Errorf("loop device left on %s 10 s after its unmount: %v; held by: %s",
				img, l, strings.Join(Holders(strings.Fields(l[0])[0]), "; "))
		}
	})
	return mnt
}

// Holders lists who still holds the filesystem of block device dev
// ("loop3"): the processes (threads too: a thread group whose leader has
// exited shows only under another task) whose mount table has it, one per
// mount namespace, and those with a descriptor, working or root directory
// or mapping on it. Each line: "pid N (comm, parent P comm) WHAT:
// cmdline". A mount namespace that no task is in (held by a descriptor of
// its nsfs file or an nsfs bind mount) shows as that descriptor or not at
// all.
func Holders(dev string) []string {
	b, err := os.ReadFile(filepath.Join("/sys/block", dev, "dev"))
	if err != nil {
		return []string{fmt.Sprintf("(%s: %v)", dev, err)}
	}
	majmin := strings.TrimSpace(string(b))
	var major, minor uint32
	if _, err := fmt.Sscanf(majmin, "%d:%d", &major, &minor); err != nil {
		return []string{fmt.Sprintf("(%s: device number %q: %v)", dev, majmin, err)}
	}
	devno := unix.Mkdev(major, minor)
	mapsDev := fmt.Sprintf("%02x:%02x", major, minor)
	describe := func(pid string) string {
		comm := func(pid string) string {
			c, _ := os.ReadFile(filepath.Join("/proc", pid, "comm"))
			return strings.TrimSpace(string(c))
		}
		ppid := ""
		if st, err := os.ReadFile(filepath.Join("/proc", pid, "stat")); err == nil {
			if i := strings.LastIndexByte(string(st), ')'); i > 0 {
				if g := strings.Fields(string(st[i+1:])); len(g) > 1 {
					ppid = g[1]
				}
			}
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
		c := strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		if len(c) > 160 {
			c = c[:160] + "…"
		}
		return fmt.Sprintf("pid %s (%s, parent %s %s)", pid, comm(pid), ppid, comm(ppid)) + " %s: " + c
	}
	on := func(path string) bool {
		var st unix.Stat_t
		return unix.Stat(path, &st) == nil && st.Dev == devno
	}
	seen := map[string]bool{}
	var out []string
	tasks, _ := filepath.Glob("/proc/[0-9]*/task/[0-9]*")
	for _, d := range tasks {
		pid := filepath.Base(filepath.Dir(filepath.Dir(d)))
		ns, err := os.Readlink(filepath.Join(d, "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		info, err := os.ReadFile(filepath.Join(d, "mountinfo"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) > 4 && f[2] == majmin {
				seen[ns] = true
				out = append(out, fmt.Sprintf(describe(pid), "task "+filepath.Base(d)+" in "+ns+" has it mounted at "+f[4]))
				break
			}
		}
	}
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range pids {
		pid := filepath.Base(d)
		var what []string
		for _, l := range []string{"cwd", "root"} {
			if on(filepath.Join(d, l)) {
				what = append(what, l)
			}
		}
		fds, _ := filepath.Glob(filepath.Join(d, "fd", "*"))
		for _, fd := range fds {
			if on(fd) {
				target, _ := os.Readlink(fd)
				what = append(what, "fd "+filepath.Base(fd)+" ("+target+")")
			}
		}
		if maps, err := os.ReadFile(filepath.Join(d, "maps")); err == nil {
			for _, line := range strings.Split(string(maps), "\n") {
				if f := strings.Fields(line); len(f) > 5 && f[3] == mapsDev {
					what = append(what, "mapping of "+f[5])
					break
				}
			}
		}
		if len(what) > 0 {
			out = append(out, fmt.Sprintf(describe(pid), strings.Join(what, ", ")))
		}
	}
	if len(out) == 0 {
		out = append(out, "nobody found (a mount namespace held only by an nsfs mount, or one just released)")
	}
	return out
}

// LoopsUnder lists loop devices whose backing file starts with prefix.
func LoopsUnder(prefix string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), prefix) {
			out = append(out, filepath.Base(filepath.Dir(filepath.Dir(f)))+" "+strings.TrimSpace(string(b)))
		}
	}
	return out
}
