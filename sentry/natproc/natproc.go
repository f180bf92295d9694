// Package natproc is a sandbox's NAT process (network = "nat"): it takes
// the files natsandbox's Create hands it, drops to the sandbox's host
// credentials behind a seccomp filter, and runs package nat until the
// sandbox's process exits.
//
// It runs as its own small binary, gvx-nat (api.NATBinary), installed
// beside gvx-sentry: a process of gvx-sentry starts with ≈ 2 MiB more of
// anonymous memory from gVisor's package initialisation alone, which the
// NAT never uses (docs/benchmarks.md, NAT memory). gvx-sentry's
// api.NATCommand runs the same Run where gvx-nat is not installed.
package natproc

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"gvisor.dev/gvisor/pkg/log"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/nat"
)

// The files Create hands the NAT process, from fd 3 on.
const (
	FDLink      = 3 // the NAT's end of the socketpair
	FDSandbox   = 4 // a pidfd of the sandbox's process
	FDStats     = 5 // api.NATStats's file
	FDControl   = 6 // the control socket (api.NATControl), listening
	FDListeners = 7 // the published ports' sockets, in order
)

// Usage is the NAT process's command line after its name.
const Usage = "[--root=<sentry root>] <uid> <gid> <nat json>"

// rootFlag names the sandbox's sentry root on gvx-nat's command line. The
// NAT does not use it: it marks the process as one of that state
// directory's, for `gvx gc` (as --root marks every gvx-sentry process).
const rootFlag = "--root="

// Command is gvx-nat's command line after its name, for the sandbox whose
// sentry root is root.
func Command(root string, args []string) []string {
	return append([]string{rootFlag + root}, args...)
}

// Args is the NAT process's command line after its name.
func Args(uid, gid int, cfg api.NAT) ([]string, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("nat config: %w", err)
	}
	return []string{strconv.Itoa(uid), strconv.Itoa(gid), string(data)}, nil
}

// Run is the NAT process, given Args. It returns when the sandbox's
// process has exited.
func Run(args []string) error {
	if len(args) > 0 && strings.HasPrefix(args[0], rootFlag) {
		args = args[1:]
	}
	if len(args) != 3 {
		return fmt.Errorf("nat: want %s, got %q", Usage, args)
	}
	uid, err1 := strconv.Atoi(args[0])
	gid, err2 := strconv.Atoi(args[1])
	var cfg api.NAT
	err3 := json.Unmarshal([]byte(args[2]), &cfg)
	if err1 != nil || err2 != nil || err3 != nil {
		return fmt.Errorf("nat: bad arguments %q (want %s)", args, Usage)
	}
	// The NAT's own log (its refusals): stderr, the file Create opened.
	log.SetTarget(log.GoogleEmitter{Writer: &log.Writer{Next: os.Stderr}})
	// Everything the NAT needs from root it was given as a file: drop to
	// the sandbox's host credentials before touching the guest's packets.
	if uid == 0 {
		return fmt.Errorf("nat: refusing to run as host root (the sandbox has no user namespace mapping)")
	}
	if err := hostcreds.Drop(uid, gid); err != nil {
		return fmt.Errorf("nat: drop privileges: %w", err)
	}
	if err := installFilters(); err != nil {
		return fmt.Errorf("nat: seccomp: %w", err)
	}
	var listeners []*os.File
	for i := range cfg.Ports {
		listeners = append(listeners, os.NewFile(uintptr(FDListeners+i), "published port"))
	}
	// One P: the NAT is two sockets and a copy between them, one per
	// sandbox; each P more is runtime and GC state (per-P caches and
	// buffers, a mark worker, gVisor's per-P TCP and link processors)
	// kept after traffic (docs/benchmarks.md, NAT memory). Before
	// nat.New: gVisor sizes its processors from it.
	runtime.GOMAXPROCS(1)
	stats := nat.NewStats(os.NewFile(FDStats, "stats"), os.Getpid())
	n, err := nat.New(nat.Options{LinkFD: FDLink, Config: cfg, Listeners: listeners, Stats: stats,
		Control: os.NewFile(FDControl, "control")})
	if err != nil {
		return fmt.Errorf("nat: %w", err)
	}
	if err := nat.WaitPid(FDSandbox); err != nil {
		log.Warningf("nat: wait for the sandbox: %v", err)
	}
	n.Close()
	stats.Flush()
	log.Infof("nat: sandbox exited; %+v", stats.Get())
	return nil
}
