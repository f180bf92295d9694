package subcontainer

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
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/cgroup"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/specutils"
)

// enterPodCgroup moves the running sandbox that spec's container joins (a
// warm-pool sandbox a pod's sandbox container adopted) from its cgroup to
// the cgroupfs path to, created with the limits the sandbox booted with
// (its root container's resources), and records to as the sandbox's
// cgroup in the root container's gVisor state, so that every container
// created in it from now on (their gofers start in the sandbox's cgroup)
// and the sandbox's destroy use the new one. It runs before the
// container's own create, which copies the sandbox's state.
func enterPodCgroup(rootDir string, spec *specs.Spec, to string) error {
	if !filepath.IsAbs(to) || strings.Contains(to, ":") {
		return fmt.Errorf("pod cgroup %q: want an absolute cgroupfs path", to)
	}
	sbID, ok := specutils.SandboxID(spec)
	if !ok {
		return fmt.Errorf("pod cgroup %s for a spec that names no sandbox to join", to)
	}
	id := container.FullID{SandboxID: sbID, ContainerID: sbID}
	lock := flock.New(statePath(rootDir, id, "lock"))
	if err := lock.Lock(); err != nil {
		return fmt.Errorf("lock the state of sandbox %s: %w", sbID, err)
	}
	defer lock.Unlock()
	// Read as runsc's own load does, under the lock held (container.Load
	// would take it again, on a file of its own: flock blocks).
	data, err := os.ReadFile(statePath(rootDir, id, "state"))
	if err != nil {
		return fmt.Errorf("sandbox %s state: %w", sbID, err)
	}
	root := &container.Container{}
	if err := json.Unmarshal(data, root); err != nil {
		return fmt.Errorf("sandbox %s state: %w", sbID, err)
	}
	if root.Sandbox == nil || root.Sandbox.CgroupJSON.Cgroup == nil {
		return fmt.Errorf("sandbox %s has no cgroup to move from", sbID)
	}
	from := root.Sandbox.CgroupJSON.Cgroup
	dst, err := cgroup.NewFromPath(to, false)
	if err != nil {
		return fmt.Errorf("pod cgroup %s: %w", to, err)
	}
	var res *specs.LinuxResources
	if root.Spec != nil && root.Spec.Linux != nil {
		res = root.Spec.Linux.Resources
	}
	if err := dst.Install(res); err != nil {
		return fmt.Errorf("create pod cgroup %s: %w", to, err)
	}
	if err := moveProcs(from, dst); err != nil {
		return err
	}
	// The state, as runsc's own save writes it (under the lock held).
	root.Sandbox.CgroupJSON.Cgroup = dst
	if data, err = json.Marshal(root); err != nil {
		return fmt.Errorf("sandbox %s state: %w", sbID, err)
	}
	if err := os.WriteFile(statePath(rootDir, id, "state"), data, 0o640); err != nil {
		return fmt.Errorf("save sandbox %s state: %w", sbID, err)
	}
	if err := from.Uninstall(); err != nil {
		log.Warningf("sandbox %s: remove its pool cgroup: %v", sbID, err)
	}
	// Hierarchies gVisor did not create it on (systemd's) are not its to
	// remove; they go too.
	for _, h := range hierarchies() {
		_ = os.Remove(from.MakePath(h))
	}
	log.Infof("sandbox %s moved to the pod's cgroup %s", sbID, to)
	return nil
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
		moved := 0
		for _, h := range hs {
			src, dst := from.MakePath(h), to.MakePath(h)
			data, err := os.ReadFile(filepath.Join(src, "cgroup.procs"))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("move sandbox cgroup: %w", err)
			}
			pids := strings.Fields(string(data))
			if len(pids) == 0 {
				continue
			}
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("move sandbox cgroup: %w", err)
			}
			for _, p := range pids {
				if _, err := strconv.Atoi(p); err != nil {
					continue
				}
				err := os.WriteFile(filepath.Join(dst, "cgroup.procs"), []byte(p), 0o644)
				if err != nil && !errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "no such process") {
					return fmt.Errorf("move process %s to %s: %w", p, dst, err)
				}
				moved++
			}
		}
		if moved == 0 {
			return nil
		}
		if round == 20 {
			return fmt.Errorf("move sandbox cgroup: processes keep appearing in %s", from.MakePath(hs[0]))
		}
	}
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
