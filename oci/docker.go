package oci

import (
	"fmt"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
)

// DockerGuestDir is where the host-side socket directory appears inside a
// docker-mode sandbox whose dockerd socket is a host socket; dockerd
// listens on its api.DockerSocketName too.
const DockerGuestDir = "/run/gvx"

// DockerSocketEnv tells the image's init where to put the host socket
// (docker mode with a host socket).
const DockerSocketEnv = "GVX_DOCKER_SOCKET"

// DockerTCPEnv tells the image's init the guest address dockerd also
// listens on (proxied docker mode: the host's socket is forwarded there).
const DockerTCPEnv = "GVX_DOCKER_TCP"

// DockerGuestPort is the guest loopback port the shim's connections are
// forwarded to in proxied docker mode: gvx-relay's (DockerRelayGuest).
const DockerGuestPort = 2375

// DockerBackendPort is the guest loopback port dockerd listens on in
// proxied docker mode (GVX_DOCKER_TCP); gvx-relay connects to it.
const DockerBackendPort = 2374

// DockerRelayGuest is where the shim bind-mounts gvx-relay (read-only)
// in a proxied docker-mode sandbox: in the guest's own /dev (a tmpfs of
// the Sentry), so that no mount point is made in the image's root.
const DockerRelayGuest = "/dev/gvx-relay"

// DockerSentryFlags are the gVisor settings dockerd needs when its socket
// is a host socket: raw and packet sockets for its bridge networking, and
// creation of host-visible Unix sockets (only: the sandbox cannot connect
// to host sockets) for the socket the host talks to. gVisor cannot save
// such a sandbox.
var DockerSentryFlags = []string{"--net-raw", "--allow-packet-socket-write", "--host-uds=create"}

// DockerProxySentryFlags are DockerSentryFlags for proxied docker mode:
// the host's socket is the shim's, which hands each connection to the
// Sentry (gVisor's port forwarding to DockerGuestPort), and the guest
// holds no host socket — the sandbox can be checkpointed.
var DockerProxySentryFlags = []string{"--net-raw", "--allow-packet-socket-write"}

// allCaps is every capability; inside a docker-mode sandbox they are the
// guest's (gVisor's), never the host's.
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE",
	"CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT",
	"CAP_SYS_NICE", "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
	"CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN",
	"CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// DockerRequested reports whether the spec's annotation asks for docker
// mode, and rejects values other than true/false.
func DockerRequested(s *specs.Spec) (requested, set bool, err error) {
	v, ok := s.Annotations[api.AnnotationDocker]
	if !ok {
		return false, false, nil
	}
	switch strings.ToLower(v) {
	case "true", "1", "yes":
		return true, true, nil
	case "false", "0", "no":
		return false, true, nil
	}
	return false, false, fmt.Errorf("annotation %s=%q: want true or false", api.AnnotationDocker, v)
}

// EnableDocker gives the task what dockerd needs inside gVisor: every
// capability inside the sandbox, no seccomp profile of the outer runtime
// (gVisor enforces the spec's on the guest; docker's default one, which
// nerdctl sets, refuses the mounts and namespaces dockerd makes — runc
// would need --privileged; dockerd applies its own profile to its
// containers), a high open-file limit, a writable root, and either the host
// socket directory hostDir mounted at DockerGuestDir or, with hostDir "",
// dockerd listening on 127.0.0.1:DockerBackendPort in the guest behind
// gvx-relay (proxied: the host's relay binary, DockerRelay).
func EnableDocker(s *specs.Spec, hostDir string) {
	if s.Linux != nil {
		s.Linux.Seccomp = nil
	}
	p := s.Process
	if p.Capabilities == nil {
		p.Capabilities = &specs.LinuxCapabilities{}
	}
	caps := append([]string(nil), allCaps...)
	p.Capabilities.Bounding, p.Capabilities.Effective, p.Capabilities.Permitted = caps, caps, caps
	p.NoNewPrivileges = false
	nofile := false
	for i, r := range p.Rlimits {
		if r.Type == "RLIMIT_NOFILE" {
			p.Rlimits[i].Hard, p.Rlimits[i].Soft = 1048576, 1048576
			nofile = true
		}
	}
	if !nofile {
		p.Rlimits = append(p.Rlimits, specs.POSIXRlimit{Type: "RLIMIT_NOFILE", Hard: 1048576, Soft: 1048576})
	}
	if s.Root != nil {
		s.Root.Readonly = false
	}
	if hostDir == "" {
		p.Env = append(p.Env, fmt.Sprintf("%s=127.0.0.1:%d", DockerTCPEnv, DockerBackendPort))
		return
	}
	s.Mounts = append(s.Mounts, specs.Mount{Destination: DockerGuestDir, Type: "bind", Source: hostDir, Options: []string{"rbind", "rw"}})
	p.Env = append(p.Env, DockerSocketEnv+"="+filepath.Join(DockerGuestDir, api.DockerSocketName))
}

// DockerRelay puts gvx-relay (the host's binary relay) in front of the
// task's init in proxied docker mode: bind-mounted read-only at
// DockerRelayGuest, it starts its server on 127.0.0.1:DockerGuestPort
// (relaying to dockerd on DockerBackendPort) and executes the init. On
// gvx's NAT (nat) the server listens on every address instead and serves
// only the NAT's connections (from api.NATGateway), which reach the
// guest's eth0: the NAT publishes its port on the host.
func DockerRelay(s *specs.Spec, relay string, nat bool) {
	s.Mounts = append(s.Mounts, specs.Mount{Destination: DockerRelayGuest, Type: "bind", Source: relay, Options: []string{"rbind", "ro"}})
	args := []string{DockerRelayGuest, fmt.Sprintf("127.0.0.1:%d", DockerGuestPort), fmt.Sprintf("127.0.0.1:%d", DockerBackendPort), "--"}
	if nat {
		args = []string{DockerRelayGuest, "-peer", api.NATGateway.String(), fmt.Sprintf("0.0.0.0:%d", DockerGuestPort), fmt.Sprintf("127.0.0.1:%d", DockerBackendPort), "--"}
	}
	s.Process.Args = append(args, s.Process.Args...)
}
