package fastexec

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// Exec is runsc's exec with a faster detached mode.
type Exec struct {
	cmd.Exec
}

// Execute implements subcommands.Command.
func (ex *Exec) Execute(ctx context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if !fast(f) {
		if err := internalPidFile(f); err != nil {
			return util.Errorf("exec: %v", err)
		}
		return ex.Exec.Execute(ctx, f, args...)
	}
	conf := args[0].(*config.Config)
	id := f.Arg(0)
	c, err := container.Load(conf.RootDir, container.FullID{ContainerID: id}, container.LoadOpts{})
	if err != nil {
		return util.Errorf("loading container: %v", err)
	}
	e, err := processFile(argv.Flag(f, "process"), c.Spec.Process, conf.EnableRaw)
	if err != nil {
		return util.Errorf("parsing process spec: %v", err)
	}
	if e.StdioIsPty {
		if err := internalPidFile(f); err != nil {
			return util.Errorf("exec: %v", err)
		}
		return ex.Exec.Execute(ctx, f, args...)
	}
	waiter, pipe, err := spawnWaiter(c)
	if err != nil {
		return util.Errorf("exec: %v", err)
	}
	e.FilePayload = control.NewFilePayload(map[int]*os.File{0: os.Stdin, 1: os.Stdout, 2: os.Stderr}, nil)
	pid, err := c.Execute(conf, e)
	if err != nil {
		pipe.Close()
		_ = waiter.Kill()
		_, _ = waiter.Wait()
		return util.Errorf("executing processes for container: %v", err)
	}
	_, werr := fmt.Fprintf(pipe, "%d\n", pid)
	pipe.Close()
	if werr == nil {
		werr = bundle.WriteExecPidFiles(argv.Flag(f, "pid-file"), pid, waiter.Pid)
	}
	if werr != nil {
		_ = c.SignalProcess(unix.SIGKILL, pid)
		_ = waiter.Kill()
		return util.Errorf("exec: %v", werr)
	}
	_ = waiter.Release()
	return subcommands.ExitSuccess
}

// internalPidFile has runsc's exec write the guest pid of a detached exec
// beside its pid file (api.ExecGuestPidSuffix), as the fast path does:
// runsc's detached exec re-executes this command line without --detach,
// so the flag goes into os.Args as well as into f.
func internalPidFile(f *flag.FlagSet) error {
	pidFile := argv.Flag(f, "pid-file")
	if argv.Flag(f, "detach") != "true" || pidFile == "" || argv.Flag(f, "internal-pid-file") != "" {
		return nil
	}
	c, ok := argv.Parse(os.Args)
	if !ok || c.Sub != "exec" {
		return fmt.Errorf("cannot find the exec subcommand in %q", os.Args)
	}
	arg := "--internal-pid-file=" + pidFile + api.ExecGuestPidSuffix
	if err := f.Set("internal-pid-file", pidFile+api.ExecGuestPidSuffix); err != nil {
		return err
	}
	os.Args = append(append(append(c.Globals, c.Sub), arg), c.Rest...)
	return nil
}

// fast reports whether this exec can take the fast path.
func fast(f *flag.FlagSet) bool {
	if argv.Flag(f, "detach") != "true" || argv.Flag(f, "process") == "" || argv.Flag(f, "pid-file") == "" || f.NArg() != 1 {
		return false
	}
	// Anything else set on the command line (a terminal, extra fds, the
	// process given by flags) goes through runsc's own exec.
	set := false
	f.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "detach", "process", "pid-file":
		default:
			set = true
		}
	})
	return !set
}

// processFile converts the process file at path into gVisor's exec
// arguments (ExecArgs).
func processFile(path string, containerProc *specs.Process, enableRaw bool) (*control.ExecArgs, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("process file: %w", err)
	}
	var p specs.Process
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("process file %s: %w", path, err)
	}
	e, err := ExecArgs(&p, containerProc, enableRaw)
	if err != nil {
		return nil, fmt.Errorf("process file %s: %w", path, err)
	}
	return e, nil
}

// ExecArgs converts an OCI process into gVisor's exec arguments;
// capabilities default to those of containerProc (the container's own
// process; may be nil).
func ExecArgs(p *specs.Process, containerProc *specs.Process, enableRaw bool) (*control.ExecArgs, error) {
	switch {
	case p == nil || len(p.Args) == 0:
		return nil, fmt.Errorf("args must not be empty")
	case !strings.HasPrefix(p.Cwd, "/"):
		return nil, fmt.Errorf("cwd %q must be an absolute path", p.Cwd)
	}
	capSet := p.Capabilities
	if capSet == nil && containerProc != nil {
		capSet = containerProc.Capabilities
	}
	caps, err := specutils.Capabilities(enableRaw, capSet)
	if err != nil {
		return nil, fmt.Errorf("capabilities: %w", err)
	}
	gids := make([]auth.KGID, 0, len(p.User.AdditionalGids))
	for _, g := range p.User.AdditionalGids {
		gids = append(gids, auth.KGID(g))
	}
	return &control.ExecArgs{
		Argv:             p.Args,
		Envv:             p.Env,
		WorkingDirectory: p.Cwd,
		KUID:             auth.KUID(p.User.UID),
		KGID:             auth.KGID(p.User.GID),
		ExtraKGIDs:       gids,
		Capabilities:     caps,
		StdioIsPty:       p.Terminal,
		NoNewPrivileges:  p.NoNewPrivileges,
		SupportTTYs:      true,
	}, nil
}

// spawnWaiter starts the waiter for container c with this process's
// global flags; it returns the process and the pipe to send it the pid.
// The waiter gets two control connections opened here (as root: the
// control socket is root's) and runs as the sandbox's host uid and gid
// from its start (hostcreds.Start).
func spawnWaiter(c *container.Container) (*os.Process, *os.File, error) {
	conns, err := sandboxctl.ConnectN(c, 2)
	if err != nil {
		return nil, nil, err
	}
	files := make([]*os.File, 0, 3)
	defer func() {
		for _, f := range files {
			f.Close()
		}
		for _, conn := range conns {
			if conn != nil {
				conn.Close()
			}
		}
	}()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	files = append(files, r)
	for i, conn := range conns {
		// Released, not closed: urpc's Close shuts the socket down, for
		// the waiter too.
		fd, err := conn.Socket.Release()
		conns[i] = nil
		if err != nil {
			w.Close()
			return nil, nil, fmt.Errorf("waiter's control connection: %w", err)
		}
		files = append(files, os.NewFile(uintptr(fd), "sandbox control"))
	}
	cmd := exec.Command("/proc/self/exe", WaitCommand, c.ID)
	cmd.Args[0] = os.Args[0]
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	uid, gid := sandboxctl.HostRoot(c.Spec)
	if err := hostcreds.Start(cmd, uid, gid); err != nil {
		w.Close()
		return nil, nil, fmt.Errorf("start waiter: %w", err)
	}
	return cmd.Process, w, nil
}
