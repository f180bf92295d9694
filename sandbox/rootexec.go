package sandbox

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/ctlsock"
	"github.com/gvxrun/gvx/sandbox/control"
)

// RootRunner starts processes in a sandbox's root container through its
// control socket, as its own process runs (environment, directory, user,
// capabilities): no host process is started for them. It reads the
// root container's spec and control socket once.
type RootRunner struct {
	id     string
	sock   string
	spec   specs.Spec
	netRaw bool
}

// RootRunner returns a runner of processes in s's root container.
func (s *Sandbox) RootRunner() (*RootRunner, error) {
	r := &RootRunner{id: s.ID, netRaw: strings.Contains(s.Flags, "--net-raw")}
	if err := api.ReadSpec(s.Bundle(), &r.spec); err != nil {
		return nil, err
	}
	sock, err := ControlSocket(s.Root.SandboxState(s.ID))
	if err != nil {
		return nil, err
	}
	r.sock = sock
	return r, nil
}

// RootExec is a process for RootRunner.Start.
type RootExec struct {
	Argv []string
	// Env (K=V) overrides the root process's variables of the same name
	// and adds the others.
	Env []string
	// Dir is the working directory (default the root process's).
	Dir string
	// User, if set, replaces the root process's uid, gid and
	// additional gids.
	User *specs.User
	// ExtraCaps are added to the root process's bounding, effective and
	// permitted capabilities (as runsc's exec --cap).
	ExtraCaps []string
	// Caps, if not nil, replace the root process's capabilities: the
	// bounding, effective and permitted sets (ExtraCaps is then ignored).
	Caps []string
	// Stdio become the process's descriptors 0, 1, 2, … (the sandbox
	// keeps copies: close yours once Start returns).
	Stdio []*os.File
	// TTY says Stdio's first three are one host terminal (a pty's
	// replica): the process gets it as its controlling terminal.
	TTY bool
}

// RootProcess is a process RootRunner.Start started.
type RootProcess struct {
	r   *RootRunner
	ctl *control.Client
	pid int32
}

// Start starts e in the root container.
func (r *RootRunner) Start(e RootExec) (*RootProcess, error) {
	spec := &r.spec
	extra := e.ExtraCaps
	if e.Caps != nil {
		p := *spec.Process
		p.Capabilities = &specs.LinuxCapabilities{Bounding: e.Caps, Effective: e.Caps, Permitted: e.Caps}
		spec = &specs.Spec{Process: &p}
		extra = nil
	}
	args, err := rootExecArgs(spec, e.Argv, extra, r.netRaw)
	if err != nil {
		return nil, err
	}
	args.ContainerID = r.id
	if len(e.Env) > 0 {
		args.Envv = mergeEnv(args.Envv, e.Env)
	}
	if e.Dir != "" {
		args.WorkingDirectory = e.Dir
	}
	args.StdioIsPty = e.TTY
	if u := e.User; u != nil {
		args.KUID, args.KGID, args.ExtraKGIDs = u.UID, u.GID, slices.Clone(u.AdditionalGids)
	}
	ctl, err := control.Dial(r.sock)
	if err != nil {
		return nil, fmt.Errorf("control socket of %s: %w", r.id, err)
	}
	pid, err := ctl.ExecuteAsync(args, e.Stdio...)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("exec %s in %s: %w", e.Argv[0], r.id, err)
	}
	return &RootProcess{r: r, ctl: ctl, pid: pid}, nil
}

// Pid is the process's pid in the sandbox.
func (p *RootProcess) Pid() int32 { return p.pid }

// Wait waits for the process to exit (Close ends a Wait blocked on a
// process that does not).
func (p *RootProcess) Wait() (syscall.WaitStatus, error) {
	st, err := p.ctl.WaitPID(p.r.id, p.pid)
	if err != nil {
		return 0, fmt.Errorf("wait for pid %d in %s: %w", p.pid, p.r.id, err)
	}
	return syscall.WaitStatus(st), nil
}

// Signal sends sig to the process, over a connection of its own (Wait
// holds the process's).
func (p *RootProcess) Signal(sig unix.Signal) error {
	k, err := control.Dial(p.r.sock)
	if err != nil {
		return err
	}
	defer k.Close()
	return k.Signal(p.r.id, p.pid, int(sig), ctlsock.DeliverToProcess)
}

// SignalGroup sends sig to the process's process group: gVisor starts
// each exec'd process as the leader of a session and group of its own,
// which what it starts stays in unless it leaves (setsid, setpgid).
func (p *RootProcess) SignalGroup(sig unix.Signal) error {
	k, err := control.Dial(p.r.sock)
	if err != nil {
		return err
	}
	defer k.Close()
	return k.Signal(p.r.id, p.pid, int(sig), ctlsock.DeliverToProcessGroup)
}

// Close closes the process's control connection.
func (p *RootProcess) Close() error { return p.ctl.Close() }

// Pause freezes every process of the sandbox (the whole of it: its
// kernel stops); Resume thaws it. Pauses nest: the caller pairs them
// (gVisor's kernel panics at a Resume with no Pause to undo).
func (r *RootRunner) Pause() error { return r.call((*control.Client).Pause) }

// Resume thaws a sandbox Pause froze.
func (r *RootRunner) Resume() error { return r.call((*control.Client).Resume) }

// call runs f on a control connection of its own.
func (r *RootRunner) call(f func(*control.Client) error) error {
	c, err := control.Dial(r.sock)
	if err != nil {
		return fmt.Errorf("control socket of %s: %w", r.id, err)
	}
	defer c.Close()
	if err := f(c); err != nil {
		return fmt.Errorf("sandbox %s: %w", r.id, err)
	}
	return nil
}

// mergeEnv is base with add's variables set (replacing those of the same
// name).
func mergeEnv(base, add []string) []string {
	out := slices.Clone(base)
	for _, kv := range add {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(b string) bool { bk, _, _ := strings.Cut(b, "="); return bk == k })
		out = append(out, kv)
	}
	return out
}
