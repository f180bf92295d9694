package gvx

import (
	"io"
	"strconv"
	"time"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/config"
)

// Config describes a sandbox: what it runs, on what, with what.
type Config struct {
	// ID names the sandbox (ValidID: [a-z0-9]+ works everywhere). Empty:
	// a random one ("gvx" and 12 more lower-case letters and digits).
	ID string
	// Image is a containerd image reference (in the client's namespace),
	// or the path of an OCI or docker image archive (a .tar), which is
	// imported once: later sandboxes of the same unchanged file reuse it.
	Image string
	// Entrypoint and Cmd replace the image's, as docker's --entrypoint
	// and command do: Cmd alone keeps the image's entrypoint; an
	// Entrypoint drops the image's cmd. Both empty: the image's own.
	Entrypoint []string
	Cmd        []string
	// Env (K=V) is added to the image's; a key given here wins.
	Env []string
	// Workdir is the working directory (default the image's, else /).
	Workdir string
	// User runs the init and, by default, every Exec and file call: a
	// name or uid (with an optional :group or :gid) of the image.
	User string
	// Hostname, if set, is the sandbox's (sandboxes of an image pool keep
	// the pool's; a hostname makes a pooled sandbox a container).
	Hostname string
	// TTY gives the init a terminal; its output then arrives on Stdout.
	TTY bool
	// Cols and Rows, with TTY, are the terminal's size from the init's
	// first instruction (zero: the terminal's default; Resize changes it).
	Cols, Rows uint32
	// Stdin, Stdout and Stderr are the init's standard streams (nil: none,
	// discarded, discarded). A Stdin at EOF closes the init's stdin.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Mounts are ext4lite volumes and read-only binds of host paths.
	Mounts []Mount
	// Resources cap the sandbox (zero: the gvx config's defaults).
	Resources Resources
	// Network is the sandbox's network: NetworkNone (the default,
	// loopback only) or NetworkNAT (gvx's userspace NAT: docs/network.md).
	Network NetworkMode
	// NAT configures a NetworkNAT sandbox (nil: the gvx config's [nat]).
	NAT *NAT
	// Docker runs the sandbox in docker mode (what dockerd needs inside,
	// and its socket on the host: Sandbox.DockerSocket); New then returns
	// once the inner dockerd answers. The image's init must start dockerd
	// (gvx's dind image does; see README "Docker inside gvx").
	Docker bool
	// Publish makes guest Unix sockets reachable on the host.
	Publish []Publish
	// Timeout, if positive, is the sandbox's lifetime: it is killed that
	// long after New returns (Run then returns ErrTimeout). The container
	// carries it as its dev.gvx.max-lifetime (plus StopGrace), so the
	// janitor stops the sandbox too should this client be gone.
	Timeout time.Duration
	// StopGrace, if positive, makes the end of Timeout a graceful stop:
	// every process of the sandbox gets SIGTERM (which it may handle),
	// and SIGKILL StopGrace later if the init still runs. Zero: SIGKILL
	// at once.
	StopGrace time.Duration
	// Labels are kept with the sandbox (List and Attach return them).
	// Keys starting with "dev.gvx." are gvx's own.
	Labels map[string]string
}

// MountType is the kind of a Mount.
type MountType string

const (
	// MountVolume is an ext4lite volume: an ext4 image file mounted at
	// Target inside the sandbox only (see README "Volumes").
	MountVolume MountType = "volume"
	// MountBind is a read-only bind mount of a host file or directory.
	MountBind MountType = "bind"
)

// Mount puts a host file into the sandbox.
type Mount struct {
	Type MountType
	// Source is the host path: the ext4 image file of a volume, the file
	// or directory of a bind.
	Source string
	// Target is the absolute path in the sandbox.
	Target string
	// ReadOnly mounts a volume read-only (binds always are).
	ReadOnly bool
	// Clone gives the sandbox its own copy of a volume (a reflink clone
	// where the filesystem can, a sparse copy elsewhere), made next to
	// Source and deleted when the sandbox is closed: Source, typically a
	// golden volume, is only read.
	Clone bool
}

// Resources cap what a sandbox may use. Zero means no cap of that kind
// beyond the gvx config's defaults.
type Resources struct {
	// MemoryBytes caps the sandbox's memory (guest memory and gVisor's).
	MemoryBytes int64
	// CPUMillis caps its CPU time in thousandths of a core (2000 = 2 cores).
	CPUMillis int64
	// Pids caps the number of tasks (threads) in the sandbox: a fork or
	// clone past it fails with EAGAIN inside (docs/operations.md#quotas).
	Pids int64
	// DiskBytes caps what can be written to the root filesystem: a write
	// past it fails with ENOSPC inside (the writes go to a file of at most
	// that size on the host's disk; volumes have their own size).
	DiskBytes int64
}

// NetworkMode is a sandbox's network.
type NetworkMode string

// Network modes.
const (
	// NetworkNone gives the sandbox loopback only.
	NetworkNone NetworkMode = "none"
	// NetworkNAT gives the sandbox eth0 10.0.2.15 behind its own
	// userspace NAT, with an egress policy and published ports.
	NetworkNAT NetworkMode = "nat"
)

// NAT is a NetworkNAT sandbox's published ports, egress policy and DNS
// resolvers (docs/network.md: the syntax); a field left empty keeps the
// gvx config's.
type NAT struct {
	// Ports: "HOSTPORT:GUESTPORT[/tcp|/udp]", "ADDR:HOSTPORT:GUESTPORT",
	// "unix:/path.sock:GUESTPORT".
	Ports []string
	// EgressDefault is "allow" or "deny"; EgressAllow and EgressDeny
	// are rules: CIDR, address or DNS name, each with an optional :PORT.
	EgressDefault           string
	EgressAllow, EgressDeny []string
	// NarrowDefault, NarrowAllow and NarrowDeny narrow that policy (the
	// one above, or the gvx config's when the three above are empty): a
	// flow it admits must pass these as well, in E2B's order — an allow
	// rule admits, else a deny rule refuses, else NarrowDefault ("allow"
	// unless "deny"). A narrowing opens nothing the policy refuses. All
	// empty: no narrowing.
	NarrowDefault           string
	NarrowAllow, NarrowDeny []string
	// DNS lists resolvers (ADDR:PORT) the NAT's 10.0.2.3 forwards to.
	DNS []string
	// MaxConnections caps the flows open at once; a new one over it is
	// refused (RST / ICMP unreachable). 0: the gvx config's (no cap).
	MaxConnections int
	// Bandwidth caps the traffic in bytes per second each way (guest →
	// host, host → guest). 0: the gvx config's (no cap).
	Bandwidth int64
}

// egress reports whether n sets an egress policy of its own.
func (n *NAT) egress() bool {
	return n.EgressDefault != "" || n.EgressAllow != nil || n.EgressDeny != nil
}

// narrows reports whether n narrows the egress policy.
func (n *NAT) narrows() bool {
	return n.NarrowDefault != "" || n.NarrowAllow != nil || n.NarrowDeny != nil
}

// api is n as the dev.gvx.nat annotation's value.
func (n *NAT) api() api.NAT {
	out := api.NAT{Ports: n.Ports, DNS: n.DNS, MaxConnections: n.MaxConnections, Bandwidth: n.Bandwidth}
	if n.egress() {
		out.Egress = &api.Egress{Default: n.EgressDefault, Allow: n.EgressAllow, Deny: n.EgressDeny}
	}
	if n.narrows() {
		if out.Egress == nil {
			out.Egress = &api.Egress{}
		}
		out.Egress.Narrow = &api.Narrow{Default: n.NarrowDefault, Allow: n.NarrowAllow, Deny: n.NarrowDeny}
	}
	return out
}

// config is n over c, the gvx config's [nat]: each field n sets replaces
// c's.
func (n *NAT) config(c config.NAT) config.NAT {
	if n.Ports != nil {
		c.Ports = n.Ports
	}
	if n.egress() {
		c.Egress = config.Egress{Default: n.EgressDefault, Allow: n.EgressAllow, Deny: n.EgressDeny}
	}
	if n.DNS != nil {
		c.DNS = n.DNS
	}
	if n.MaxConnections != 0 {
		c.MaxConnections = n.MaxConnections
	}
	if n.Bandwidth != 0 {
		c.Bandwidth = strconv.FormatInt(n.Bandwidth, 10)
	}
	return c
}

// Publish makes a Unix socket that the guest creates at GuestPath
// reachable on the host at HostPath.
type Publish struct {
	HostPath, GuestPath string
}
