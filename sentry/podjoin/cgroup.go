// Package podjoin gives a warm-pool sandbox that a CRI pod's sandbox
// container adopted to the pod: the pod's cgroup (EnterCgroup) and the
// interfaces of its network namespace (AttachNetns).
package podjoin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gofrs/flock"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/cgroup"
	"gvisor.dev/gvisor/runsc/container"
)

// EnterCgroup moves running sandbox sbID (a warm-pool sandbox a pod's
// sandbox container adopted) from its cgroup to the cgroupfs path to,
// created with the limits the sandbox booted with (its root container's
// resources). Under gVisor's lock of the sandbox's state it records to as
// the sandbox's cgroup in the root container's state, so that every
// container created in it from now on (their gofers start in the
// sandbox's cgroup) and the sandbox's destroy use the new one; it runs
// before the pause container's own create (or start), which copies that
// state. The processes then move in the background (the first migration
// waits out an RCU grace period, ≈ 10 ms on cgroup v1, which the create
// overlaps): wait reports when they have, the pool cgroup removed.
func EnterCgroup(rootDir, sbID, to string) (wait func() error, _ error) {
	if !filepath.IsAbs(to) || strings.Contains(to, ":") {
		return nil, fmt.Errorf("pod cgroup %q: want an absolute cgroupfs path", to)
	}
	from, dst, err := recordPodCgroup(rootDir, sbID, to)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		if err := moveProcs(from, dst); err != nil {
			done <- err
			return
		}
		if err := from.Uninstall(); err != nil {
			log.Warningf("sandbox %s: remove its pool cgroup: %v", sbID, err)
		}
		// Hierarchies gVisor did not create it on (systemd's) are not
		// its to remove; they go too.
		for _, h := range hierarchies() {
			_ = os.Remove(from.MakePath(h))
		}
		log.Infof("sandbox %s moved to the pod's cgroup %s", sbID, to)
		done <- nil
	}()
	return func() error { return <-done }, nil
}

// recordPodCgroup creates cgroup to with the limits of sandbox sbID's
// root container and records it as the sandbox's cgroup in that
// container's gVisor state, under gVisor's lock of it. It returns the
// sandbox's cgroup before, and the new one.
func recordPodCgroup(rootDir, sbID, to string) (from, dst cgroup.Cgroup, _ error) {
	id := container.FullID{SandboxID: sbID, ContainerID: sbID}
	lock := flock.New(statePath(rootDir, id, "lock"))
	if err := lock.Lock(); err != nil {
		return nil, nil, fmt.Errorf("lock the state of sandbox %s: %w", sbID, err)
	}
	defer lock.Unlock()
	// Read as runsc's own load does, under the lock held (container.Load
	// would take it again, on a file of its own: flock blocks).
	data, err := os.ReadFile(statePath(rootDir, id, "state"))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox %s state: %w", sbID, err)
	}
	root := &container.Container{}
	if err := json.Unmarshal(data, root); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s state: %w", sbID, err)
	}
	if root.Sandbox == nil || root.Sandbox.CgroupJSON.Cgroup == nil {
		return nil, nil, fmt.Errorf("sandbox %s has no cgroup to move from", sbID)
	}
	from = root.Sandbox.CgroupJSON.Cgroup
	if dst, err = cgroup.NewFromPath(to, false); err != nil {
		return nil, nil, fmt.Errorf("pod cgroup %s: %w", to, err)
	}
	var res *specs.LinuxResources
	if root.Spec != nil && root.Spec.Linux != nil {
		res = root.Spec.Linux.Resources
	}
	if err := dst.Install(res); err != nil {
		return nil, nil, fmt.Errorf("create pod cgroup %s: %w", to, err)
	}
	// The state, as runsc's own save writes it.
	root.Sandbox.CgroupJSON.Cgroup = dst
	if data, err = json.Marshal(root); err != nil {
		return nil, nil, fmt.Errorf("sandbox %s state: %w", sbID, err)
	}
	if err := os.WriteFile(statePath(rootDir, id, "state"), data, 0o640); err != nil {
		return nil, nil, fmt.Errorf("save sandbox %s state: %w", sbID, err)
	}
	return from, dst, nil
}

// statePath is gVisor's file of container id's state (ext "state") or its
// lock (ext "lock") under rootDir, as runsc names them.
func statePath(rootDir string, id container.FullID, ext string) string {
	return filepath.Join(rootDir, fmt.Sprintf("%s_sandbox:%s.%s", id.ContainerID, id.SandboxID, ext))
}

// moveProcs writes every process of cgroup from into to, on each hierarchy
// from has a directory on (v1: one per controller; v2: the one), creating
// to's directory there when needed. Processes forked meanwhile are moved
// by the next round, until from is empty.
func moveProcs(from, to cgroup.Cgroup) error {
	hs := hierarchies()
	for round := 0; ; round++ {
		n := 0
		for _, h := range hs {
			m, err := moveHierarchy(from.MakePath(h), to.MakePath(h))
			if err != nil {
				return err
			}
			n += m
		}
		if n == 0 {
			return nil
		}
		if round == 20 {
			return fmt.Errorf("move sandbox cgroup: processes keep appearing in %s", from.MakePath(hs[0]))
		}
	}
}

// moveHierarchy writes the processes of cgroup directory src into dst
// (made if missing) and says how many it moved.
func moveHierarchy(src, dst string) (int, error) {
	data, err := os.ReadFile(filepath.Join(src, "cgroup.procs"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("move sandbox cgroup: %w", err)
	}
	pids := strings.Fields(string(data))
	if len(pids) == 0 {
		return 0, nil
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, fmt.Errorf("move sandbox cgroup: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dst, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("move sandbox cgroup: %w", err)
	}
	defer f.Close()
	n := 0
	for _, p := range pids {
		if _, err := strconv.Atoi(p); err != nil {
			continue
		}
		// One pid per write, as the kernel reads cgroup.procs.
		if _, err := f.WriteString(p); err != nil && !errors.Is(err, unix.ESRCH) {
			return n, fmt.Errorf("move process %s to %s: %w", p, dst, err)
		}
		n++
	}
	return n, nil
}

// hierarchies are the names MakePath takes for every cgroup hierarchy
// mounted: each v1 hierarchy's directory under /sys/fs/cgroup (the
// unified one of a hybrid host too), or just "" on a v2-only host.
func hierarchies() []string {
	if cgroup.IsOnlyV2() {
		return []string{""}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}
