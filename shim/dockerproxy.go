package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/internal/dockerapi"
	"github.com/gvxrun/gvx/internal/relay"
	"github.com/gvxrun/gvx/oci"
	"github.com/gvxrun/gvx/sandbox"
	"github.com/gvxrun/gvx/sandbox/control"
)

// Proxied docker mode: the host's socket of the inner dockerd
// (api.Layout.DockerSocket) is the shim's listener. For each connection
// the shim hands one end of a socket pair to the sandbox's Sentry, which
// connects it to gvx-relay on the guest's 127.0.0.1:oci.DockerGuestPort
// (gVisor's port forwarding on its netstack); gvx-relay connects to
// dockerd, and the shim and the relay speak internal/relay's
// flow-controlled frames over the pair (gVisor's forwarder drops what
// its writes do not take). On gvx's NAT, whose gVisor network has no
// port forwarding, the NAT publishes the relay's port (on the guest's
// eth0, serving the NAT's address alone) on a unix socket beside the
// shim's (api.Layout.DockerRelaySocket), and each connection is a
// connection to it. The guest holds no host socket, so gVisor can save
// the sandbox; a restored sandbox's shim publishes its own listener.

// socketFile is a unix socket the shim bound on the host, known by its
// inode so that a release removes it only while the path is still its
// own (a rollback moves a restored sandbox's socket onto the path of the
// sandbox it replaces).
type socketFile struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// remove removes the socket and its directory (once empty) if the path is
// still the socket the shim bound.
func (s *socketFile) remove() error {
	var st unix.Stat_t
	if err := unix.Lstat(s.Path, &st); err == nil && st.Dev == s.Dev && st.Ino == s.Ino {
		if err := os.Remove(s.Path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	dir := filepath.Dir(s.Path)
	_ = os.Remove(dir)               // if empty: another sandbox's socket may be there now
	_ = os.Remove(filepath.Dir(dir)) // the namespace directory, if empty
	return nil
}

// dockerProxy holds the listener and forwards its connections.
type dockerProxy struct {
	ln    *net.UnixListener
	id    string // the sandbox's root container
	state string // gVisor's state file of the sandbox
	// relay, on gvx's NAT, is the unix socket where the NAT publishes
	// gvx-relay's guest port; "" on gVisor's netstack (port forwarding).
	relay string

	mu   sync.Mutex
	sock string // the sandbox's control socket, once read
}

// listenUnix binds a unix socket at path, which may be longer than a
// socket address holds (bound through its directory's descriptor then).
func listenUnix(path string) (*net.UnixListener, error) {
	addr, release, err := api.UnixAddr(path)
	if err != nil {
		return nil, err
	}
	defer release()
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// The path is the record's to remove (only while it is the shim's).
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

// publishDocker binds the host socket of task r's dockerd in dir (made
// first, root's alone), recording it before and after.
func publishDocker(r *record, dir string) (*net.UnixListener, error) {
	path := filepath.Join(dir, api.DockerSocketName)
	r.DockerSocket = &socketFile{Path: path}
	if err := r.save(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !os.IsExist(err) {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	ln, err := listenUnix(path)
	if errors.Is(err, unix.EADDRINUSE) && !api.UnixListening(path) {
		// A socket no process serves: left by a shim of a task with
		// this id that was killed before it could release it (its
		// record lost, or saved before the socket's inode).
		if rerr := os.Remove(path); rerr != nil {
			return nil, fmt.Errorf("docker mode: remove stale socket %s: %w", path, rerr)
		}
		ln, err = listenUnix(path)
	}
	if err != nil {
		return nil, fmt.Errorf("docker mode: %w (is a task with this id already running?)", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		ln.Close()
		return nil, fmt.Errorf("docker mode: socket %s: %w", path, err)
	}
	r.DockerSocket.Dev, r.DockerSocket.Ino = st.Dev, st.Ino
	if err := r.save(); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// serve forwards the listener's connections until it is closed.
func (p *dockerProxy) serve(ctx context.Context) {
	for {
		c, err := p.ln.AcceptUnix()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.G(ctx).WithError(err).Warnf("gvx shim: docker socket of %s", p.id)
			}
			return
		}
		stream, err := p.forward()
		if err != nil {
			// Before gvx-relay listens (or after the sandbox ended) the
			// client sees its connection closed.
			c.Close()
			log.G(ctx).WithError(err).Debugf("gvx shim: docker connection to %s", p.id)
			continue
		}
		go func() {
			if err := relay.Host(c, stream, relayHelloTimeout); err != nil {
				log.G(ctx).WithError(err).Debugf("gvx shim: docker connection to %s", p.id)
			}
		}()
	}
}

// relayHelloTimeout bounds the wait for gvx-relay's Hello (it sends it
// once dockerd took the connection).
const relayHelloTimeout = 30 * time.Second

// streamBuffer is the send buffer of the Sentry's end of a forwarded
// stream: the relay never has more than relay.Window of data frames
// (each charged relay.FrameCost) unacknowledged, so the Sentry's writes
// of its 16 KiB reads never find it full and never come up short
// (gVisor's forwarder drops what a write does not take).
const streamBuffer = 8 << 20

// forward makes the stream of one connection: a socket pair whose one end
// the Sentry connects to gvx-relay in the guest (gVisor's port forwarding,
// a control call on a connection of its own: gVisor's control server
// outlives the sandbox's kernel by up to its --control-rpc-stop-timeout
// (15 s) while a connection is open, so the proxy keeps none open between
// connections); the other end is returned. On the NAT it is a connection
// to the NAT's socket of the relay's port.
func (p *dockerProxy) forward() (net.Conn, error) {
	if p.relay != "" {
		return dialUnix(p.relay)
	}
	p.mu.Lock()
	sock := p.sock
	p.mu.Unlock()
	if sock == "" {
		var err error
		if sock, err = sandbox.ControlSocket(p.state); err != nil {
			return nil, err
		}
		p.mu.Lock()
		p.sock = sock
		p.mu.Unlock()
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	if err := unix.SetsockoptInt(fds[1], unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, streamBuffer); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, fmt.Errorf("docker stream: SO_SNDBUFFORCE: %w", err)
	}
	sentryEnd := os.NewFile(uintptr(fds[1]), "docker-stream")
	defer sentryEnd.Close()
	ours := os.NewFile(uintptr(fds[0]), "docker-stream")
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		sentryEnd.Close()
		return nil, fmt.Errorf("docker stream: %w", err)
	}
	stream := fc.(*net.UnixConn)
	ctl, err := control.Dial(sock)
	if err != nil {
		stream.Close()
		return nil, err
	}
	defer ctl.Close()
	if err := ctl.PortForward(p.id, oci.DockerGuestPort, sentryEnd); err != nil {
		stream.Close()
		return nil, err
	}
	return stream, nil
}

// dialUnix connects to the unix socket at path, which may be longer
// than a socket address holds (reached through its directory's
// descriptor then).
func dialUnix(path string) (net.Conn, error) {
	addr, release, err := api.UnixAddr(path)
	if err != nil {
		return nil, err
	}
	defer release()
	c, err := net.Dial("unix", addr)
	if err != nil {
		return nil, fmt.Errorf("docker stream through the NAT: %w", err)
	}
	return c, nil
}

// close stops accepting (the socket file is the record's to remove).
func (p *dockerProxy) close() { p.ln.Close() }

// restoreBridges gives restored docker-mode task id's guest back the
// bridges of dockerd's networks. gVisor's restore rebuilds its network
// stack's links from the sandbox's network namespace alone, so the
// devices dockerd made in the guest (docker0, br-…, the veths of its
// containers) are gone while dockerd remembers them, and a new container
// could not join its network. dockerd is asked (through the shim's own
// socket) for its bridge networks, and `ip` in the guest makes each
// again with its gateway address. Containers that ran at the checkpoint
// run on without their network.
func (t *gvxTask) restoreBridges(ctx context.Context, id string) error {
	if t.rec.DockerSocket == nil {
		return nil
	}
	d := dockerapi.New(t.rec.DockerSocket.Path)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := d.WaitReady(wctx, nil); err != nil {
		return err
	}
	bridges, err := d.Bridges(wctx)
	if err != nil {
		return err
	}
	specs, err := bridgeSpecs(bridges)
	if err != nil {
		return err
	}
	if len(specs) == 0 {
		return fmt.Errorf("dockerd lists no bridge network with a subnet")
	}
	// gvx-relay makes them through route netlink in one guest process;
	// a guest restored with a gvx-relay from before that (it answers
	// with its usage) gets them from a shell running ip.
	argv := []string{oci.DockerRelayGuest, api.RelayBridgesCommand}
	for _, b := range specs {
		argv = append(argv, b.device+"="+b.addr.String())
	}
	_, stderr, code, err := t.runIn(ctx, id, argv, 30*time.Second)
	if err == nil && code == 2 && bytes.Contains(stderr, []byte("usage:")) {
		_, stderr, code, err = t.runIn(ctx, id, []string{"sh", "-c", bridgeScript(specs)}, 30*time.Second)
	}
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(string(stderr)))
	}
	if err != nil {
		return fmt.Errorf("re-create dockerd's bridges in the guest: %w", err)
	}
	return nil
}

// bridgeSpec is one of dockerd's bridges to make in a restored guest: its
// device and the gateway's address with the subnet's length.
type bridgeSpec struct {
	device string
	addr   netip.Prefix
}

// deviceName is what bridgeSpecs accepts as a device name.
var deviceName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,15}$`)

// bridgeSpecs checks dockerd's bridges and gives what makes each again.
func bridgeSpecs(bridges []dockerapi.Bridge) ([]bridgeSpec, error) {
	var out []bridgeSpec
	for _, br := range bridges {
		if !deviceName.MatchString(br.Device) {
			return nil, fmt.Errorf("docker network bridge %q: not a device name", br.Device)
		}
		gw, err := netip.ParseAddr(br.Gateway)
		if err != nil {
			return nil, fmt.Errorf("docker network %s: gateway: %w", br.Device, err)
		}
		sub, err := netip.ParsePrefix(br.Subnet)
		if err != nil {
			return nil, fmt.Errorf("docker network %s: subnet: %w", br.Device, err)
		}
		out = append(out, bridgeSpec{device: br.Device, addr: netip.PrefixFrom(gw, sub.Bits())})
	}
	return out, nil
}

// bridgeScript is the shell script that makes bridges with ip, for a
// guest whose gvx-relay predates its bridges subcommand.
func bridgeScript(bridges []bridgeSpec) string {
	var b strings.Builder
	b.WriteString("set -e\n")
	for _, br := range bridges {
		fmt.Fprintf(&b, "ip link show %[1]s >/dev/null 2>&1 || ip link add %[1]s type bridge\n", br.device)
		fmt.Fprintf(&b, "ip addr show dev %[1]s | grep -qF ' %[2]s ' || ip addr add %[2]s dev %[1]s\n", br.device, br.addr)
		fmt.Fprintf(&b, "ip link set %s up\n", br.device)
		fmt.Fprintf(&b, "ip route replace %s dev %s\n", br.addr.Masked(), br.device)
	}
	return b.String()
}
