package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"gvisor.dev/gvisor/pkg/unet"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cgroup"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/sandbox"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/internal/statetest"
)

// containerManager is gVisor's as far as a container's destroy
// goes: it records the containers destroyed, and refuses those named in
// refuse.
type containerManager struct {
	destroyed chan string
	refuse    string
	signals   chan boot.SignalArgs
}

func (cm *containerManager) Signal(args *boot.SignalArgs, _ *struct{}) error {
	if args.PID == 666 {
		return errors.New("no such process")
	}
	cm.signals <- *args
	return nil
}

func (cm *containerManager) DestroySubcontainer(cid *string, _ *struct{}) error {
	if *cid == cm.refuse {
		return errors.New("refused")
	}
	cm.destroyed <- *cid
	return nil
}

// controlServer serves cm on a unix socket in dir with gVisor's own urpc
// server, as a sandbox's control socket; it returns the socket's path.
func controlServer(t *testing.T, cm *containerManager) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ctl.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := urpc.NewServer()
	srv.Register(cm)
	t.Cleanup(func() { ln.Close(); srv.Stop(0) })
	go func() {
		for {
			conn, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			f, err := conn.File()
			conn.Close()
			if err != nil {
				return
			}
			sock, err := unet.NewSocket(int(f.Fd()))
			if err != nil {
				f.Close()
				return
			}
			srv.StartHandling(sock) // the socket owns the descriptor now
		}
	}()
	return path
}

// sleeper starts a process that sleeps, with extra arguments (a gofer's
// command line has "gofer"); it is killed and reaped at the end.
func sleeper(t *testing.T, extra ...string) *exec.Cmd {
	t.Helper()
	// " & wait": sh stays (it would exec a lone last command, and its
	// command line — what the test reads — would become sleep's); the
	// group goes at the end, sleep with it.
	cmd := exec.Command("sh", append([]string{"-c", "sleep 60 & wait"}, extra...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	// Start returns once the exec closed its close-on-exec descriptors,
	// which the kernel does before it sets the new command line up:
	// wait for it, as the test reads it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid)); len(b) > 0 || time.Now().After(deadline) {
			break
		}
	}
	return cmd
}

// saveSub writes gVisor's state of container id in sandbox sb, whose
// process is sbPid and control socket ctl, with gofer goferPid.
func saveSub(t *testing.T, root, id, sb string, sbPid, goferPid int, ctl string, spec *specs.Spec, upper specutils.GoferMountConfUpperType, original int) {
	t.Helper()
	saveSubCgroup(t, root, id, sb, sbPid, goferPid, ctl, spec, upper, original, cgroup.CgroupJSON{})
}

// saveSubCgroup is saveSub of a container with compat cgroup cg.
func saveSubCgroup(t *testing.T, root, id, sb string, sbPid, goferPid int, ctl string, spec *specs.Spec, upper specutils.GoferMountConfUpperType, original int, cg cgroup.CgroupJSON) {
	t.Helper()
	c := &container.Container{
		ID:              id,
		Spec:            spec,
		Sandbox:         &sandbox.Sandbox{ID: sb, ControlSocketPath: ctl, OriginalOOMScoreAdj: original},
		Status:          container.Running,
		BundleDir:       "/bundles/" + id,
		Saver:           container.StateFile{RootDir: root, ID: container.FullID{SandboxID: sb, ContainerID: id}},
		GoferMountConfs: specutils.GoferMountConfFlags{{Lower: specutils.Lisafs, Upper: upper}},
		CompatCgroup:    cg,
	}
	c.Sandbox.Pid.Store(sbPid)
	c.GoferPid.Store(goferPid)
	statetest.SaveContainer(t, c)
}

// markEnded writes what the monitor of container id leaves once the
// container's init exited: its end mark, its (dead) socket, an OOM mark.
func markEnded(t *testing.T, root, id string) {
	t.Helper()
	r := api.SentryRoot(root)
	for p, data := range map[string]string{r.MonitorEnded(id): api.MonitorEndedMark, r.MonitorSocket(id): "", r.OOMMarker(id): ""} {
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func oomScore(t *testing.T, pid int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/oom_score_adj")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	return n
}

func taskSpec(score *int) *specs.Spec {
	return &specs.Spec{Process: &specs.Process{Args: []string{"sleep"}, OOMScoreAdj: score},
		Annotations: map[string]string{api.CRIContainerType: api.CRIRoleContainer, api.CRISandboxID: "sb"}}
}

// TestSubDelete: gvx-runtime deletes a container in a running sandbox
// once its monitor marked it ended as gVisor's destroy does — the
// sandbox's destroy call (gVisor's own urpc server decodes it), the gofer
// killed and gone, the state, lock and monitor files removed, the
// sandbox's oom_score_adj set from the containers left or back to its
// original — and leaves to gvx-sentry a container not marked ended, one
// that takes its pool sandbox along, one with poststop hooks or a
// filestore-backed overlay, one whose sandbox is gone or refuses the call.
func TestSubDelete(t *testing.T) {
	if methodDestroySubcontainer != boot.ContMgrDestroySubcontainer {
		t.Fatalf("method %q, gVisor's is %q", methodDestroySubcontainer, boot.ContMgrDestroySubcontainer)
	}
	cm := &containerManager{destroyed: make(chan string, 8), refuse: "refused"}
	ctl := controlServer(t, cm)
	root := t.TempDir()
	sb := sleeper(t) // the sandbox's process
	sbPid := sb.Process.Pid
	low, high := 300, 500
	saveSub(t, root, "sb", "sb", sbPid, 0, ctl, &specs.Spec{Process: &specs.Process{Args: []string{"pause"}},
		Annotations: map[string]string{api.CRIContainerType: api.CRIRoleSandbox}}, specutils.MemoryOverlay, 100)
	gofer := sleeper(t, "gofer", "--bundle", "/bundles/c1")
	// c1 has a compat cgroup (gVisor's JSON of a cgroup v2 one, in
	// directories of the test's own).
	cgDir := t.TempDir()
	cgOuter, cgInner := filepath.Join(cgDir, "pod"), filepath.Join(cgDir, "pod", "c1")
	if err := os.MkdirAll(cgInner, 0o755); err != nil {
		t.Fatal(err)
	}
	var cg cgroup.CgroupJSON
	if err := json.Unmarshal([]byte(fmt.Sprintf(`{"cgroupv2": {"mountpoint": %q, "path": "/pod/c1", "own": [%q, %q]}}`, cgDir, cgOuter, cgInner)), &cg); err != nil {
		t.Fatal(err)
	}
	saveSubCgroup(t, root, "c1", "sb", sbPid, gofer.Process.Pid, ctl, taskSpec(&high), specutils.MemoryOverlay, 100, cg)
	saveSub(t, root, "c2", "sb", sbPid, 0, ctl, taskSpec(&low), specutils.MemoryOverlay, 100)
	markEnded(t, root, "c1")

	c := command{root: root, sub: "delete"}
	if handled, err := c.subDelete("c1"); !handled || err != nil {
		t.Fatalf("delete of an ended container: handled %v, %v", handled, err)
	}
	if got := <-cm.destroyed; got != "c1" {
		t.Errorf("sandbox asked to destroy %q", got)
	}
	if err := gofer.Wait(); err == nil || gofer.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("gofer: %v, want killed", err)
	}
	r := api.SentryRoot(root)
	state := filepath.Join(root, "c1_sandbox:sb"+api.StateSuffix)
	for _, p := range []string{state, strings.TrimSuffix(state, api.StateSuffix) + ".lock", r.MonitorEnded("c1"), r.MonitorSocket("c1"), r.OOMMarker("c1")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left: %v", filepath.Base(p), err)
		}
	}
	if _, err := os.Stat(cgOuter); !os.IsNotExist(err) {
		t.Errorf("c1's compat cgroup left: %v", err)
	}
	if got := oomScore(t, sbPid); got != low {
		t.Errorf("sandbox's oom_score_adj %d, want %d (c2's; the pod's own container left out)", got, low)
	}
	if _, err := os.Stat(filepath.Join(root, "sb_sandbox:sb"+api.StateSuffix)); err != nil {
		t.Errorf("the sandbox's root container's state: %v", err)
	}

	// The last container with a score goes: the sandbox's original.
	markEnded(t, root, "c2")
	if handled, err := c.subDelete("c2"); !handled || err != nil {
		t.Fatalf("delete of c2: handled %v, %v", handled, err)
	}
	<-cm.destroyed
	if got := oomScore(t, sbPid); got != 100 {
		t.Errorf("sandbox's oom_score_adj %d, want its original 100", got)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "c*.lock")); len(left) != 0 {
		t.Errorf("lock files of deleted containers left: %q", left)
	}

	// A pid that is no longer the gofer — another process, another
	// container's gofer — is not killed.
	for _, args := range [][]string{nil, {"gofer", "--bundle", "/bundles/other"}, {"gofer", "--bundle=/bundles/other"}} {
		other := sleeper(t, args...)
		if err := killGofer(other.Process.Pid, "/bundles/c1"); err != nil {
			t.Errorf("killGofer of %q: %v", args, err)
		}
		if err := other.Process.Signal(syscall.Signal(0)); err != nil {
			t.Errorf("%q was killed as c1's gofer: %v", args, err)
		}
	}
	if g := sleeper(t, "gofer", "--bundle=/bundles/c1"); !isGofer(g.Process.Pid, "/bundles/c1") {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", g.Process.Pid))
		t.Errorf("a re-executed gofer (--bundle=DIR) not taken for its container's: command line %q", cmdline)
	}

	dead := statetest.DeadPid(t)
	pool := taskSpec(nil)
	pool.Annotations[api.AnnotationPoolSandbox] = "sb"
	hooks := taskSpec(nil)
	hooks.Hooks = &specs.Hooks{Poststop: []specs.Hook{{Path: "/bin/true"}}}
	for _, tc := range []struct {
		name  string
		id    string
		ended bool
		pid   int
		spec  *specs.Spec
		upper specutils.GoferMountConfUpperType
	}{
		{"not ended", "c3", false, sbPid, taskSpec(nil), specutils.MemoryOverlay},
		{"takes its pool sandbox", "c3", true, sbPid, pool, specutils.MemoryOverlay},
		{"poststop hooks", "c3", true, sbPid, hooks, specutils.MemoryOverlay},
		{"overlay on disk", "c3", true, sbPid, taskSpec(nil), specutils.SelfOverlay},
		{"sandbox gone", "c3", true, dead, taskSpec(nil), specutils.MemoryOverlay},
		{"sandbox refuses", "refused", true, sbPid, taskSpec(nil), specutils.MemoryOverlay},
	} {
		root := t.TempDir()
		saveSub(t, root, tc.id, "sb", tc.pid, 0, ctl, tc.spec, tc.upper, 0)
		if tc.ended {
			markEnded(t, root, tc.id)
		}
		c := command{root: root, sub: "delete"}
		if handled, err := c.subDelete(tc.id); handled {
			t.Errorf("%s: taken (%v)", tc.name, err)
		}
		if _, err := os.Stat(filepath.Join(root, tc.id+"_sandbox:sb"+api.StateSuffix)); err != nil {
			t.Errorf("%s: state gone: %v", tc.name, err)
		}
	}
	select {
	case id := <-cm.destroyed:
		t.Errorf("sandbox asked to destroy %s by a delete left to gvx-sentry", id)
	default:
	}

	// A systemd-managed compat cgroup goes to gvx-sentry (its unit is
	// stopped over D-Bus).
	var sd cgroup.CgroupJSON
	if err := json.Unmarshal([]byte(`{"cgroupsystemd": {"name": "c4.scope", "own": ["/sys/fs/cgroup/c4.scope"]}}`), &sd); err != nil || sd.Cgroup == nil {
		t.Fatalf("gVisor's JSON of a systemd cgroup: %v", err)
	}
	saveSubCgroup(t, root, "c4", "sb", sbPid, 0, ctl, taskSpec(nil), specutils.MemoryOverlay, 0, sd)
	markEnded(t, root, "c4")
	if handled, _ := c.subDelete("c4"); handled {
		t.Error("a container with a systemd-managed cgroup: taken")
	}
}

// TestCompatDirs: the directories of a container's compat cgroup, as
// runsc/cgroup's Uninstall removes them: a cgroup v1 one's in each
// controller it owns (under a parent when it has one), innermost first
// for v2; a systemd one is not gvx-runtime's. removeCgroupDirs removes
// them, a missing one is no error, one it cannot remove is.
func TestCompatDirs(t *testing.T) {
	root := cgroupRoot()
	dirs, ok := compatDirs(map[string]json.RawMessage{"cgroupv1": json.RawMessage(`{"name": "/k8s.io/c1", "parents": {"cpu": "/kubepods"}, "own": {"memory": true, "cpu": true, "pids": false}}`)})
	want := []string{filepath.Join(root, "cpu", "/kubepods/k8s.io/c1"), filepath.Join(root, "memory", "/k8s.io/c1")}
	if !ok || strings.Join(dirs, " ") != strings.Join(want, " ") {
		t.Errorf("v1: %q, %v; want %q", dirs, ok, want)
	}
	dirs, ok = compatDirs(map[string]json.RawMessage{"cgroupv2": json.RawMessage(`{"own": ["/sys/fs/cgroup/a", "/sys/fs/cgroup/a/b"]}`)})
	if !ok || strings.Join(dirs, " ") != "/sys/fs/cgroup/a/b /sys/fs/cgroup/a" {
		t.Errorf("v2: %q, %v", dirs, ok)
	}
	if dirs, ok = compatDirs(map[string]json.RawMessage{"cgroupunknown": json.RawMessage("null")}); !ok || len(dirs) != 0 {
		t.Errorf("none: %q, %v", dirs, ok)
	}
	if _, ok = compatDirs(map[string]json.RawMessage{"cgroupsystemd": json.RawMessage(`{"name": "x.scope"}`)}); ok {
		t.Error("systemd's taken")
	}
	if _, ok = compatDirs(map[string]json.RawMessage{"cgroupv2": json.RawMessage(`{"own": ["relative"]}`)}); ok {
		t.Error("a relative v2 directory taken")
	}

	tmp := t.TempDir()
	empty, full := filepath.Join(tmp, "empty"), filepath.Join(tmp, "full")
	for _, d := range []string{empty, filepath.Join(full, "child")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeCgroupDirs([]string{empty, filepath.Join(tmp, "missing")}); err != nil {
		t.Errorf("remove: %v", err)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", empty, err)
	}
	if err := removeCgroupDirs([]string{full}); err == nil || !strings.Contains(err.Error(), full) {
		t.Errorf("a directory that cannot go: %v, want an error naming it", err)
	}
}
