package api

// PauseResetCommand is gvx-pause's subcommand (argv[1]) that a pool
// sandbox's reset runs in its root container after the task's container
// is gone: it puts back the state every container of a gVisor sandbox
// shares (the root UTS and IPC namespaces) and reports the guest's state
// as a GuestState (JSON on stdout). Its flags: --hostname and
// --domainname to restore.
const PauseResetCommand = "reset"

// PauseAgentArg is gvx-pause's argument (argv[1]) as the init of a lease
// pool's sandbox (pool.lease): its standard input is then a socket to the
// pool's server, on which it serves resets itself — each a
// PauseAgentRequest line answered by a GuestState line: the lease root
// stacked on the root container's "/" ended (every guest process but
// gvx-pause killed, the stack unmounted, its memory freed), the work of
// PauseResetCommand, then a new lease root stacked — an overlay of the
// root container's root filesystem with its writes in a fresh tmpfs,
// and fresh /proc, /dev, /sys, /tmp, /run, /dev/shm and /dev/pts — in
// which the next lease's commands run (gVisor starts an exec in the
// mount stacked on its container's root). No process is started for it.
const PauseAgentArg = "agent"

// PauseAgentRequest is a reset the pool's server asks of gvx-pause's
// agent (PauseAgentArg): the hostname and domain name to restore, and
// the files the next lease root gets.
type PauseAgentRequest struct {
	Hostname   string `json:"hostname"`
	Domainname string `json:"domainname"`
	// Files are written into the next lease root (a path relative to
	// its "/", and the content), replacing the image's: a NAT pool's
	// etc/resolv.conf.
	Files map[string]string `json:"files,omitempty"`
	// RootBytes, if positive, caps what the next lease writes to its
	// root filesystem (the lease root's upper layer, in the sandbox's
	// memory): a write past it fails with ENOSPC.
	RootBytes int64 `json:"root_bytes,omitempty"`
}

// PauseUTSCommand is gvx-pause's subcommand (argv[1]) that gives a pool
// sandbox the hostname and domain name of the task that adopted it (flags
// --hostname, --domainname): every container of a gVisor sandbox runs in
// the root container's UTS namespace, which the pool booted with its own.
// A reset puts the pool's back (PauseResetCommand).
const PauseUTSCommand = "uts"

// GuestState is what a pool sandbox's guest looks like, as gvx-pause
// sees it from the sandbox's root PID namespace: the state a reset
// compares with the one recorded at boot.
type GuestState struct {
	// Processes are the guest's processes besides gvx-pause (pid 1) and
	// the reporting process itself, as "pid comm".
	Processes []string `json:"processes,omitempty"`
	// Hostname and Domainname are the sandbox's (shared by its
	// containers).
	Hostname   string `json:"hostname"`
	Domainname string `json:"domainname"`
	// ShmPages, Semaphores and Queues count the SysV IPC objects left:
	// pages of shared memory segments, semaphore sets, message queues.
	ShmPages   int64 `json:"shm_pages"`
	Semaphores int   `json:"semaphores"`
	Queues     int   `json:"queues"`
	// Sockets counts the guest's sockets (/proc/net: tcp, tcp6, udp,
	// udp6, unix entries); Mounts the root container's mounts.
	Sockets int `json:"sockets"`
	Mounts  int `json:"mounts"`
	// MemUsedKiB is the guest's memory in use (MemTotal − MemFree).
	MemUsedKiB int64 `json:"mem_used_kib"`
	// Errors are what the reset could not do or read.
	Errors []string `json:"errors,omitempty"`
}

// IoctlInnerTCP is the ioctl request, on any socket in a gvx sandbox, that
// returns how many TCP endpoints the sandbox's inner network namespaces
// (an inner container's own, not the sandbox's) hold in a state gVisor's
// restore waits on: listening, connecting or connected, TIME-WAIT
// included (gvx-sentry serves it; `gvx-relay inner-tcp` makes it). gVisor
// restores only the root namespace's endpoints, so the restore of a
// checkpoint that holds any of these never finishes: checkpoints of
// docker-mode sandboxes are refused while the count is not 0
// (ErrInnerTCP). SIOCDEVPRIVATE+13.
const IoctlInnerTCP = 0x89fd

// RelayInnerTCPCommand is gvx-relay's subcommand that makes the
// IoctlInnerTCP call in a proxied docker-mode guest and prints the count.
const RelayInnerTCPCommand = "inner-tcp"

// RelayBridgesCommand is gvx-relay's subcommand that makes dockerd's
// bridges again in a restored proxied docker-mode guest: its arguments
// are NAME=GATEWAY/BITS, one per bridge (the device, its address with the
// subnet's length). A gvx-relay from before it exits 2 with its usage.
const RelayBridgesCommand = "bridges"
