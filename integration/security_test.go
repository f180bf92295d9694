package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	coci "github.com/containerd/containerd/v2/pkg/oci"

	"github.com/gvxrun/gvx/integration/harness"
)

// procInfo is what /proc says about a host process.
type procInfo struct {
	pid                            int
	name, uids, noNewPrivs, seccmp string
	capEff                         string
	state                          string // R, S, Z, …
	uidMap                         string
	userNS                         string
}

func readProc(pid int) (procInfo, error) {
	p := procInfo{pid: pid}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return p, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "Name":
			p.name = v
		case "State":
			p.state = strings.Fields(v)[0]
		case "Uid":
			p.uids = strings.Join(strings.Fields(v), " ")
		case "NoNewPrivs":
			p.noNewPrivs = v
		case "Seccomp":
			p.seccmp = v
		case "CapEff":
			p.capEff = v
		}
	}
	m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid))
	if err != nil {
		return p, err
	}
	p.uidMap = strings.Join(strings.Fields(string(m)), " ")
	p.userNS, err = os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid))
	return p, err
}

// shimPid finds the shim serving task id.
// checkDropped fails the test unless host process pid (a gvx helper that
// started as root, named what) now holds no privilege: no uid 0, no
// effective capabilities, no_new_privs.
func checkDropped(t *testing.T, what string, pid int) {
	t.Helper()
	p, err := readProc(pid)
	if err != nil {
		t.Errorf("%s: host process %d: %v", what, pid, err)
		return
	}
	if strings.Contains(" "+p.uids+" ", " 0 ") || strings.Trim(p.capEff, "0") != "" || p.noNewPrivs != "1" {
		t.Errorf("%s: host process %d (%s): Uid %s CapEff %s NoNewPrivs %s, want no uid 0, no capabilities, no_new_privs",
			what, pid, p.name, p.uids, p.capEff, p.noNewPrivs)
	}
}

func shimPid(t *testing.T, id string) int {
	t.Helper()
	return shimPidAt(t, e.Socket(), id)
}

// shimPidAt finds the shim of task id started by the containerd at socket.
func shimPidAt(t *testing.T, socket, id string) int {
	t.Helper()
	pid, err := harness.ShimPid(socket, id)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// TestSandboxUnprivileged inspects every host process of a sandbox right
// after Create (the task is not started: no guest instruction has run) and
// again while it runs. At both points none is host root and none is in the
// host user namespace (so no capability it holds applies to the host).
// While the guest runs, every one also has no_new_privs and a seccomp
// filter: gVisor installs the Sentry's filter in the Start path before it
// starts the guest kernel, so the filter is there before guest code.
func TestSandboxUnprivileged(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	ctx := namespaces.WithNamespace(context.Background(), testNS)
	c, err := client.New(filepath.Join(e.dir, "c.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	img, err := c.GetImage(ctx, busybox)
	if err != nil {
		t.Fatal(err)
	}
	cont, err := c.NewContainer(ctx, "sec1",
		client.WithNewSnapshot("sec1", img),
		client.WithNewSpec(coci.WithImageConfig(img), coci.WithProcessArgs("sleep", "60")),
		client.WithRuntime(runtime, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cont.Delete(ctx, client.WithSnapshotCleanup); err != nil {
			t.Errorf("delete container: %v", err)
		}
	}()
	task, err := cont.NewTask(ctx, cio.NullIO)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = task.Kill(ctx, syscall.SIGKILL)
		if _, err := task.Delete(ctx, client.WithProcessKill); err != nil {
			t.Errorf("delete task: %v", err)
		}
	}()
	hostNS, err := os.Readlink("/proc/self/ns/user")
	if err != nil {
		t.Fatal(err)
	}
	check := func(phase string, locked bool) {
		shim := shimPid(t, "sec1")
		pids := harness.Descendants(shim)
		if len(pids) < 2 {
			t.Fatalf("%s: shim %d has %d descendants, want at least the Sentry and the gofer", phase, shim, len(pids))
		}
		for _, pid := range pids {
			p, err := readProc(pid)
			if err != nil {
				continue // exited meanwhile
			}
			who := fmt.Sprintf("%s: pid %d (%s)", phase, pid, p.name)
			for _, u := range strings.Fields(p.uids) {
				if u == "0" {
					t.Errorf("%s runs as host root: Uid %s", who, p.uids)
					break
				}
			}
			if p.userNS == hostNS {
				t.Errorf("%s is in the host user namespace (capabilities %s apply to the host)", who, p.capEff)
			}
			if strings.HasPrefix(p.uidMap, "0 0 ") {
				t.Errorf("%s: uid_map %q maps its root to host root", who, p.uidMap)
			}
			if !locked {
				t.Logf("%s: Uid %s uid_map %q (NoNewPrivs %s Seccomp %s)", who, p.uids, p.uidMap, p.noNewPrivs, p.seccmp)
				continue
			}
			if p.noNewPrivs != "1" {
				t.Errorf("%s: NoNewPrivs %s, want 1", who, p.noNewPrivs)
			}
			if p.seccmp != "2" {
				t.Errorf("%s: Seccomp %s, want 2 (filter)", who, p.seccmp)
			}
			t.Logf("%s: Uid %s NoNewPrivs %s Seccomp %s CapEff %s uid_map %q", who, p.uids, p.noNewPrivs, p.seccmp, p.capEff, p.uidMap)
		}
	}
	check("created", false)
	if err := task.Start(ctx); err != nil {
		t.Fatal(err)
	}
	check("running", true)
}
