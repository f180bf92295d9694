package volmount

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

func TestCreateBundle(t *testing.T) {
	for _, tc := range []struct {
		argv   []string
		bundle string
		ok     bool
	}{
		{[]string{"gvx-sentry", "--root", "/r", "--log", "/l", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, "/b", true},
		{[]string{"gvx-sentry", "--root=/r", "run", "--bundle=/b2", "id"}, "/b2", true},
		{[]string{"gvx-sentry", "create", "-b", "/b3", "id"}, "/b3", true},
		{[]string{"gvx-sentry", "--root", "/r", "start", "id"}, "", false},
		{[]string{"gvx-sentry", "--root", "/r", "delete", "--force", "id"}, "", false},
	} {
		b, ok := CreateBundle(tc.argv)
		if ok != tc.ok || (tc.ok && b != tc.bundle) {
			t.Errorf("CreateBundle(%q) = %q, %v; want %q, %v", tc.argv, b, ok, tc.bundle, tc.ok)
		}
	}
}

func TestFromSpec(t *testing.T) {
	s := &specs.Spec{}
	if v, err := FromSpec(s); err != nil || v != nil {
		t.Errorf("no annotation: %v %v", v, err)
	}
	s.Annotations = map[string]string{api.AnnotationVolumes: `[{"image":"/v/a.ext4","staging":"/run/gvx/volumes/ns/id/0","readonly":true}]`}
	v, err := FromSpec(s)
	if err != nil || len(v) != 1 || v[0].Image != "/v/a.ext4" || !v[0].ReadOnly {
		t.Errorf("FromSpec = %+v, %v", v, err)
	}
	for _, bad := range []string{`{`, `[{"image":"rel.ext4","staging":"/s"}]`, `[{"image":"/a","staging":"rel"}]`} {
		s.Annotations[api.AnnotationVolumes] = bad
		if _, err := FromSpec(s); err == nil || !strings.Contains(err.Error(), api.AnnotationVolumes) {
			t.Errorf("FromSpec(%q): err = %v, want one naming the annotation", bad, err)
		}
	}
}

// TestMountIntoRefusesNonGofer: MountInto mounts only into a process with
// a mount and a user namespace of its own — this test's process has
// neither — and names why; a missing process is an error too.
func TestMountIntoRefusesNonGofer(t *testing.T) {
	vols := []api.Volume{{Image: "/nonexistent.ext4", Destination: "/work"}}
	err := MountInto(os.Getpid(), vols)
	if err == nil || !strings.Contains(err.Error(), "no sandbox's gofer") {
		t.Errorf("MountInto this process: %v, want a refusal saying it is no sandbox's gofer", err)
	}
	if err := MountInto(1<<22+1, vols); err == nil {
		t.Error("MountInto a process that does not exist: no error")
	}
}

// enterChildEnv makes the test binary, re-run, the child of
// TestEnterPrivateNamespace.
const enterChildEnv = "GVX_TEST_ENTER_PRIVATE"

// TestEnterPrivateNamespace: after EnterPrivateNamespace, a process
// started from a goroutine locked to a new thread (as gVisor's create
// starts the gofer and the sandbox) is in the new mount namespace and
// sees a mount made there, the host does not, and the working directory
// is the one before. Run in a child, which needs root.
func TestEnterPrivateNamespace(t *testing.T) {
	if os.Getenv(enterChildEnv) != "" {
		enterChild()
		return
	}
	if os.Getuid() != 0 {
		t.Skip("needs root (mount namespaces)")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnterPrivateNamespace$")
	cmd.Env = append(os.Environ(), enterChildEnv+"="+dir)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "child ok") {
		t.Fatalf("the child did not finish its checks:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "mnt", "marker")); err == nil {
		t.Error("the host sees the tmpfs the child mounted in its private namespace")
	}
}

// enterChild is TestEnterPrivateNamespace's child: it prints "child ok"
// once every check passed, else what failed.
func enterChild() {
	dir := os.Getenv(enterChildEnv)
	fail := func(format string, a ...any) {
		fmt.Printf(format+"\n", a...)
		os.Exit(1)
	}
	host, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		fail("%v", err)
	}
	// Threads made before the switch, each then starting a process, as
	// specutils.StartInNS does from a locked goroutine: every one must be
	// in the new namespace.
	type result struct {
		out []byte
		err error
	}
	start, results := make(chan struct{}), make(chan result)
	const threads = 4
	for i := 0; i < threads; i++ {
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			<-start
			out, err := exec.Command("sh", "-c", "readlink /proc/self/ns/mnt; ls mnt").Output()
			results <- result{out, err}
		}()
	}
	time.Sleep(50 * time.Millisecond) // the goroutines on their threads
	if err := EnterPrivateNamespace(); err != nil {
		fail("EnterPrivateNamespace: %v", err)
	}
	if wd, err := os.Getwd(); err != nil || wd != dir {
		fail("working directory %q, %v; want %s", wd, err, dir)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		fail("%v", err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		fail("mount: %v", err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "marker"), nil, 0o600); err != nil {
		fail("%v", err)
	}
	close(start)
	for i := 0; i < threads; i++ {
		r := <-results
		if r.err != nil {
			fail("a started process: %v", r.err)
		}
		lines := strings.Fields(string(r.out))
		if len(lines) != 2 || lines[0] == host || lines[1] != "marker" {
			fail("a process started from a thread made before the switch saw namespace and mount %q; want a namespace other than the host's %s, and the marker", lines, host)
		}
	}
	fmt.Println("child ok")
}
