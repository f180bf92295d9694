package integration

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// hostImprint is what an escape would change on the host: gvx's binaries,
// the host's mount table, the cgroup files an escape writes (v1
// release_agent and notify_on_release, v2 root controls) and the kernel
// knobs that run host programs (core_pattern, modprobe, sysrq).
type hostImprint map[string]string

// hostFiles are the host files compared byte for byte.
func hostFiles() []string {
	files := []string{"/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sys/kernel/sysrq",
		"/proc/sys/kernel/hostname", "/sys/kernel/uevent_helper", "/proc/sys/kernel/kexec_load_disabled", "/proc/sys/kernel/modules_disabled",
		"/sys/fs/cgroup/cgroup.subtree_control", "/sys/fs/cgroup/unified/cgroup.subtree_control"}
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/release_agent")
	files = append(files, roots...)
	notify, _ := filepath.Glob("/sys/fs/cgroup/*/notify_on_release")
	return append(files, notify...)
}

// gvxBinaries are the host binaries a CVE-2019-5736-style attack would
// overwrite.
func gvxBinaries() []string {
	var out []string
	for _, b := range []string{api.ShimBinary, api.ShimServerBinary, api.SentryBinary, api.RuntimeBinary, api.PauseBinary, api.HookBinary, api.NATBinary, api.CLIBinary} {
		out = append(out, filepath.Join(e.gvxBin, b))
	}
	return out
}

// snapshotHost records the host's state.
func snapshotHost(t *testing.T) hostImprint {
	t.Helper()
	s := hostImprint{}
	for _, b := range gvxBinaries() {
		s["sha256 "+b] = sha(t, b)
	}
	for _, f := range hostFiles() {
		if b, err := os.ReadFile(f); err == nil {
			s["file "+f] = string(b)
		}
	}
	s["mounts"] = hostMounts(t)
	return s
}

// hostMounts is the host's mount table as sorted "mount point fstype
// source" lines (mount ids and peer groups left out), without the pin of
// the empty network namespace all sandboxes' gofers share (the first
// sandbox after a `gvx gc` makes it, by design: harness.SharedNetNS).
func hostMounts(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/1/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		for i, x := range f {
			if x == "-" && i+2 < len(f) && len(f) > 4 {
				if f[4] != harness.SharedNetNS() {
					lines = append(lines, f[4]+" "+f[i+1]+" "+f[i+2])
				}
				break
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// checkHostUnchanged fails the test for every difference from before.
func checkHostUnchanged(t *testing.T, what string, before hostImprint) {
	t.Helper()
	after := snapshotHost(t)
	for k, v := range before {
		if after[k] != v {
			if k == "mounts" {
				t.Errorf("%s: the host mount table changed:\n%s", what, diffLines(v, after[k]))
				continue
			}
			t.Errorf("%s: host %s changed: %.100q → %.100q", what, k, v, after[k])
		}
	}
}

func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l := range ma {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// attackRan fails unless the attack's output shows every marker: the
// attack reached the point where it would do harm.
func attackRan(t *testing.T, name, out string, markers ...string) {
	t.Helper()
	for _, m := range markers {
		if !strings.Contains(out, m) {
			t.Errorf("attack %s did not run as far as %q; its output:\n%s", name, m, out)
		}
	}
}
