// Package natsandbox gives a sandbox gvx's userspace NAT (network = "nat").
//
// Create is runsc's create of a sandbox that asks for a NAT (the spec's
// api.AnnotationNAT): first the host side of its published ports is bound
// (so that a port in use fails the create before any sandbox exists), then
// gVisor creates the sandbox with --network=none, then Create makes a unix
// datagram socketpair, starts the NAT process (the gvx-nat binary,
// package natproc) on one end and hands the other to the Sentry as eth0
// (containerManager.SetNetworkArgs, which gVisor applies when the sandbox
// starts). See docs/network.md.
package natsandbox

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/google/subcommands"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/cmd"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/argv"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/nat"
	"github.com/gvxrun/gvx/sentry/natproc"
	"github.com/gvxrun/gvx/sentry/sandboxctl"
)

// Wants reports whether spec asks for a NAT.
func Wants(spec *specs.Spec) bool {
	_, ok := spec.Annotations[api.AnnotationNAT]
	return ok
}

// Create is runsc's create of a sandbox with a NAT.
type Create struct {
	cmd.Create
}

// Execute implements subcommands.Command.
func (c *Create) Execute(ctx context.Context, f *flag.FlagSet, args ...any) subcommands.ExitStatus {
	if f.NArg() != 1 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	conf := args[0].(*config.Config)
	id, spec, err := c.FetchSpec(conf, f)
	if err != nil {
		return util.Errorf("reading spec: %v", err)
	}
	cfg, listeners, err := listen(conf, id, spec)
	if err != nil {
		return util.Errorf("%v", err)
	}
	closeAll := func(remove bool) {
		for _, l := range listeners {
			l.Close()
		}
		if remove {
			RemoveSockets(cfg)
		}
	}
	if st := c.Create.Execute(ctx, f, args...); st != subcommands.ExitSuccess {
		closeAll(true)
		return st
	}
	err = attach(conf, id, spec, cfg, listeners)
	closeAll(err != nil)
	if err != nil {
		if cont, lerr := container.Load(conf.RootDir, container.FullID{ContainerID: id}, container.LoadOpts{SkipCheck: true}); lerr == nil {
			_ = cont.Destroy()
		}
		return util.Errorf("container %s: NAT: %v", id, err)
	}
	return subcommands.ExitSuccess
}

// listen reads sandbox id's NAT settings from spec and binds the host
// side of its published ports, before the sandbox exists.
func listen(conf *config.Config, id string, spec *specs.Spec) (api.NAT, []*os.File, error) {
	if conf.Network != config.NetworkNone {
		return api.NAT{}, nil, fmt.Errorf("container %s asks for a NAT (%s) but gVisor's network is %q: the shim runs NAT sandboxes with --network=none", id, api.AnnotationNAT, conf.Network)
	}
	cfg, err := api.DecodeNAT(spec.Annotations[api.AnnotationNAT])
	if err != nil {
		return api.NAT{}, nil, fmt.Errorf("container %s: %w", id, err)
	}
	listeners, err := nat.Listen(cfg.Ports, cfg.Owner)
	if err != nil {
		return api.NAT{}, nil, fmt.Errorf("container %s: %w", id, err)
	}
	return cfg, listeners, nil
}

// RemoveSockets removes the unix sockets cfg publishes.
func RemoveSockets(cfg api.NAT) {
	for _, s := range cfg.Ports {
		if p, err := api.ParsePort(s); err == nil && p.Unix != "" {
			_ = os.Remove(p.Unix)
		}
	}
}

// attach starts the NAT process of sandbox id and gives the sandbox its
// eth0 on the NAT's socketpair.
func attach(conf *config.Config, id string, spec *specs.Spec, cfg api.NAT, listeners []*os.File) error {
	cont, err := container.Load(conf.RootDir, container.FullID{ContainerID: id}, container.LoadOpts{})
	if err != nil {
		return fmt.Errorf("load sandbox: %w", err)
	}
	guestEnd, natPid, err := startNAT(conf, cont, spec, cfg, listeners)
	if err != nil {
		return err
	}
	defer guestEnd.Close()
	conn, err := sandboxctl.Connect(cont)
	if err == nil {
		defer conn.Close()
		err = conn.Call(boot.ContMgrSetNetworkArgs, linkArgs(guestEnd), nil)
	}
	if err != nil {
		_ = unix.Kill(natPid, unix.SIGKILL)
		return fmt.Errorf("give the sandbox its eth0: %w", err)
	}
	return nil
}

// startNAT starts the NAT process of sandbox cont (created, not yet
// started or restored) on one end of a new datagram socketpair; the other
// end, returned with the NAT's pid, is the sandbox's eth0 (linkArgs). The
// caller closes it once the Sentry has its copy.
func startNAT(conf *config.Config, cont *container.Container, spec *specs.Spec, cfg api.NAT, listeners []*os.File) (*os.File, int, error) {
	id := cont.ID
	fds, err := nat.LinkPair()
	if err != nil {
		return nil, 0, err
	}
	guestEnd, natEnd := os.NewFile(uintptr(fds[0]), "eth0"), os.NewFile(uintptr(fds[1]), "nat")
	defer natEnd.Close()
	fail := func(err error) (*os.File, int, error) {
		guestEnd.Close()
		return nil, 0, err
	}
	pid := int(cont.Sandbox.Pid.Load())
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fail(fmt.Errorf("pidfd of sandbox %d: %w", pid, err))
	}
	pidFile := os.NewFile(uintptr(pidfd), "sandbox")
	defer pidFile.Close()
	uid, gid := sandboxctl.HostRoot(spec)
	root := api.SentryRoot(conf.RootDir)
	stats, err := ownedFile(root.NATStats(id), uid, gid)
	if err != nil {
		return fail(err)
	}
	defer stats.Close()
	logf, err := ownedFile(root.NATLog(id), uid, gid)
	if err != nil {
		return fail(err)
	}
	defer logf.Close()
	args, err := natproc.Args(uid, gid, cfg)
	if err != nil {
		return fail(err)
	}
	// Root's alone: the SDK and gvx serve change the policy's narrowing
	// through it while the sandbox runs (it goes with the sentry root).
	ctl, err := nat.ListenControl(root.NATControl(id))
	if err != nil {
		return fail(err)
	}
	defer ctl.Close()
	m, own := natCommand(conf.RootDir, args)
	m.ExtraFiles = append([]*os.File{natEnd, pidFile, stats, ctl}, listeners...)
	m.Stdout, m.Stderr = logf, logf
	m.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := m.Start
	if own {
		// gvx-nat runs as the sandbox's uid from its first instruction;
		// gvx-sentry's command line (the fallback) needs root to start
		// and drops to it itself.
		start = func() error { return hostcreds.Start(m, uid, gid) }
	}
	if err := startInCgroup(cont, start); err != nil {
		os.Remove(root.NATControl(id))
		return fail(err)
	}
	natPid := m.Process.Pid
	_ = m.Process.Release()
	return guestEnd, natPid, nil
}

// natCommand is the NAT process with args: gvx-nat beside this
// gvx-sentry (own), or where an install lacks it this gvx-sentry's
// api.NATCommand (the same process, with gVisor's ≈ 2 MiB of start-up
// memory; package natproc).
func natCommand(root string, args []string) (_ *exec.Cmd, own bool) {
	if self, err := os.Executable(); err == nil {
		bin := filepath.Join(filepath.Dir(self), api.NATBinary)
		if st, err := os.Stat(bin); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return exec.Command(bin, natproc.Command(root, args)...), true
		}
		log.Warningf("nat: %s not installed beside %s: the NAT runs as %s %s", bin, self, api.SentryBinary, api.NATCommand)
	}
	return argv.Self(append([]string{api.NATCommand}, args...)...), false
}

// startInCgroup starts the NAT process (start) in the sandbox's cgroup,
// so that its memory counts against the sandbox's limit and the cgroup's
// teardown ends it: this process joins the cgroup for the fork and
// leaves again.
func startInCgroup(cont *container.Container, start func() error) error {
	if cg := cont.Sandbox.CgroupJSON.Cgroup; cg != nil {
		restore, err := cg.Join()
		if err != nil {
			return fmt.Errorf("join the sandbox's cgroup: %w", err)
		}
		defer restore()
	}
	if err := start(); err != nil {
		return fmt.Errorf("start the NAT process: %w", err)
	}
	return nil
}

// linkArgs is the sandbox's network: lo, and eth0 on fd.
func linkArgs(fd *os.File) *boot.CreateLinksAndRoutesArgs {
	ip := func(a [4]byte) net.IP { return net.IP(a[:]) }
	gw := ip(api.NATGateway.As4())
	return &boot.CreateLinksAndRoutesArgs{
		FilePayload:   urpc.FilePayload{Files: []*os.File{fd}},
		LoopbackLinks: []boot.LoopbackLink{boot.DefaultLoopbackLink},
		FDBasedLinks: []boot.FDBasedLink{{
			Name:              "eth0",
			MTU:               api.NATMTU,
			Addresses:         []boot.IPWithPrefix{{Address: ip(api.NATGuest.As4()), PrefixLen: api.NATPrefix.Bits()}},
			Routes:            []boot.Route{{Destination: net.IPNet{IP: ip(api.NATPrefix.Addr().As4()), Mask: net.CIDRMask(api.NATPrefix.Bits(), 32)}}},
			TXChecksumOffload: true,
			RXChecksumOffload: true,
			NumChannels:       1,
		}},
		Defaultv4Gateway: boot.DefaultRoute{
			Name:  "eth0",
			Route: boot.Route{Destination: net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}, Gateway: gw},
		},
	}
}

// ownedFile creates path (mode 0600) for the NAT process, uid:gid.
func ownedFile(path string, uid, gid int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nat file: %w", err)
	}
	if err := f.Chown(uid, gid); err != nil {
		f.Close()
		return nil, fmt.Errorf("nat file %s: %w", path, err)
	}
	return f, nil
}
