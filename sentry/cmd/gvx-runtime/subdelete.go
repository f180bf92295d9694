package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/ctlsock"
	"github.com/gvxrun/gvx/api/procfs"
)

// A container in a running sandbox (a pod's container, a warm-pool task
// that adopted a sandbox the pool resets) whose init has exited — its
// monitor marked it ended — gets its delete from gvx-runtime: it does
// what gVisor's Container.Destroy does for such a container, which was a
// gvx-sentry start-up on every pool task's and pod container's delete
// (≈ 25–40 ms of CPU on a slow VM):
//
//   - the sandbox's destroy call for the container
//     (containerManager.DestroySubcontainer), over its control socket;
//   - the container's gofer killed, and waited for until it has exited;
//   - its own (compat) cgroup removed, if it has one (subcgroup.go);
//   - its state and lock files removed, under its lock;
//   - the sandbox's oom_score_adj set again from the containers left
//     (gVisor's adjustSandboxOOMScoreAdj: the lowest score a container
//     other than the pod's own asks for, else the sandbox's original);
//   - and, as gvx-sentry's delete does, its monitor's files (socket, OOM
//     and end markers).
//
// A container with poststop hooks, a systemd-managed cgroup of its own, a
// filestore-backed overlay, one that took a pool sandbox with it
// (api.AnnotationPoolSandbox), one whose sandbox is gone, one not marked
// ended, and any call the sandbox refuses go to gvx-sentry, which deletes
// it as before or says why.

// subState is what gvx-runtime reads of gVisor's state file of a container
// in a running sandbox (runsc/container.Container's JSON).
type subState struct {
	ID   string      `json:"id"`
	Spec *specs.Spec `json:"spec"`
	// GoferPid is the container's gofer (runsc's sandbox.Pid: a number).
	GoferPid int `json:"goferPid"`
	// BundleDir is the container's bundle, which its gofer's command
	// line names.
	BundleDir string `json:"bundleDir"`
	// CompatCgroup is {"cgroupunknown": null} unless gVisor made the
	// container a cgroup of its own ({"cgroupv1": {…}}, …: compatDirs).
	CompatCgroup map[string]json.RawMessage `json:"compatCgroup"`
	// GoferMountConfs: an upper layer of 2 (self) or 3 (anon) is a
	// filestore file gVisor's destroy removes.
	GoferMountConfs []struct {
		Upper int `json:"upper"`
	} `json:"goferMountConfs"`
	Sandbox *struct {
		ID                  string `json:"id"`
		Pid                 int    `json:"pid"`
		ControlSocketPath   string `json:"controlSocketPath"`
		OriginalOOMScoreAdj int    `json:"originalOomScoreAdj"`
	} `json:"sandbox"`
}

// methodDestroySubcontainer is gVisor's control call that stops a
// container in a sandbox and frees what the sandbox holds for it.
const methodDestroySubcontainer = "containerManager.DestroySubcontainer"

// goferWait bounds the wait for a killed gofer to exit (gVisor's: 5 s).
const goferWait = 5 * time.Second

// subStatePath is gVisor's state file of container id if it is one in
// another container's sandbox (its name is <id>_sandbox:<sandbox>.state),
// with that sandbox's id.
func subStatePath(root, id string) (path, sandbox string, ok bool) {
	matches, _ := filepath.Glob(api.SentryRoot(root).ContainerStates(id))
	if len(matches) != 1 {
		return "", "", false
	}
	name := strings.TrimSuffix(filepath.Base(matches[0]), api.StateSuffix)
	sb, found := strings.CutPrefix(name, id+"_sandbox:")
	if !found || sb == "" || sb == id {
		return "", "", false
	}
	return matches[0], sb, true
}

// endedSub reports whether container id's monitor marked it ended.
func endedSub(root, id string) bool {
	data, err := os.ReadFile(api.SentryRoot(root).MonitorEnded(id))
	return err == nil && string(data) == api.MonitorEndedMark
}

// readSub reads a container's state file at path.
func readSub(path string) (*subState, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st *subState
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if st == nil {
		return nil, fmt.Errorf("%s: empty", path)
	}
	return st, nil
}

// destroyable reports whether gvx-runtime's destroy is gVisor's whole
// destroy of container id in sandbox sb with state st.
func (st *subState) destroyable(id, sb string) bool {
	s := st.Sandbox
	if st.ID != id || st.Spec == nil || s == nil || s.ID != sb || s.ControlSocketPath == "" || !procfs.Alive(s.Pid) {
		return false
	}
	if st.Spec.Annotations[api.AnnotationPoolSandbox] != "" || hasHooks(st.Spec) {
		return false
	}
	if _, ok := compatDirs(st.CompatCgroup); !ok {
		return false // a systemd-managed cgroup of its own
	}
	for _, m := range st.GoferMountConfs {
		if m.Upper >= 2 { // self- or anon-backed: a filestore to remove
			return false
		}
	}
	return true
}

// hasHooks: gVisor's delete would run the spec's poststop hooks.
func hasHooks(spec *specs.Spec) bool {
	return spec.Hooks != nil && len(spec.Hooks.Poststop) > 0
}

// subDelete is delete [--force] of container id in a running sandbox once
// its monitor marked it ended.
func (c command) subDelete(id string) (bool, error) {
	if !endedSub(c.root, id) {
		return false, nil
	}
	state, sb, ok := subStatePath(c.root, id)
	if !ok {
		return false, nil
	}
	st, unlock, err := lockState(state)
	if err != nil || st == nil {
		return false, nil
	}
	defer unlock()
	if !st.destroyable(id, sb) {
		return false, nil
	}
	ctl, err := ctlsock.Dial(st.Sandbox.ControlSocketPath)
	if err != nil {
		return false, nil
	}
	err = ctl.Call(methodDestroySubcontainer, id, nil, nil)
	ctl.Close()
	if err != nil && procfs.Alive(st.Sandbox.Pid) {
		return false, nil // gvx-sentry's delete says why
	}
	// From here on the container is gone from its sandbox: what is left
	// is done whatever fails, and every failure reported.
	var errs []error
	if err := killGofer(st.GoferPid, st.BundleDir); err != nil {
		errs = append(errs, err)
	}
	cgroupDirs, _ := compatDirs(st.CompatCgroup)
	if err := removeCgroupDirs(cgroupDirs); err != nil {
		errs = append(errs, err)
	}
	for _, p := range []string{state, lockPathOf(state)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	r := api.SentryRoot(c.root)
	for _, p := range []string{r.OOMMarker(id), r.MonitorEnded(id), r.MonitorSocket(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := adjustOOMScore(c.root, sb, st.Sandbox.Pid, st.Sandbox.OriginalOOMScoreAdj); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return true, fmt.Errorf("delete container %s: %w", id, err)
	}
	return true, nil
}

// killGofer kills the gofer of the container with bundle, pid, and waits
// until it has exited (its zombie is its parent's — the shim, a subreaper
// — to reap). A pid that is no longer that gofer (reused once the gofer
// was reaped, perhaps by another container's) is left alone, where
// gVisor's destroy would kill it.
func killGofer(pid int, bundle string) error {
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("gofer %d: %w", pid, err)
	}
	defer unix.Close(fd)
	if !isGofer(pid, bundle) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill gofer %d: %w", pid, err)
	}
	deadline := time.Now().Add(goferWait)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("gofer %d still running %v after its SIGKILL", pid, goferWait)
		}
		n, err := unix.Poll(fds, int(left.Milliseconds())+1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("wait for gofer %d: %w", pid, err)
		}
		if n > 0 {
			return nil
		}
	}
}

// isGofer reports whether process pid runs gVisor's gofer command (the
// sandbox's binary re-executed with the "gofer" subcommand) for the
// container with bundle ("--bundle DIR", or "--bundle=DIR" once the gofer
// re-executed itself).
func isGofer(pid int, bundle string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(data), "\x00")
	if !slices.Contains(args, "gofer") {
		return false
	}
	for i, a := range args {
		if a == "--bundle="+bundle || a == "--bundle" && i+1 < len(args) && args[i+1] == bundle {
			return true
		}
	}
	return false
}

// adjustOOMScore sets the oom_score_adj of sandbox sb's process, pid, as
// gVisor does once a container of the sandbox is destroyed: the lowest
// score a container left asks for (the pod's own container aside), else
// the sandbox's original score.
func adjustOOMScore(root, sb string, pid, original int) error {
	states, _ := filepath.Glob(filepath.Join(root, "*_sandbox:"+sb+api.StateSuffix))
	if len(states) == 0 {
		return nil // the sandbox is being torn down
	}
	score, found := 0, false
	for _, p := range states {
		st, err := readLocked(p)
		if err != nil {
			return fmt.Errorf("oom_score_adj of sandbox %s: %w", sb, err)
		}
		if st == nil || st.Spec == nil || podContainer(st.Spec) || st.Spec.Process == nil || st.Spec.Process.OOMScoreAdj == nil {
			continue
		}
		if s := *st.Spec.Process.OOMScoreAdj; !found || s < score {
			score, found = s, true
		}
	}
	if !found {
		score = original
	}
	err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(score)), 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("oom_score_adj of sandbox %s: %w", sb, err)
	}
	return nil
}

// readLocked reads a container's state file under its lock (a create or
// start may be writing it); nil if the container was deleted meanwhile.
func readLocked(path string) (*subState, error) {
	st, unlock, err := lockState(path)
	if st != nil {
		unlock()
	}
	return st, err
}

// lockState takes the lock of the container whose state file is path and
// reads its state, keeping the lock for the caller to release (unlock).
// A container deleted meanwhile is a nil state, unlocked, and the lock
// file the lock made again removed.
func lockState(path string) (st *subState, unlock func(), err error) {
	lockPath := lockPathOf(path)
	unlock, err = lockFile(lockPath, goferWait)
	if err != nil {
		return nil, nil, err
	}
	st, err = readSub(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(lockPath)
			err = nil
		}
		unlock()
		return nil, nil, err
	}
	return st, unlock, nil
}

// lockPathOf is the lock file of the container whose state file is path.
func lockPathOf(state string) string {
	return strings.TrimSuffix(state, api.StateSuffix) + ".lock"
}

// podContainer: the spec is a pod's own (pause) container, which gVisor
// leaves out of the sandbox's score.
func podContainer(spec *specs.Spec) bool {
	return criContainerType(spec) == api.CRIRoleSandbox
}
