package natsandbox

import (
	"context"
	"encoding/json"
	"os"
	"runtime"
	"strconv"

	"github.com/google/subcommands"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/runsc/cmd/util"
	"gvisor.dev/gvisor/runsc/flag"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/nat"
)

// The files Create hands the NAT process, from fd 3 on.
const (
	fdLink      = 3 // the NAT's end of the socketpair
	fdSandbox   = 4 // a pidfd of the sandbox's process
	fdStats     = 5 // api.NATStats's file
	fdListeners = 6 // the published ports' sockets, in order
)

// Serve is the NAT process: gvx-sentry gvx-nat UID GID CONFIG-JSON.
type Serve struct {
	util.InternalSubCommand
}

// Name implements subcommands.Command.
func (*Serve) Name() string { return api.NATCommand }

// Synopsis implements subcommands.Command.
func (*Serve) Synopsis() string { return "internal: a sandbox's userspace NAT" }

// Usage implements subcommands.Command.
func (*Serve) Usage() string { return api.NATCommand + " <uid> <gid> <nat json>\n" }

// SetFlags implements subcommands.Command.
func (*Serve) SetFlags(*flag.FlagSet) {}

// Execute implements subcommands.Command. It returns when the sandbox's
// process has exited.
func (*Serve) Execute(_ context.Context, f *flag.FlagSet, _ ...any) subcommands.ExitStatus {
	if f.NArg() != 3 {
		f.Usage()
		return subcommands.ExitUsageError
	}
	uid, err1 := strconv.Atoi(f.Arg(0))
	gid, err2 := strconv.Atoi(f.Arg(1))
	var cfg api.NAT
	err3 := json.Unmarshal([]byte(f.Arg(2)), &cfg)
	if err1 != nil || err2 != nil || err3 != nil {
		return util.Errorf("nat: bad arguments %q", f.Args())
	}
	// The NAT's own log (its refusals): stderr, the file Create opened.
	log.SetTarget(log.GoogleEmitter{Writer: &log.Writer{Next: os.Stderr}})
	// Everything the NAT needs from root it was given as a file: drop to
	// the sandbox's host credentials before touching the guest's packets.
	if uid == 0 {
		return util.Errorf("nat: refusing to run as host root (the sandbox has no user namespace mapping)")
	}
	if err := hostcreds.Drop(uid, gid); err != nil {
		return util.Errorf("nat: drop privileges: %v", err)
	}
	if err := installFilters(); err != nil {
		return util.Errorf("nat: seccomp: %v", err)
	}
	var listeners []*os.File
	for i := range cfg.Ports {
		listeners = append(listeners, os.NewFile(uintptr(fdListeners+i), "published port"))
	}
	// One P: the NAT is two sockets and a copy between them, one per
	// sandbox; each P more is runtime and GC state (per-P caches and
	// buffers, a mark worker, gVisor's per-P TCP and link processors)
	// kept after traffic (docs/benchmarks.md, NAT memory). Before
	// nat.New: gVisor sizes its processors from it.
	runtime.GOMAXPROCS(1)
	stats := nat.NewStats(os.NewFile(fdStats, "stats"), os.Getpid())
	n, err := nat.New(nat.Options{LinkFD: fdLink, Config: cfg, Listeners: listeners, Stats: stats})
	if err != nil {
		return util.Errorf("nat: %v", err)
	}
	if err := nat.WaitPid(fdSandbox); err != nil {
		log.Warningf("nat: wait for the sandbox: %v", err)
	}
	n.Close()
	stats.Flush()
	log.Infof("nat: sandbox exited; %+v", stats.Get())
	return subcommands.ExitSuccess
}
