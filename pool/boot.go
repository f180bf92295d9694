package pool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/log"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/pool/bootspec"
	"github.com/gvxrun/gvx/sandbox"
)

// boot creates and starts one sandbox.
func (s *Server) boot(ctx context.Context) (_ *sandbox.Sandbox, retErr error) {
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	sb := s.newSandbox(api.PoolSandboxPrefix + hex.EncodeToString(rnd[:]))
	// A task's destroy removes the pool directory when it was the last
	// sandbox and no server was listening (this one, starting up).
	if _, err := os.Stat(s.pauseCopy()); err != nil {
		if err := os.MkdirAll(string(s.cfg.PoolDir()), 0o711); err != nil {
			return nil, fmt.Errorf("create pool dir: %w", err)
		}
		if err := s.installRootfs(); err != nil {
			return nil, err
		}
	}
	defer func() {
		if retErr != nil {
			s.dropAgent(sb.ID)
			_ = sb.Destroy(context.WithoutCancel(ctx), s.sentry)
		}
	}()
	for _, d := range []string{sb.Dir, sb.Bundle()} {
		if err := os.Mkdir(d, 0o711); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	spec := bootspec.RootSpec(s.cfg.PoolDir().Rootfs(), sb.Cgroup)
	if s.image != nil {
		spec = bootspec.ImageRootSpec(s.image.Dir(), sb.Cgroup)
		sb.Pool.Image, sb.Pool.Layers, sb.Pool.Pause = s.image.Ref(), s.image.Layers(), bootspec.PauseInImage
	}
	if _, err := oci.Prepare(spec, s.cfg); err != nil {
		return nil, err
	}
	var agentEnd *os.File
	if s.cfg.Pool.Lease {
		// gvx-pause resets the sandbox itself, told through its
		// standard input (api.PauseAgentArg): mounts and the hostname,
		// SysV IPC objects of any owner, the lease's processes.
		a, end, err := newAgent()
		if err != nil {
			return nil, err
		}
		defer end.Close()
		s.mu.Lock()
		s.agents[sb.ID] = a
		s.mu.Unlock()
		agentEnd = end
		spec.Process.Args = append(spec.Process.Args, api.PauseAgentArg)
		// And the file capabilities a lease root's overlay works with:
		// gVisor's overlay does its copy-ups and creates (a file made,
		// then given to its creator) with the credentials of whoever
		// mounted it, gvx-pause — without these a non-root command
		// could write nothing. They are the guest root's, which the
		// lease's commands have too (leaseCaps).
		caps := []string{"CAP_SYS_ADMIN", "CAP_IPC_OWNER", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID"}
		spec.Process.Capabilities = &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps}
	}
	if s.cfg.Network == api.NetworkNAT {
		// gvx-sentry gives the sandbox its NAT at create, with the
		// config's policy; the tasks that adopt it share it (each with
		// its own resolv.conf: the pause container has no /etc).
		nat, err := oci.DefaultNAT(s.cfg.NAT)
		if err != nil {
			return nil, err
		}
		if spec.Annotations == nil {
			spec.Annotations = map[string]string{}
		}
		spec.Annotations[api.AnnotationNAT] = nat
	}
	if s.hook != "" {
		oci.AddCreateRuntimeHook(spec, s.hook, api.HookLoopback)
	}
	if err := oci.WriteSpec(sb.Bundle(), spec); err != nil {
		return nil, err
	}
	if err := s.run(ctx, sb, agentEnd, "create", "--bundle", sb.Bundle(), "--pid-file", sb.PidFile, sb.ID); err != nil {
		return nil, err
	}
	if err := sb.ReadPid(); err != nil {
		return nil, err
	}
	if err := s.run(ctx, sb, nil, "start", sb.ID); err != nil {
		return nil, err
	}
	// Booted: the sandbox runs at normal priority from now on.
	reniceTree(sb.Pid, 0)
	if err := sb.Save(api.SandboxDir(sb.Dir).Record()); err != nil {
		return nil, err
	}
	if s.cfg.Pool.Reset || s.cfg.Pool.Lease {
		// What a reset brings it back to (without one it is never reset).
		if err := sb.RecordBaseline(context.WithoutCancel(ctx)); err != nil {
			if s.cfg.Pool.Lease {
				return nil, err
			}
			log.G(ctx).WithError(err).Warnf("gvx pool: %s will not be reset", sb.ID)
		} else if err := sb.Save(api.SandboxDir(sb.Dir).Record()); err != nil {
			return nil, err
		}
	}
	if s.cfg.Pool.Lease {
		// The first lease's root.
		if _, err := s.resetLease(context.WithoutCancel(ctx), sb); err != nil {
			return nil, err
		}
	}
	return sb, nil
}

// run runs gvx-sentry against sb's root, booting at bootNice, with stdin
// (nil: none) as its standard input.
func (s *Server) run(ctx context.Context, sb *sandbox.Sandbox, stdin *os.File, args ...string) error {
	return sb.RunWith(ctx, func(cmd *exec.Cmd) error {
		if stdin != nil {
			cmd.Stdin = stdin
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		// Boot in the background: at the lowest CPU priority, so that a
		// refill never slows the tasks running (or being adopted) now.
		_ = unix.Setpriority(unix.PRIO_PROCESS, cmd.Process.Pid, bootNice)
		return cmd.Wait()
	}, s.sentry, time.Minute, args...)
}

// resetLease resets a lease pool's sandbox through its agent.
func (s *Server) resetLease(ctx context.Context, sb *sandbox.Sandbox) (*api.GuestState, error) {
	var host, domain string
	if b := sb.Baseline; b != nil {
		host, domain = b.Guest.Hostname, b.Guest.Domainname
	}
	req := api.PauseAgentRequest{Hostname: host, Domainname: domain, RootBytes: s.cfg.Resources.RootfsBytes}
	if s.cfg.Network == api.NetworkNAT {
		// The guest's resolver is the NAT's (a task's is written into
		// its root filesystem the same way: the shim's inlineResolvConf).
		req.Files = map[string]string{"etc/resolv.conf": string(oci.ResolvConf())}
	}
	st, ok, err := s.agentReset(sb.ID, req)
	if !ok {
		return nil, fmt.Errorf("lease pool sandbox %s has no reset agent", sb.ID)
	}
	if err == nil && len(st.Errors) > 0 {
		err = fmt.Errorf("reset agent of %s: %s", sb.ID, strings.Join(st.Errors, "; "))
	}
	return st, err
}

// bootNice is the CPU niceness sandboxes boot at.
const bootNice = 19

// reniceTree sets the niceness of every thread of pid and of its
// descendants (the Sentry and its stub processes).
func reniceTree(pid, nice int) {
	for _, tid := range procfs.Threads(pid) {
		_ = unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, tid))
		for _, c := range strings.Fields(string(data)) {
			if child, err := strconv.Atoi(c); err == nil {
				reniceTree(child, nice)
			}
		}
	}
}

// installRootfs writes the root containers' root filesystem: a directory
// with gvx-pause, readable by the sandboxes' unprivileged uid.
func (s *Server) installRootfs() error {
	if err := os.MkdirAll(s.cfg.PoolDir().Rootfs(), 0o755); err != nil {
		return fmt.Errorf("create pool rootfs: %w", err)
	}
	return bootspec.InstallPause(s.pause, s.cfg.PoolDir().Rootfs())
}

// pauseCopy is gvx-pause in the pool's root filesystem.
func (s *Server) pauseCopy() string {
	return filepath.Join(s.cfg.PoolDir().Rootfs(), strings.TrimPrefix(bootspec.PauseInGuest, "/"))
}

// bootWait bounds how long a new server waits for the gvx-sentry of a
// sandbox its predecessor was booting (each boot step has a minute).
const bootWait = 2 * time.Minute

// waitBooters waits, at most max, until no process runs gvx-sentry
// against sandbox root (a command line with "--root <root>", as
// sandbox.Command makes it).
func waitBooters(ctx context.Context, root api.SentryRoot, max time.Duration) {
	deadline := time.Now().Add(max)
	for {
		pids := booters(string(root))
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			log.G(ctx).Warnf("gvx pool: gvx-sentry %v still runs against %s after %s; removing the sandbox anyway", pids, root, max)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// booters lists the processes whose command line has "--root root".
func booters(root string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "--root" && args[i+1] == root {
				if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}
