package checkpoint

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/oci"
)

// OutsidePeers returns the peers ("ip:port") of the established TCP
// connections in tables (the text of a guest's /proc/net/tcp and
// /proc/net/tcp6) that lead out of the sandbox: to an address neither
// loopback nor the connection's own local one. Such a connection cannot
// survive a restore (its peer keeps no state of it).
func OutsidePeers(tables ...[]byte) []string {
	var out []string
	seen := map[string]bool{}
	for _, t := range tables {
		sc := bufio.NewScanner(bytes.NewReader(t))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 4 || f[3] != "01" { // the header, or not ESTABLISHED
				continue
			}
			local, lok := parseHexAddr(f[1])
			remote, rok := parseHexAddr(f[2])
			if !lok || !rok {
				continue
			}
			if remote.Addr().IsLoopback() || remote.Addr() == local.Addr() || remote.Addr().Unmap().IsLoopback() {
				continue
			}
			if p := remote.String(); !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// parseHexAddr parses /proc/net/tcp's "0100007F:1F90": the address as
// the kernel's 32-bit words in host (little-endian) order, the port in
// hex.
func parseHexAddr(s string) (netip.AddrPort, bool) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, false
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i+4 <= len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, ok := netip.AddrFromSlice(raw)
	if !ok {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr, uint16(port)), true
}

// ErrOutsideTCP says a sandbox has TCP connections to peers outside it.
type ErrOutsideTCP struct{ Peers []string }

func (e *ErrOutsideTCP) Error() string {
	return fmt.Sprintf("it has TCP connections to peers outside the sandbox (%s), which a restore cannot bring back: close them before checkpointing", strings.Join(e.Peers, ", "))
}

// OnlyLoopback says whether dev, the text of a sandbox process's
// /proc/<pid>/net/dev (its network namespace's interfaces), lists no
// interface but lo: such a sandbox can have no connection out, and need
// not be asked for its TCP tables.
func OnlyLoopback(dev []byte) bool {
	for _, l := range strings.Split(string(dev), "\n") {
		name, _, ok := strings.Cut(l, ":")
		if !ok || strings.Contains(name, "|") {
			continue // headers
		}
		if strings.TrimSpace(name) != "lo" {
			return false
		}
	}
	return true
}

// BeyondLoopback says whether host process pid's network namespace has an
// interface besides lo (OnlyLoopback of its /proc/<pid>/net/dev); false
// when it cannot be read.
func BeyondLoopback(pid int) bool {
	dev, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/net/dev")
	return err == nil && !OnlyLoopback(dev)
}

// TCPTablesCmd is the guest command that prints the tables OutsidePeers
// reads.
var TCPTablesCmd = []string{"cat", "/proc/net/tcp", "/proc/net/tcp6"}

// InnerTCPCmd is the guest command, in a proxied docker-mode sandbox,
// whose result InnerTCP reads: gvx-relay's count of the TCP sockets of
// inner network namespaces (api.IoctlInnerTCP).
var InnerTCPCmd = []string{oci.DockerRelayGuest, api.RelayInnerTCPCommand}

// InnerTCP reads the result of InnerTCPCmd run in a docker-mode guest
// (its stdout, stderr, exit code and the error of running it): nil when
// its inner containers' own network namespaces hold no TCP socket
// gVisor's restore would wait on for ever, api.InnerTCPError naming the
// ways out when they do, and an error when the count cannot be had — which
// refuses the checkpoint too: one that cannot be restored is worse than
// none.
func InnerTCP(out, stderr []byte, code int, err error) error {
	if err == nil && code != 0 {
		err = fmt.Errorf("exit %d: %s", code, strings.TrimSpace(string(stderr)))
	}
	if err != nil {
		return fmt.Errorf("counting the TCP sockets of its inner containers (%s): %w", strings.Join(InnerTCPCmd, " "), err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		return fmt.Errorf("counting the TCP sockets of its inner containers: %q is not a count", out)
	}
	if n > 0 {
		return api.InnerTCPError(n)
	}
	return nil
}
