package ctlsock

import "os"

// The exec, wait and signal calls of gVisor's containerManager, with
// argument types written from the JSON of gVisor's own (runsc/boot,
// pkg/sentry/control). sentry/ctlclient's contract test has gVisor's urpc
// server decode them into gVisor's types, so a gVisor upgrade that changes
// one fails there.
const (
	methodExecuteAsync = "containerManager.ExecuteAsync"
	methodWaitPID      = "containerManager.WaitPID"
	methodSignal       = "containerManager.Signal"
)

// Mode is how a signal is delivered (gVisor's boot.SignalDeliveryMode).
type Mode int

const (
	// DeliverToProcess signals one process: PID, or the container's init
	// for 0.
	DeliverToProcess Mode = 0
	// DeliverToAllProcesses signals every process of the container.
	DeliverToAllProcesses Mode = 1
	// DeliverToProcessGroup signals every process of the process group
	// PID (a PGID) of the container.
	DeliverToProcessGroup Mode = 3
)

// ExecArgs is what an exec tells the sandbox (the JSON of gVisor's
// control.ExecArgs, the fields a client sets).
type ExecArgs struct {
	Argv             []string `json:"argv"`
	Envv             []string `json:"envv"`
	WorkingDirectory string   `json:"wd"`
	KUID             uint32
	KGID             uint32
	ExtraKGIDs       []uint32
	NoNewPrivileges  bool
	Capabilities     *Capabilities
	StdioIsPty       bool
	SupportTTYs      bool
	// GuestFDs are the guest's descriptors of the files the call passes,
	// in order.
	GuestFDs    []int
	ContainerID string
}

// Capabilities are a process's capability sets, bit n for capability n
// (gVisor's auth.TaskCapabilities).
type Capabilities struct {
	PermittedCaps   uint64
	InheritableCaps uint64
	EffectiveCaps   uint64
	BoundingCaps    uint64
	AmbientCaps     uint64
}

// waitPIDArgs and signalArgs are gVisor's boot.WaitPIDArgs and
// boot.SignalArgs.
type waitPIDArgs struct {
	PID int32
	CID string
}

type signalArgs struct {
	CID   string
	Signo int32
	PID   int32
	Mode  Mode
}

// ExecuteAsync starts args's process with stdio (passed to the sandbox as
// the guest's descriptors 0, 1, …) and returns its pid in the sandbox.
func (c *Client) ExecuteAsync(args *ExecArgs, stdio ...*os.File) (int32, error) {
	a := *args
	a.GuestFDs = make([]int, len(stdio))
	for i := range stdio {
		a.GuestFDs[i] = i
	}
	var pid int32
	if err := c.Call(methodExecuteAsync, &a, stdio, &pid); err != nil {
		return 0, err
	}
	return pid, nil
}

// WaitPID waits for process pid of container cid and returns its wait
// status (a unix.WaitStatus).
func (c *Client) WaitPID(cid string, pid int32) (uint32, error) {
	var status uint32
	if err := c.Call(methodWaitPID, &waitPIDArgs{PID: pid, CID: cid}, nil, &status); err != nil {
		return 0, err
	}
	return status, nil
}

// Signal sends sig to process pid of container cid (0: its init), or to
// all its processes.
func (c *Client) Signal(cid string, pid int32, sig int, mode Mode) error {
	return c.Call(methodSignal, &signalArgs{CID: cid, Signo: int32(sig), PID: pid, Mode: mode}, nil, nil)
}
