package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/ctlsock"
)

// goEnv runs gvx-pause's short calls on one P: fewer threads for the
// Sentry to make (a reset's CPU in the sandbox 28 → 22 ms, measured).
var goEnv = []string{"GOMAXPROCS=1"}

// probeTimeout bounds one run of gvx-pause's reset.
const probeTimeout = 20 * time.Second

// probeCaps are what gvx-pause's reset needs beyond the root container's
// process's own capabilities: CAP_SYS_ADMIN (hostname, mounts) and
// CAP_IPC_OWNER (SysV IPC objects of any owner).
var probeCaps = []string{"CAP_SYS_ADMIN", "CAP_IPC_OWNER"}

// Probe runs gvx-pause's reset (restore) or only its report in the
// sandbox's root container and returns the guest's state.
//
// It execs through the sandbox's control socket itself — what
// `gvx-sentry exec --cap CAP_SYS_ADMIN --cap CAP_IPC_OWNER` would ask
// (the root container's process's environment, directory, user and
// capabilities, plus those two) — instead of starting gvx-sentry, whose
// start-up alone (≈ 30 ms of CPU) was most of a reset's cost.
func (s *Sandbox) Probe(ctx context.Context, restore bool) (*api.GuestState, error) {
	if s.Pool == nil || s.Pool.Pause == "" {
		return nil, fmt.Errorf("sandbox %s: not a pool sandbox with gvx-pause", s.ID)
	}
	argv := []string{s.Pool.Pause, api.PauseResetCommand}
	if b := s.Baseline; b != nil {
		argv = append(argv, "--hostname", b.Guest.Hostname, "--domainname", b.Guest.Domainname)
	}
	argv = append(argv, fmt.Sprintf("--restore=%t", restore))
	out, err := s.execRoot(ctx, argv, probeCaps, probeTimeout)
	if err != nil {
		return nil, fmt.Errorf("probe sandbox %s: %w", s.ID, err)
	}
	var st api.GuestState
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("probe sandbox %s: report %q: %w", s.ID, out, err)
	}
	return &st, nil
}

// SetUTS gives the sandbox — every container in it: they share the root
// container's UTS namespace — hostname and domainname, by gvx-pause's
// uts exec'd in its root container with CAP_SYS_ADMIN (a reset puts the
// pool's back).
func (s *Sandbox) SetUTS(ctx context.Context, hostname, domainname string) error {
	if s.Pool == nil || s.Pool.Pause == "" {
		return fmt.Errorf("sandbox %s: not a pool sandbox with gvx-pause", s.ID)
	}
	argv := []string{s.Pool.Pause, api.PauseUTSCommand, "--hostname", hostname, "--domainname", domainname}
	if _, err := s.execRoot(ctx, argv, []string{"CAP_SYS_ADMIN"}, probeTimeout); err != nil {
		return fmt.Errorf("hostname %q for sandbox %s: %w", hostname, s.ID, err)
	}
	return nil
}

// execRoot runs argv in the sandbox's root container as its process runs
// (environment, directory, user, capabilities, with extraCaps added to
// its bounding, effective and permitted sets, as runsc's exec --cap does),
// through the control socket, and returns its standard output. A process
// that does not end within timeout (or ctx) is killed.
func (s *Sandbox) execRoot(ctx context.Context, argv, extraCaps []string, timeout time.Duration) ([]byte, error) {
	r, err := s.RootRunner()
	if err != nil {
		return nil, err
	}
	return r.run(ctx, argv, extraCaps, timeout)
}

// run is execRoot on r.
func (r *RootRunner) run(ctx context.Context, argv, extraCaps []string, timeout time.Duration) ([]byte, error) {
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer null.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return nil, err
	}
	defer errR.Close()
	p, err := r.Start(RootExec{Argv: argv, Env: goEnv, ExtraCaps: extraCaps, Stdio: []*os.File{null, outW, errW}})
	// The sandbox holds its own copies now: the pipes end when the
	// process (and anything it left holding them) is gone.
	outW.Close()
	errW.Close()
	if err != nil {
		return nil, err
	}
	defer p.Close()
	var stdout, stderr []byte
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); stdout, _ = io.ReadAll(io.LimitReader(outR, 1<<20)) }()
	go func() { defer wg.Done(); stderr, _ = io.ReadAll(io.LimitReader(errR, 64<<10)) }()

	type waited struct {
		status uint32
		err    error
	}
	done := make(chan waited, 1)
	go func() {
		st, err := p.Wait()
		done <- waited{uint32(st), err}
	}()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var w waited
	select {
	case w = <-done:
	case <-tctx.Done():
		_ = p.Signal(unix.SIGKILL)
		select {
		case w = <-done:
		case <-time.After(5 * time.Second):
		}
		p.Close() // ends a wait still blocked, and the readers with the process
		wg.Wait()
		return nil, fmt.Errorf("%s did not end within %s: %w (stderr: %s)", argv[0], timeout, tctx.Err(), strings.TrimSpace(string(stderr)))
	}
	wg.Wait()
	if w.err != nil {
		return nil, w.err
	}
	if code := api.ExitCode(syscall.WaitStatus(w.status)); code != 0 {
		return nil, fmt.Errorf("%s: exit status %d: %s", argv[0], code, strings.TrimSpace(string(stderr)))
	}
	return stdout, nil
}

// rootExecArgs are the exec arguments of argv in a container whose spec
// is spec, as runsc's `exec --cap` builds them.
func rootExecArgs(spec *specs.Spec, argv, extraCaps []string, enableRaw bool) (*ctlsock.ExecArgs, error) {
	p := spec.Process
	if p == nil {
		return nil, errors.New("the root container's spec has no process")
	}
	var names ctlsock.CapabilityNames
	if c := p.Capabilities; c != nil {
		names = ctlsock.CapabilityNames{Bounding: c.Bounding, Effective: c.Effective, Inheritable: c.Inheritable,
			Permitted: c.Permitted, Ambient: c.Ambient}
	}
	for _, c := range extraCaps {
		names.Bounding = append(names.Bounding, c)
		names.Effective = append(names.Effective, c)
		names.Permitted = append(names.Permitted, c)
		// As runc and runsc: inheritable untouched, ambient only where
		// the spec already has inheritable ones.
		if names.Inheritable != nil {
			names.Ambient = append(names.Ambient, c)
		}
	}
	caps, err := ctlsock.CapabilitySets(names, enableRaw)
	if err != nil {
		return nil, err
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	return &ctlsock.ExecArgs{
		Argv:             argv,
		Envv:             p.Env,
		WorkingDirectory: cwd,
		KUID:             p.User.UID,
		KGID:             p.User.GID,
		ExtraKGIDs:       append([]uint32{}, p.User.AdditionalGids...),
		Capabilities:     caps,
		NoNewPrivileges:  p.NoNewPrivileges,
		SupportTTYs:      true,
	}, nil
}

// ControlSocket reads where a sandbox serves its control RPCs from
// gVisor's state file of its root container (state).
func ControlSocket(state string) (string, error) {
	data, err := os.ReadFile(state)
	if err != nil {
		return "", fmt.Errorf("sandbox state: %w", err)
	}
	var st struct {
		Sandbox struct {
			ControlSocketPath string `json:"controlSocketPath"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return "", fmt.Errorf("sandbox state %s: %w", state, err)
	}
	if st.Sandbox.ControlSocketPath == "" {
		return "", fmt.Errorf("sandbox state %s: no control socket", state)
	}
	return st.Sandbox.ControlSocketPath, nil
}
