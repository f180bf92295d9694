package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/api/ctlsock"
	"github.com/gvxrun/gvx/api/procfs"
	"github.com/gvxrun/gvx/sentry/ctlclient"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/launcher"
)

// A sandbox's root container (a task that booted its own sandbox) has no
// monitor: gvx-runtime execs into it and signals it over the sandbox's
// control socket itself (package ctlclient), reading what it needs from
// gVisor's state file of the container.

// rootState is what gvx-runtime reads of gVisor's state file of a
// sandbox's root container (runsc/container.Container's JSON).
type rootState struct {
	ID      string      `json:"id"`
	Status  string      `json:"status"`
	Spec    *specs.Spec `json:"spec"`
	Sandbox *struct {
		ID                string `json:"id"`
		Pid               int    `json:"pid"`
		UID               int    `json:"uid"`
		GID               int    `json:"gid"`
		ControlSocketPath string `json:"controlSocketPath"`
	} `json:"sandbox"`
}

// loadRoot reads the state of container id in root if it is the root
// container of a sandbox that runs, and ok is false otherwise (another
// kind of container, not started or stopped, its sandbox gone, a state
// file being written): gvx-sentry then takes the call.
func loadRoot(root, id string) (st *rootState, ok bool) {
	st, ok = readRoot(root, id)
	if !ok || st.Status != string(specs.StateRunning) || st.Spec == nil ||
		st.Sandbox.ControlSocketPath == "" || !procfs.Alive(st.Sandbox.Pid) {
		return nil, false
	}
	return st, true
}

// readRoot reads gVisor's state file of container id in root if it is the
// root container of its sandbox with a sandbox process recorded, whether
// that process runs or not.
func readRoot(root, id string) (*rootState, bool) {
	data, err := os.ReadFile(api.SentryRoot(root).SandboxState(id))
	if err != nil {
		return nil, false
	}
	var st *rootState
	if err := json.Unmarshal(data, &st); err != nil || st == nil {
		return nil, false
	}
	sb := st.Sandbox
	if st.ID != id || sb == nil || sb.ID != id || sb.Pid <= 0 {
		return nil, false
	}
	return st, true
}

// rootExec is exec for root container id: the process p is executed over
// the control socket, and gvx-runtime's waiter, with two connections of
// its own, stands for it.
func (c command) rootExec(id string, p *specs.Process, pidFile string) (bool, error) {
	st, ok := loadRoot(c.root, id)
	if !ok {
		return false, nil
	}
	raw, err := netRaw()
	if err != nil {
		return false, nil
	}
	args, err := ctlclient.Exec(p, st.Spec.Process, raw)
	if err != nil {
		return false, nil // gvx-sentry's exec says why
	}
	args.ContainerID = id
	// One connection for the exec, two for the waiter (its wait blocks
	// one), all opened here, as root.
	var conns [3]*ctlsock.Client
	for i := range conns {
		if conns[i], err = ctlsock.Dial(st.Sandbox.ControlSocketPath); err != nil {
			closeClients(conns[:i])
			return false, nil
		}
	}
	defer closeClients(conns[:])
	// runsc hands the stdio to the sandbox process's own uid and gid.
	stdio, err := sandboxStdio(st.Sandbox.UID, st.Sandbox.GID)
	if err != nil {
		return true, err
	}
	pid, err := conns[0].ExecuteAsync(args, stdio...)
	if err != nil {
		return true, fmt.Errorf("executing processes for container %s: %w", id, err)
	}
	uid, gid := hostcreds.HostRoot(st.Spec)
	err = standFor(pidFile, pid, func() (*os.Process, error) {
		return spawnDirectWaiter(c.root, id, pid, uid, gid, conns[1], conns[2])
	}, func() { _ = conns[0].Signal(id, pid, int(unix.SIGKILL), ctlsock.DeliverToProcess) })
	if err != nil {
		return true, fmt.Errorf("exec in %s: %w", id, err)
	}
	return true, nil
}

// rootKill is kill [--all] [--pid N] of root container id: a signal to
// its init (pid 0), to process pid, or to all its processes, over the
// control socket. A call the sandbox refuses goes to gvx-sentry, which
// says why in runc's words.
func (c command) rootKill(id string, pid int32, sig unix.Signal, all bool) bool {
	st, ok := loadRoot(c.root, id)
	if !ok {
		return false
	}
	ctl, err := ctlsock.Dial(st.Sandbox.ControlSocketPath)
	if err != nil {
		return false
	}
	defer ctl.Close()
	mode := ctlsock.DeliverToProcess
	if all {
		mode = ctlsock.DeliverToAllProcesses
	}
	return ctl.Signal(id, pid, int(sig), mode) == nil
}

// netRaw reports whether the sandbox runs with raw sockets (gvx-sentry's
// --net-raw, among the task's flags beside the command's link): an exec
// then keeps CAP_NET_RAW.
func netRaw() (bool, error) {
	flags, err := launcher.Flags(os.Args[0])
	if err != nil {
		return false, err
	}
	raw := false
	for _, f := range strings.Fields(flags) {
		name, value, _ := strings.Cut(f, "=")
		if strings.TrimLeft(name, "-") == "net-raw" {
			raw = value == "" || value == "true"
		}
	}
	return raw, nil
}

func closeClients(cs []*ctlsock.Client) {
	for _, c := range cs {
		if c != nil {
			c.Close()
		}
	}
}
