package harness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sandbox"
)

// HostState is what gvx's sandboxes could leave behind on the host, as
// seen by the tasks of one containerd's namespace.
type HostState struct {
	Procs   []string // gvx-sentry / shim / monitor processes: "pid exe"
	Mounts  []string // mount points below the state directory or a task bundle
	Loops   []string // loop devices in use
	Cgroups []string // cgroup directories of the namespace and of pools
	Sockets []string // shim sockets
	State   []string // sentry roots, pool and per-task dirs, task bundles
	FIFOs   []string // clients' task IO fifos
	CNI     []string // CNI plugins' iptables chains (CNIChains)
}

// RestoreCopies lists containerd's extractions of checkpoint images for
// restores (in the harness's containerd's temporary directory), which the
// shim removes once the restored task has started (containerd does not).
func RestoreCopies() []string {
	copies, _ := filepath.Glob(filepath.Join(os.TempDir(), "ctrd-checkpoint*"))
	return copies
}

// Snapshot takes the HostState of the tasks of containerd c in namespace
// ns: c's bundles, gvx's state directory, the host's processes, mounts,
// loop devices and cgroups, and the fifos in containerd's default fifo
// directory and in fifoDirs.
func Snapshot(c *Containerd, ns string, fifoDirs ...string) HostState {
	var s HostState
	s.Procs = GVXProcs()
	for _, m := range append(MountsUnder(State.Dir+"/"), MountsUnder(filepath.Join(c.Dir, "state")+"/")...) {
		// The node's one pin of the empty network namespace gVisor's
		// gofers share: kept across sandboxes, released by `gvx gc`
		// (and by UnpinSharedNetNS at the end of the suite).
		if m != SharedNetNS() {
			s.Mounts = append(s.Mounts, m)
		}
	}
	if out, err := exec.Command("losetup", "-n", "-l", "-O", "NAME,BACK-FILE").Output(); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				s.Loops = append(s.Loops, strings.Join(strings.Fields(l), " "))
			}
		}
	}
	for _, base := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			sub, _ := os.ReadDir(filepath.Join(base, e.Name(), ns))
			for _, d := range sub {
				if d.IsDir() {
					s.Cgroups = append(s.Cgroups, filepath.Join(base, e.Name(), ns, d.Name()))
				}
			}
		}
		// The pools' parent and each pool sandbox's own.
		pool, _ := filepath.Glob(filepath.Join(base, "*", "gvx-pool*"))
		sandboxes, _ := filepath.Glob(filepath.Join(base, "*", "gvx-pool", "gvxpool-*"))
		s.Cgroups = append(append(s.Cgroups, pool...), sandboxes...)
		sub, _ := os.ReadDir(filepath.Join(base, ns))
		for _, d := range sub {
			if d.IsDir() {
				s.Cgroups = append(s.Cgroups, filepath.Join(base, ns, d.Name()))
			}
		}
	}
	s.Sockets, _ = filepath.Glob("/run/containerd/s/*")
	st := State
	roots, _ := filepath.Glob(filepath.Join(st.SentryRoots(), "*"))
	for _, pattern := range []string{
		st.Pools() + "*", st.Pools() + "/*", st.Pools() + "/*/*", // warm pools, their sandboxes, rootfs and image
		st.RootfsDir() + "/*/*", st.VolumesDir() + "/*/*", st.DockerDir() + "/*/*", // per-task dirs
	} {
		more, _ := filepath.Glob(pattern)
		roots = append(roots, more...)
	}
	bundles, _ := filepath.Glob(filepath.Join(c.Dir, "state", "io.containerd.runtime.v2.task", ns, "*"))
	s.State = append(append(roots, bundles...), RestoreCopies()...)
	for _, d := range append([]string{"/run/containerd/fifo"}, fifoDirs...) {
		more, _ := filepath.Glob(filepath.Join(d, "*"))
		s.FIFOs = append(s.FIFOs, more...)
	}
	s.CNI = CNIChains()
	for _, l := range [][]string{s.Procs, s.Mounts, s.Loops, s.Cgroups, s.Sockets, s.State, s.FIFOs} {
		sort.Strings(l)
	}
	return s
}

// Leaked lists what is in after but not in before, each line naming its
// kind.
func Leaked(before, after HostState) []string {
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
	diff("process", before.Procs, after.Procs)
	diff("mount", before.Mounts, after.Mounts)
	diff("loop device", before.Loops, after.Loops)
	diff("cgroup", before.Cgroups, after.Cgroups)
	diff("socket", before.Sockets, after.Sockets)
	diff("state", before.State, after.State)
	diff("iptables chain", before.CNI, after.CNI)
	diff("fifo", before.FIFOs, after.FIFOs)
	return out
}

// GVXProcs lists processes running gvx's binaries (shim, sentry, gofer,
// monitors, stubs, exec waiters): every one of them belongs to some
// sandbox or pool.
func GVXProcs() []string {
	var out []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		exe, err := os.Readlink(filepath.Join(d, "exe"))
		if err != nil {
			continue
		}
		base := filepath.Base(strings.TrimSuffix(exe, " (deleted)"))
		switch base {
		case api.SentryBinary, api.RuntimeBinary, api.PauseBinary, api.ShimBinary, api.ShimServerBinary, api.CLIBinary, api.NATBinary:
			out = append(out, fmt.Sprintf("%s %s", filepath.Base(d), exe))
		}
	}
	return out
}

// SharedNetNS is where gVisor pins the empty network namespace the gofers
// of all sandboxes share (gvx's --shared-root).
func SharedNetNS() string { return api.SentryRoot(State.SharedSentryRoot()).NullNetNS() }

// UnpinSharedNetNS releases that pin, as `gvx gc` does once no sandbox is
// left.
func UnpinSharedNetNS() { sandbox.UnpinNetNS(api.SentryRoot(State.SharedSentryRoot())) }

// SharedNetNSPinned says whether that pin is there now.
func SharedNetNSPinned() bool { return slices.Contains(MountsUnder(SharedNetNS()), SharedNetNS()) }
