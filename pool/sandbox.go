// Package pool keeps gVisor sandboxes booted ahead of demand (a warm pool)
// and hands each to exactly one task.
//
// `gvx pool serve` (Server) boots sandboxes whose root container runs
// gvx-pause, keeps Size of them ready, and answers claims on a unix socket.
// The shim claims one at task Create (Claim), creates the task as a
// container inside it (gvx-sentry's sub-container create, whose monitor
// process stands for the task's init) and destroys the whole sandbox when
// the task is deleted: a sandbox never serves a second task. A claimed
// sandbox belongs to its task; the server only owns the ready ones.
//
// A task can adopt a pool sandbox only if the sandbox was booted the way
// the task's own would be (the same gvx-sentry, flags, user namespace and
// resources: Class) and the task needs nothing fixed at boot that the pool
// could not know (a given network namespace, hooks, volumes, docker mode).
package pool

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/internal/cgroups"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/oci"
)

// FlagsEnv must match gvx-sentry's launcher.FlagsEnv.
const FlagsEnv = "GVX_SENTRY_FLAGS"

// stateFile in a sandbox's directory describes it (Sandbox as JSON).
const stateFile = "sandbox.json"

// claimedFile in a sandbox's directory marks it as a task's.
const claimedFile = "claimed"

// pauseInGuest is where the pause binary sits in the root container.
const pauseInGuest = "/pause"

// Sandbox is one booted pool sandbox.
type Sandbox struct {
	// ID is the sandbox's (and its root container's) id.
	ID string `json:"id"`
	// Dir holds everything of the sandbox on the host: bundle/, root/.
	Dir string `json:"dir"`
	// Pid is the host pid of the sandbox (the Sentry).
	Pid int `json:"pid"`
	// Cgroup is the cgroup path of the sandbox.
	Cgroup string `json:"cgroup"`
	// Class is the class it was booted for.
	Class string `json:"class"`
	// Flags are the gvx-sentry global flags it was booted with.
	Flags string `json:"flags"`
	// Pool is the pool directory and Socket the server's socket, so that
	// whoever destroys the last sandbox after the server stopped removes
	// the pool's directory too.
	Pool   string `json:"pool,omitempty"`
	Socket string `json:"socket,omitempty"`
	// Image is the image its root container runs on (an image pool's),
	// Layers its layer directories (Layers), topmost first.
	Image  string   `json:"image,omitempty"`
	Layers []string `json:"layers,omitempty"`
}

// Root is the sandbox's gvx-sentry state root.
func (s *Sandbox) Root() string { return filepath.Join(s.Dir, "root") }

// Bundle is the bundle of its root container.
func (s *Sandbox) Bundle() string { return filepath.Join(s.Dir, "bundle") }

// Alive reports whether the sandbox process still runs.
func (s *Sandbox) Alive() bool { return procfs.Alive(s.Pid) }

// Save writes s as JSON to path.
func (s *Sandbox) Save(path string) error {
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("save pool sandbox %s: %w", s.ID, err)
	}
	return os.Rename(tmp, path)
}

// LoadSandbox reads a Sandbox saved at path.
func LoadSandbox(path string) (*Sandbox, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Sandbox
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("pool sandbox record %s: %w", path, err)
	}
	if s.ID == "" || !filepath.IsAbs(s.Dir) {
		return nil, fmt.Errorf("pool sandbox record %s: no id or directory", path)
	}
	return &s, nil
}

// Destroy stops the sandbox and removes everything it had on the host:
// processes (killed through its cgroup, else gvx-sentry delete --force),
// the null-netns pin, its directory and its cgroup.
func (s *Sandbox) Destroy(ctx context.Context, sentry string) error {
	var errs []error
	t0 := time.Now()
	var tKill time.Duration
	defer func() {
		log.G(ctx).Debugf("gvx pool: destroy %s: %s (processes gone after %s)", s.ID, time.Since(t0), tKill)
	}()
	if s.Pid <= 0 {
		// Boot did not get as far as recording it; the pid file may have.
		if data, err := os.ReadFile(filepath.Join(s.Dir, "pid")); err == nil {
			s.Pid, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		}
	}
	// The sandbox's cgroup holds exactly its processes (Sentry, stubs,
	// gofers, a container's monitor): killing them is all gVisor's forced
	// delete would do that the rest of Destroy does not, without a
	// gvx-sentry start-up. Even a sandbox already gone (a task's delete
	// destroyed it, or it ended with its task's process) may still have
	// processes going away in it, and it must be empty to be removed.
	if n, err := cgroups.Kill(s.Cgroup, 5*time.Second); err != nil || (n == 0 && s.Alive()) {
		log.G(ctx).WithError(err).Debugf("gvx pool: destroy %s: %d processes in its cgroup; deleting it through gvx-sentry", s.ID, n)
	}
	if _, err := os.Stat(s.Root()); err == nil && s.Alive() {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		cmd := exec.CommandContext(cctx, sentry, "--root", s.Root(), "delete", "--force", s.ID)
		cmd.Env = append(os.Environ(), FlagsEnv+"="+s.Flags)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil && s.Alive() {
			errs = append(errs, fmt.Errorf("delete pool sandbox %s: %w: %s", s.ID, err, strings.TrimSpace(string(out))))
			_ = unix.Kill(s.Pid, unix.SIGKILL)
		}
	}
	tKill = time.Since(t0)
	// Wait (briefly) for the processes to go so their cgroup can go too.
	for i := 0; i < 100 && s.Alive(); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	for unix.Unmount(filepath.Join(s.Root(), "null-netns"), unix.MNT_DETACH) == nil {
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove pool sandbox %s: %w", s.ID, err))
	}
	cgroups.Remove(ctx, s.Cgroup)
	removeEmptyCgroupParent(s.Cgroup)
	if s.Pool != "" && !serving(s.Socket) {
		removePoolDir(s.Pool)
	}
	return errors.Join(errs...)
}

// serving reports whether a pool server answers on socket.
func serving(socket string) bool {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// removePoolDir removes the pool directory (the root containers' rootfs
// included) once no sandbox is left in it.
func removePoolDir(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), idPrefix) {
			return
		}
	}
	UnmountImage(filepath.Join(dir, imageDir))
	_ = os.RemoveAll(filepath.Join(dir, rootfsDir))
	_ = os.Remove(dir)
	_ = os.Remove(filepath.Dir(dir)) // the pools' directory, once empty
}

// removeEmptyCgroupParent removes the pool's parent cgroup once no sandbox
// uses it: a plain rmdir per hierarchy, which the kernel refuses while any
// child cgroup exists (no recursive walk over the other sandboxes).
func removeEmptyCgroupParent(path string) {
	parent := filepath.Dir(path)
	if path == "" || parent == "/" || parent == "." {
		return
	}
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", parent))
	for _, d := range append(dirs, filepath.Join("/sys/fs/cgroup", parent)) {
		_ = os.Remove(d)
	}
}

// Class identifies how a sandbox is booted: two configurations with the
// same class boot interchangeable sandboxes.
func Class(cfg config.Config, sentry string) string {
	res, _ := json.Marshal(BootResources(cfg))
	flags := BootFlags(cfg)
	sort.Strings(flags)
	h := sha256.New()
	fmt.Fprintf(h, "sentry=%s\nflags=%s\nuserns=%d:%d:%d\nresources=%s\n",
		sentry, strings.Join(flags, " "), cfg.UserNS.HostUID, cfg.UserNS.HostGID, cfg.UserNS.Size, res)
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// BootFlags are the gvx-sentry global flags pool sandboxes boot with under
// cfg: its flags, and docker mode's when [docker] enabled (a docker pool
// serves docker-mode tasks only, a plain pool plain ones).
func BootFlags(cfg config.Config) []string {
	flags := append([]string(nil), cfg.SentryFlagList()...)
	if cfg.Docker.Enabled {
		flags = append(flags, oci.DockerSentryFlags...)
	}
	return flags
}

// rootSpec is the spec of a pool sandbox's root container: gvx-pause on a
// read-only root filesystem, its own (empty) network namespace.
func rootSpec(cfg config.Config, rootfs, cgroup string) *specs.Spec {
	return &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args:            []string{pauseInGuest},
			Cwd:             "/",
			Env:             []string{"PATH=/"},
			NoNewPrivileges: true,
		},
		Root:     &specs.Root{Path: rootfs, Readonly: true},
		Hostname: "gvx-pool",
		Linux: &specs.Linux{
			// Never nil: runsc's update of the root container (on behalf
			// of a task started in it) dereferences the spec's resources.
			Resources:   &specs.LinuxResources{},
			CgroupsPath: cgroup,
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.MountNamespace}, {Type: specs.NetworkNamespace},
			},
		},
	}
}

// PauseInImage is where the pause binary is in an image pool's root
// container.
const PauseInImage = "/.gvx-pause"

// imageRootSpec is the spec of an image pool sandbox's root container:
// gvx-pause (added to the image's mount, see openImage) on the image, with
// the mounts of containerd's default spec, so that a task of the image that
// asks for nothing else can start as a process in it.
func imageRootSpec(cfg config.Config, image, cgroup string) *specs.Spec {
	s := rootSpec(cfg, image, cgroup)
	s.Root.Readonly = false // writes go to the sandbox's memory
	s.Process.Args = []string{PauseInImage}
	s.Mounts = StandardMounts()
	return s
}

// StandardMounts are the mounts of containerd's default spec (ctr and the
// containerd client give every container these).
func StandardMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
	}
}

// BootResources are the sandbox-level resources pool sandboxes get under
// cfg (its [resources] defaults); only tasks asking for the same can adopt
// one.
func BootResources(cfg config.Config) oci.Resources {
	s := rootSpec(cfg, "/", "")
	_, _ = oci.Prepare(s, cfg)
	return oci.SandboxResources(s.Linux.Resources)
}
