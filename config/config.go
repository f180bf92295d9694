// Package config loads gvx's runtime configuration.
//
// The configuration is a TOML file (by default /etc/gvx/config.toml, or the
// ConfigPath a containerd runtime handler passes) layered over built-in
// defaults. Unknown keys are errors, so a typo never silently falls back
// to a default.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/volume"
)

// DefaultPath is read when the runtime options name no config file. A
// missing file there means "use the defaults".
const DefaultPath = "/etc/gvx/config.toml"

// Config is the runtime configuration of one shim.
type Config struct {
	// Sentry is the path of the gvx-sentry binary. Empty: next to the
	// shim's own binary, else on PATH.
	Sentry string `toml:"sentry"`
	// LogLevel of the shim and the sentry: debug, info, warn or error.
	LogLevel string `toml:"log_level"`
	// Platform is gVisor's syscall interception platform (systrap, ptrace).
	Platform string `toml:"platform"`
	// Network is the sandbox's network: "sandbox" (gVisor's own netstack
	// on the interfaces of the task's network namespace), "none" (loopback
	// only), "host", or "nat" (gvx's userspace NAT: docs/network.md).
	// Tasks can pick theirs with the dev.gvx.network annotation.
	Network string `toml:"network"`
	// NAT configures network = "nat".
	NAT NAT `toml:"nat"`
	// StateDir holds gvx's runtime state: the sentry roots (sentry/) and
	// the tasks' root filesystem mounts (rootfs/). The sandbox's
	// unprivileged host uid must be able to traverse it.
	StateDir string `toml:"state_dir"`
	// RootfsOverlay is where writes to the task's root filesystem go:
	// "memory" (sandbox memory) or "self" (a file in the rootfs).
	RootfsOverlay string `toml:"rootfs_overlay"`
	// SentryFlags are extra runsc-style global flags (--name=value).
	SentryFlags []string `toml:"sentry_flags"`
	// UserNS sets the host ids the sandbox runs as.
	UserNS UserNS `toml:"userns"`
	// Resources are applied to tasks whose spec sets none.
	Resources Resources `toml:"resources"`
	// Docker turns on docker mode for every task of this runtime handler
	// (tasks can also ask for it with the dev.gvx.docker annotation).
	Docker Docker `toml:"docker"`
	// Pool makes tasks adopt sandboxes booted ahead of time by
	// `gvx pool serve` (a warm pool) instead of booting their own.
	Pool Pool `toml:"pool"`
	// Janitor is how `gvx gc` and the long-running gvx processes find and
	// reclaim what sandboxes left behind.
	Janitor Janitor `toml:"janitor"`
	// Metrics is where `gvx pool serve` exports Prometheus metrics.
	Metrics Metrics `toml:"metrics"`
	// Admission refuses new sandboxes while the node is short of memory
	// or disk.
	Admission Admission `toml:"admission"`
}

// Admission configures the refusal of new sandboxes (package admission).
type Admission struct {
	// MemoryPercent: refuse while more of the node's memory than this is
	// in use (not available); 0: never.
	MemoryPercent float64 `toml:"memory_percent"`
	// DiskPercent: refuse while the file system of any of DiskPaths
	// (default: state_dir) is fuller than this; 0: never.
	DiskPercent float64  `toml:"disk_percent"`
	DiskPaths   []string `toml:"disk_paths"`
}

// Metrics configures a long-running gvx process's metrics endpoint.
type Metrics struct {
	// Listen is unix:///path or host:port (loopback unless AllowRemote);
	// empty: no endpoint.
	Listen      string `toml:"listen"`
	AllowRemote bool   `toml:"allow_remote"`
}

// Janitor configures the sweep of leftovers (`gvx gc`, and the periodic
// sweep of `gvx pool serve` and `gvx serve`).
type Janitor struct {
	// Interval is how often the long-running gvx processes sweep; 0
	// turns their sweep off (`gvx gc` still works).
	Interval time.Duration `toml:"interval"`
	// MaxLifetime stops gvx sandboxes older than this (a container's
	// dev.gvx.max-lifetime label or annotation overrides it); 0: none.
	MaxLifetime time.Duration `toml:"max_lifetime"`
	// MinAge spares anything younger than this (a create under way).
	MinAge time.Duration `toml:"min_age"`
	// Grace is how long a stopped process has between SIGTERM and SIGKILL.
	Grace time.Duration `toml:"grace"`
	// Containerd lists the containerd sockets whose tasks use this
	// state directory (the shims' own containerds are found as well).
	Containerd []string `toml:"containerd"`
	// VolumeDirs are directories of ext4lite volumes whose sandbox clones
	// and loop devices the sweep may reclaim.
	VolumeDirs []string `toml:"volume_dirs"`
}

// NAT is the userspace NAT's settings (api.NAT); a task's
// dev.gvx.nat annotation replaces the fields it sets.
type NAT struct {
	// DNS lists the resolvers (ADDR:PORT) the NAT's 10.0.2.3 forwards
	// to; empty: the host's /etc/resolv.conf.
	DNS []string `toml:"dns"`
	// Ports are published for every task: HOSTPORT:GUESTPORT[/tcp|/udp],
	// ADDR:HOSTPORT:GUESTPORT[/…] or unix:/path.sock:GUESTPORT.
	Ports []string `toml:"ports"`
	// Egress is the egress policy.
	Egress Egress `toml:"egress"`
	// MaxConnections caps each sandbox's open flows (api.NAT's); 0: no
	// cap.
	MaxConnections int `toml:"max_connections"`
	// Bandwidth caps each sandbox's traffic per second, each way: a size
	// such as "8M" (bytes, binary units); empty: no cap.
	Bandwidth string `toml:"bandwidth"`
}

// bandwidth is n.Bandwidth in bytes per second.
func (n NAT) bandwidth() (int64, error) { return ParseBandwidth(n.Bandwidth) }

// ParseBandwidth parses a NAT's bandwidth cap ("8M": bytes per second,
// binary units); "" is 0, no cap.
func ParseBandwidth(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	b, err := volume.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("nat.bandwidth: %w (bytes per second, e.g. \"8M\")", err)
	}
	return b, nil
}

// Egress is the NAT's egress policy (docs/network.md#policy).
type Egress struct {
	Default string   `toml:"default"` // "allow" (default) or "deny"
	Allow   []string `toml:"allow"`   // CIDR, address or name, each [:port]
	Deny    []string `toml:"deny"`
}

// API is n as the NAT's wire type.
func (n NAT) API() api.NAT {
	// Validate checked the bandwidth.
	bw, _ := n.bandwidth()
	out := api.NAT{DNS: n.DNS, Ports: n.Ports, MaxConnections: n.MaxConnections, Bandwidth: bw}
	if n.Egress.Default != "" || len(n.Egress.Allow) > 0 || len(n.Egress.Deny) > 0 {
		out.Egress = &api.Egress{Default: n.Egress.Default, Allow: n.Egress.Allow, Deny: n.Egress.Deny}
	}
	return out
}

// Pool configures the warm pool of pre-booted sandboxes.
type Pool struct {
	// Size is how many booted sandboxes `gvx pool serve` keeps ready; 0
	// turns the pool off (tasks boot their own sandbox).
	Size int `toml:"size"`
	// MaxSize is as deep as the pool grows under demand (the claims of
	// two boot times, bounded by free memory); default 4 × Size.
	MaxSize int `toml:"max_size"`
	// BootConcurrency is how many sandboxes it boots at once (default:
	// the host's CPUs).
	BootConcurrency int `toml:"boot_concurrency"`
	// Socket is where `gvx pool serve` hands out sandboxes; empty means
	// <state_dir>/pool.sock.
	Socket string `toml:"socket"`
	// Image, when set, boots the pool's sandboxes on that image (a
	// reference in containerd's Namespace, unpacked for Snapshotter). A
	// task of that image then starts as a process in an adopted sandbox's
	// root container: no container to create, no root filesystem to mount.
	Image string `toml:"image"`
	// Containerd is the socket of the containerd the pool reads Image from.
	Containerd string `toml:"containerd"`
	// Namespace and Snapshotter are where Image is.
	Namespace   string `toml:"namespace"`
	Snapshotter string `toml:"snapshotter"`
	// Reset (default on) returns a sandbox whose task ran as a container
	// in it to the pool once the task is deleted — the container removed,
	// the shared guest state restored, and the sandbox verified to be as
	// booted — instead of destroying it; a sandbox that fails the check is
	// destroyed. MaxUses (default 100) bounds the tasks one sandbox serves
	// before it is destroyed all the same.
	Reset   bool `toml:"reset"`
	MaxUses int  `toml:"max_uses"`
	// Lease makes an image pool serve leases (the SDK's Pool.Lease)
	// instead of containerd tasks: a lease holds a sandbox while its
	// connection to the server is open and runs commands in its root
	// container, in a lease root of its own (the image's files, its
	// writes in the sandbox's memory); once released, the sandbox's
	// processes are killed, the lease root dropped and the sandbox
	// verified back into the pool (Reset), with no host process started
	// on either side. Tasks do not adopt a lease pool's sandboxes.
	Lease bool `toml:"lease"`
}

// DefaultMaxUses is pool.max_uses when unset.
const DefaultMaxUses = 100

// Uses is how many tasks one sandbox serves at most (pool.max_uses, 1
// with reset off).
func (p Pool) Uses() int {
	switch {
	case !p.Reset:
		return 1
	case p.MaxUses == 0:
		return DefaultMaxUses
	}
	return p.MaxUses
}

// Docker configures docker mode: the sandbox settings dockerd needs.
type Docker struct {
	Enabled bool `toml:"enabled"`
}

// UserNS maps the sandbox's ids 0..Size-1 to host ids HostUID.. and
// HostGID.. so that no sandbox process runs as host root.
type UserNS struct {
	HostUID uint32 `toml:"host_uid"`
	HostGID uint32 `toml:"host_gid"`
	Size    uint32 `toml:"size"`
}

// Resources are defaults for tasks that ask for nothing.
type Resources struct {
	// MemoryBytes caps a sandbox's memory; 0 means no default cap.
	MemoryBytes int64 `toml:"memory_bytes"`
	// CPUMillis caps a sandbox's CPU in thousandths of a core; 0 means none.
	CPUMillis int64 `toml:"cpu_millis"`
	// MemoryHighPercent puts the sandbox's reclaim threshold (cgroup v2
	// memory.high, v1 memory.soft_limit_in_bytes) at this share of its
	// memory limit, so the host reclaims and throttles it before the hard
	// limit kills it (a task's dev.gvx.memory-high overrides it); 0 or 100:
	// none. Default 90.
	MemoryHighPercent int `toml:"memory_high_percent"`
	// Pids caps the tasks (threads) in a sandbox, enforced inside it: a
	// clone past it fails with EAGAIN (a spec's pids limit overrides it);
	// 0 means none.
	Pids int64 `toml:"pids"`
	// RootfsBytes caps what the guest may write to its root filesystem
	// (a task's dev.gvx.rootfs-size overrides it): the writes go to a
	// file of that size at most beside the rootfs on the host disk, and a
	// write past it fails with ENOSPC inside; 0 means no cap.
	RootfsBytes int64 `toml:"rootfs_bytes"`
	// MaxExecs bounds the execs of one task alive at once (each holds host
	// processes and the shim's stdio); 0 means DefaultMaxExecs.
	MaxExecs int `toml:"max_execs"`
	// NodeMaxExecs bounds the execs alive at once on the whole node:
	// those of every task of every shim sharing this state directory
	// (each live exec holds ≈ 26 MiB of host memory); 0 means
	// DefaultNodeMaxExecs.
	NodeMaxExecs int `toml:"node_max_execs"`
}

// DefaultMaxExecs is resources.max_execs when the config sets none.
const DefaultMaxExecs = 32

// NodeExecs is resources.node_max_execs, or its default when the config
// sets none: as many execs as half the host's memory holds at 64 MiB
// each, and at least 64.
func (r Resources) NodeExecs() int {
	if r.NodeMaxExecs > 0 {
		return r.NodeMaxExecs
	}
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return 64
	}
	return max(64, int(uint64(si.Totalram)*uint64(si.Unit)/2/(64<<20)))
}

// Default returns the built-in configuration.
func Default() Config {
	return Config{
		LogLevel:      "info",
		Platform:      "systrap",
		Network:       "sandbox",
		StateDir:      api.DefaultStateDir,
		RootfsOverlay: "memory",
		Resources:     Resources{MemoryHighPercent: 90},
		UserNS:        UserNS{HostUID: 100000, HostGID: 100000, Size: 65536},
		Pool:          Pool{Containerd: "/run/containerd/containerd.sock", Namespace: "default", Snapshotter: "overlayfs", Reset: true, MaxUses: DefaultMaxUses},
		Janitor:       Janitor{Interval: 10 * time.Minute, MinAge: time.Minute, Grace: 10 * time.Second},
	}
}

// Load reads the file at path over the defaults. If path is empty,
// DefaultPath is read when it exists.
func Load(path string) (Config, error) {
	explicit := path != ""
	if !explicit {
		path = DefaultPath
	}
	data, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, os.ErrNotExist) {
			c := Default()
			return c, c.Validate()
		}
		return Config{}, fmt.Errorf("read gvx config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("gvx config %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes TOML over the defaults and validates the result.
func Parse(data []byte) (Config, error) {
	c := Default()
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&c)
	if err != nil {
		return Config{}, fmt.Errorf("parse: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, 0, len(und))
		for _, k := range und {
			keys = append(keys, k.String())
		}
		sort.Strings(keys)
		return Config{}, fmt.Errorf("unknown key(s) %s: remove them or check the spelling (known: %s)",
			strings.Join(keys, ", "), strings.Join(knownKeys(), ", "))
	}
	return c, c.Validate()
}

func knownKeys() []string {
	return []string{"sentry", "log_level", "platform", "network", "state_dir", "rootfs_overlay", "sentry_flags",
		"nat.dns", "nat.ports", "nat.egress.default", "nat.egress.allow", "nat.egress.deny", "nat.max_connections", "nat.bandwidth",
		"userns.host_uid", "userns.host_gid", "userns.size", "resources.memory_bytes", "resources.cpu_millis", "resources.memory_high_percent", "resources.pids", "resources.rootfs_bytes", "resources.max_execs", "docker.enabled",
		"pool.size", "pool.max_size", "pool.boot_concurrency", "pool.socket", "pool.image", "pool.containerd", "pool.namespace", "pool.snapshotter", "pool.reset", "pool.max_uses", "pool.lease",
		"janitor.interval", "janitor.max_lifetime", "janitor.min_age", "janitor.grace", "janitor.containerd", "janitor.volume_dirs",
		"metrics.listen", "metrics.allow_remote", "admission.memory_percent", "admission.disk_percent", "admission.disk_paths"}
}

// Validate checks values that would otherwise fail later and less clearly.
func (c Config) Validate() error {
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	switch c.Platform {
	case "systrap", "ptrace":
	default:
		return fmt.Errorf("platform %q: want systrap or ptrace (KVM needs /dev/kvm, which gvx does not use)", c.Platform)
	}
	if err := CheckNetwork(c.Network); err != nil {
		return err
	}
	if _, err := c.NAT.bandwidth(); err != nil {
		return err
	}
	if err := c.NAT.API().Check(); err != nil {
		return fmt.Errorf("nat: %w", err)
	}
	switch c.RootfsOverlay {
	case "memory", "self":
	default:
		return fmt.Errorf("rootfs_overlay %q: want memory or self", c.RootfsOverlay)
	}
	if !filepath.IsAbs(c.StateDir) {
		return fmt.Errorf("state_dir %q: must be an absolute path", c.StateDir)
	}
	if c.Sentry != "" && !filepath.IsAbs(c.Sentry) {
		return fmt.Errorf("sentry %q: must be an absolute path", c.Sentry)
	}
	if c.UserNS.HostUID == 0 || c.UserNS.HostGID == 0 {
		return errors.New("userns.host_uid and userns.host_gid must not be 0: the sandbox would run as host root")
	}
	if c.UserNS.Size == 0 {
		return errors.New("userns.size must be at least 1")
	}
	for _, f := range c.SentryFlags {
		if !strings.HasPrefix(f, "--") || len(f) == 2 || strings.ContainsAny(f, " \t\n") {
			return fmt.Errorf("sentry_flags: %q is not a single --name[=value] flag", f)
		}
	}
	if c.Pool.Size < 0 || c.Pool.Size > 1024 {
		return fmt.Errorf("pool.size %d: want 0 (no pool) to 1024", c.Pool.Size)
	}
	if c.Pool.Size > 0 && c.Network == api.NetworkNAT && len(c.NAT.Ports) > 0 {
		return fmt.Errorf("pool.size %d with nat.ports %q: every pool sandbox would publish the same host ports; publish them per task (dev.gvx.nat), which boots a sandbox of its own", c.Pool.Size, c.NAT.Ports)
	}
	if c.Pool.MaxSize != 0 && (c.Pool.MaxSize < c.Pool.Size || c.Pool.MaxSize > 1024) {
		return fmt.Errorf("pool.max_size %d: want pool.size (%d) to 1024, or 0 for 4 × pool.size", c.Pool.MaxSize, c.Pool.Size)
	}
	if c.Pool.BootConcurrency < 0 || c.Pool.BootConcurrency > 64 {
		return fmt.Errorf("pool.boot_concurrency %d: want 1 to 64, or 0 for the host's CPUs", c.Pool.BootConcurrency)
	}
	if c.Pool.MaxUses < 0 || c.Pool.MaxUses > 1_000_000 {
		return fmt.Errorf("pool.max_uses %d: want 1 (a sandbox serves one task) to 1000000, or 0 for %d", c.Pool.MaxUses, DefaultMaxUses)
	}
	if c.Pool.Socket != "" && !filepath.IsAbs(c.Pool.Socket) {
		return fmt.Errorf("pool.socket %q: must be an absolute path", c.Pool.Socket)
	}
	if c.Pool.Image != "" {
		if c.RootfsOverlay != "memory" {
			return fmt.Errorf("pool.image %q needs rootfs_overlay = \"memory\" (the pool's image is shared read-only; writes go to each sandbox's memory)", c.Pool.Image)
		}
		if c.Pool.Namespace == "" || c.Pool.Snapshotter == "" || !filepath.IsAbs(c.Pool.Containerd) {
			return fmt.Errorf("pool.image %q needs pool.namespace, pool.snapshotter and an absolute pool.containerd socket path", c.Pool.Image)
		}
	}
	if c.Pool.Lease && c.Pool.Image == "" {
		return errors.New("pool.lease needs pool.image: a lease's commands run in the image's files (set [pool] image = \"REF\")")
	}
	j := c.Janitor
	if j.Interval < 0 || j.MaxLifetime < 0 || j.MinAge < 0 || j.Grace < 0 {
		return errors.New("janitor: interval, max_lifetime, min_age and grace must not be negative (write durations as \"10m\")")
	}
	for _, p := range append(append([]string{}, j.Containerd...), j.VolumeDirs...) {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("janitor: %q must be an absolute path", p)
		}
	}
	if a := c.Admission; a.MemoryPercent < 0 || a.MemoryPercent > 100 || a.DiskPercent < 0 || a.DiskPercent > 100 {
		return errors.New("admission: memory_percent and disk_percent are percentages (0 < p ≤ 100; 0 turns the check off)")
	}
	for _, p := range c.Admission.DiskPaths {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("admission.disk_paths: %q must be an absolute path", p)
		}
	}
	if c.Resources.MemoryBytes < 0 || c.Resources.CPUMillis < 0 || c.Resources.MaxExecs < 0 || c.Resources.NodeMaxExecs < 0 {
		return errors.New("resources: memory_bytes, cpu_millis, max_execs and node_max_execs must not be negative")
	}
	if r := c.Resources; r.Pids < 0 || r.RootfsBytes < 0 || r.MemoryHighPercent < 0 || r.MemoryHighPercent > 100 {
		return fmt.Errorf("resources: pids %d and rootfs_bytes %d must not be negative, memory_high_percent %d must be 0 to 100", r.Pids, r.RootfsBytes, r.MemoryHighPercent)
	}
	return nil
}

// CheckNetwork validates a network mode (the config's or a task's).
func CheckNetwork(mode string) error {
	switch mode {
	case api.NetworkSandbox, api.NetworkNone, api.NetworkHost, api.NetworkNAT:
		return nil
	}
	return fmt.Errorf("network %q: want sandbox, none, host or nat", mode)
}

// GVisorNetwork is gVisor's --network for a gvx network mode: a NAT
// sandbox's gVisor has no network of its own (its eth0 comes from the
// NAT).
func GVisorNetwork(mode string) string {
	if mode == api.NetworkNAT {
		return api.NetworkNone
	}
	return mode
}

// SentryPath resolves the gvx-sentry binary: the configured path, else the
// file next to self (the shim's own executable), else PATH. The error names
// every place it looked and how to fix it.
func (c Config) SentryPath(self string) (string, error) {
	var tried []string
	if c.Sentry != "" {
		if err := executable(c.Sentry); err != nil {
			return "", fmt.Errorf("gvx-sentry %s (from the gvx config's sentry key): %w; install it with `make install` or fix the path", c.Sentry, err)
		}
		return c.Sentry, nil
	}
	if self != "" {
		p := filepath.Join(filepath.Dir(self), api.SentryBinary)
		if executable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, api.SentryBinary)
		if executable(p) == nil {
			return p, nil
		}
	}
	tried = append(tried, "$PATH")
	return "", fmt.Errorf("gvx-sentry not found (looked in %s): install it next to containerd-shim-gvx-v2 with `make install` or set `sentry` in %s", strings.Join(tried, ", "), DefaultPath)
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	return nil
}

// Layout is the layout of the state directory.
func (c Config) Layout() api.Layout { return api.Layout{Dir: c.StateDir} }

// PoolDir is the directory of the pool this configuration's pool socket
// names (api.Layout.Pool).
func (c Config) PoolDir() api.PoolDir { return c.Layout().Pool(c.PoolSocket()) }

// PoolSocket is where `gvx pool serve` listens.
func (c Config) PoolSocket() string {
	if c.Pool.Socket != "" {
		return c.Pool.Socket
	}
	return c.Layout().DefaultPoolSocket()
}

// HookPath is the gvx-hook binary next to the resolved gvx-sentry.
func HookPath(sentry string) (string, error) {
	p := filepath.Join(filepath.Dir(sentry), api.HookBinary)
	if err := executable(p); err != nil {
		return "", fmt.Errorf("%s: %w; install it next to %s with `make install`", p, err, sentry)
	}
	return p, nil
}

// RelayPath is the gvx-relay binary next to the resolved gvx-sentry.
func RelayPath(sentry string) (string, error) {
	p := filepath.Join(filepath.Dir(sentry), api.RelayBinary)
	if err := executable(p); err != nil {
		return "", fmt.Errorf("%s: %w; install it next to %s with `make install`", p, err, sentry)
	}
	return p, nil
}

// SentryFlagList is the global flag list every gvx-sentry call gets.
func (c Config) SentryFlagList() []string {
	flags := []string{
		"--platform=" + c.Platform,
		"--network=" + GVisorNetwork(c.Network),
		"--overlay2=root:" + c.RootfsOverlay,
		// The spec's linux.seccomp (CRI's runtime/default and localhost
		// profiles, docker's default) is enforced on the guest's
		// processes by the Sentry, as runc's kernel would.
		"--oci-seccomp",
		// Set-user-ID binaries raise the guest's ids unless the spec sets
		// no_new_privs (Kubernetes' allowPrivilegeEscalation); the ids are
		// the sandbox's own: its host processes keep their uid and
		// no_new_privs.
		"--allow-suid",
		// Every gofer joins one empty network namespace gVisor pins
		// there, instead of a new namespace and a bind mount each.
		"--shared-root=" + c.Layout().SharedSentryRoot(),
		// A sandbox whose init died exits at once, not 15 s later while
		// a client (the rollout engine, gvx serve) holds an idle
		// connection to its control server; calls under way finish.
		"--control-rpc-stop-timeout=0",
	}
	if c.LogLevel == "debug" {
		flags = append(flags, "--debug")
	}
	return append(flags, c.SentryFlags...)
}
