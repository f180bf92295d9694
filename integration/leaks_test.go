package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// hostState is what a gvx sandbox could leave behind on the host.
type hostState struct {
	procs   []string // gvx-sentry / shim processes: "pid exe"
	mounts  []string // mount points below /run/gvx or a task bundle
	loops   []string // loop devices in use
	cgroups []string // cgroup directories of the test namespace
	sockets []string // shim sockets
	state   []string // sentry roots and task bundles
}

func snapshot(x *env) hostState {
	var s hostState
	s.procs = gvxProcs()
	s.mounts = append(mountsMatching(harness.State.Dir+"/"), mountsMatching(filepath.Join(x.dir, "state")+"/")...)
	if out, err := exec.Command("losetup", "-n", "-l", "-O", "NAME,BACK-FILE").Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				s.loops = append(s.loops, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	for _, base := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		entries, _ := os.ReadDir(base)
		for _, c := range entries {
			sub, _ := os.ReadDir(filepath.Join(base, c.Name(), testNS))
			for _, d := range sub {
				if d.IsDir() {
					s.cgroups = append(s.cgroups, filepath.Join(base, c.Name(), testNS, d.Name()))
				}
			}
		}
		// The pools' parent and each pool sandbox's own.
		pool, _ := filepath.Glob(filepath.Join(base, "*", "gvx-pool*"))
		sandboxes, _ := filepath.Glob(filepath.Join(base, "*", "gvx-pool", "gvxpool-*"))
		s.cgroups = append(append(s.cgroups, pool...), sandboxes...)
		sub, _ := os.ReadDir(filepath.Join(base, testNS))
		for _, d := range sub {
			if d.IsDir() {
				s.cgroups = append(s.cgroups, filepath.Join(base, testNS, d.Name()))
			}
		}
	}
	socks, _ := filepath.Glob("/run/containerd/s/*")
	s.sockets = socks
	st := harness.State
	roots, _ := filepath.Glob(filepath.Join(st.SentryRoots(), "*"))
	for _, pattern := range []string{
		st.Pools() + "*", st.Pools() + "/*", st.Pools() + "/*/*", // warm pools, their sandboxes, rootfs and image
		st.RootfsDir() + "/*/*", st.VolumesDir() + "/*/*", st.DockerDir() + "/*/*", // per-task dirs
		"/run/containerd/fifo/*", // clients' task IO fifos
	} {
		more, _ := filepath.Glob(pattern)
		roots = append(roots, more...)
	}
	bundles, _ := filepath.Glob(filepath.Join(x.dir, "state", "io.containerd.runtime.v2.task", testNS, "*"))
	s.state = append(roots, bundles...)
	for _, l := range [][]string{s.procs, s.mounts, s.loops, s.cgroups, s.sockets, s.state} {
		sort.Strings(l)
	}
	return s
}

// leaked lists what is in after but not in before.
func leaked(before, after hostState) []string {
	var out []string
	diff := func(kind string, b, a []string) {
		seen := map[string]bool{}
		for _, x := range b {
			seen[x] = true
		}
		for _, x := range a {
			if !seen[x] {
				out = append(out, kind+": "+x)
			}
		}
	}
	diff("process", before.procs, after.procs)
	diff("mount", before.mounts, after.mounts)
	diff("loop device", before.loops, after.loops)
	diff("cgroup", before.cgroups, after.cgroups)
	diff("socket", before.sockets, after.sockets)
	diff("state", before.state, after.state)
	return out
}

// checkNoLeaks registers a cleanup (run after the test's own cleanups)
// that fails the test if anything of a sandbox is left on the host.
// Teardown is asynchronous in places (shim exit), so it polls briefly.
func checkNoLeaks(t *testing.T) {
	t.Helper()
	requireEnv(t)
	before := snapshot(e)
	t.Cleanup(func() {
		var l []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			l = leaked(before, snapshot(e))
			if len(l) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if len(l) > 0 {
			t.Errorf("left behind on the host:\n  %s", strings.Join(l, "\n  "))
		}
	})
}

// gvxProcs lists processes running gvx's binaries (shim, sentry, gofer,
// stubs, exec waiters): every one of them belongs to some sandbox.
func gvxProcs() []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		exe, err := os.Readlink(filepath.Join(d, "exe"))
		if err != nil {
			continue
		}
		base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		switch base {
		case api.SentryBinary, api.RuntimeBinary, api.PauseBinary, api.ShimBinary, api.CLIBinary:
			out = append(out, fmt.Sprintf("%s %s", filepath.Base(d), exe))
		}
	}
	return out
}

// mountsMatching lists mount points starting with prefix, deepest first.
func mountsMatching(prefix string) []string { return harness.MountsUnder(prefix) }
