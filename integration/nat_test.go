package integration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// natHTTP is an HTTP server on 127.0.0.1 answering body, counting its
// connections.
type natHTTP struct {
	port  int
	conns atomic.Int64
	// last is when the last connection was accepted (UnixNano).
	last atomic.Int64
}

func startNATHTTP(t *testing.T, body string) *natHTTP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &natHTTP{port: ln.Addr().(*net.TCPAddr).Port}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				h.conns.Add(1)
				h.last.Store(time.Now().UnixNano())
			}
		},
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return h
}

// natDNS is a DNS server on one 127.0.0.1 port, UDP and TCP (RFC 7766
// framing, several queries per connection), answering A queries for the
// names in zone. Over UDP it answers the names in tcpOnly truncated (TC
// set, no records), so only a resolver that asks over TCP learns them.
type natDNS struct {
	addr       string
	udpQueries atomic.Int64
	tcpQueries atomic.Int64
}

func startNATDNS(t *testing.T, zone map[string]netip.Addr, tcpOnly ...string) *natDNS {
	t.Helper()
	var (
		ln  net.Listener
		pc  net.PacketConn
		err error
	)
	// The same port for both: a free TCP port may be taken for UDP.
	for try := 0; try < 10; try++ {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if pc, err = net.ListenPacket("udp", ln.Addr().String()); err == nil {
			break
		}
		ln.Close()
	}
	if err != nil {
		t.Fatalf("a DNS port free for TCP and UDP: %v", err)
	}
	t.Cleanup(func() { ln.Close(); pc.Close() })
	d := &natDNS{addr: ln.Addr().String()}
	answer := func(q []byte, udp bool) []byte {
		var m dnsmessage.Message
		if m.Unpack(q) != nil || len(m.Questions) != 1 {
			return nil
		}
		q0 := m.Questions[0]
		name := strings.ToLower(q0.Name.String())
		m.Header.Response, m.Header.Authoritative = true, true
		if a, ok := zone[name]; ok && q0.Type == dnsmessage.TypeA {
			if udp && slices.Contains(tcpOnly, name) {
				m.Header.Truncated = true
			} else {
				m.Answers = []dnsmessage.Resource{{
					Header: dnsmessage.ResourceHeader{Name: q0.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: 60},
					Body:   &dnsmessage.AResource{A: a.As4()},
				}}
			}
		} else if !ok {
			m.Header.RCode = dnsmessage.RCodeNameError
		}
		out, err := m.Pack()
		if err != nil {
			return nil
		}
		return out
	}
	go func() {
		buf := make([]byte, 1500)
		for {
			k, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			d.udpQueries.Add(1)
			if out := answer(buf[:k], true); out != nil {
				pc.WriteTo(out, from)
			}
		}
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for {
					var l [2]byte
					if _, err := io.ReadFull(c, l[:]); err != nil {
						return
					}
					q := make([]byte, binary.BigEndian.Uint16(l[:]))
					if _, err := io.ReadFull(c, q); err != nil {
						return
					}
					d.tcpQueries.Add(1)
					if out := answer(q, false); out != nil {
						c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...))
					}
				}
			}()
		}
	}()
	return d
}

func natAnnotations(t *testing.T, n api.NAT) []string {
	t.Helper()
	enc, err := api.EncodeNAT(n)
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--annotation", api.AnnotationNetwork + "=" + api.NetworkNAT, "--annotation", api.AnnotationNAT + "=" + enc}
}

// natStats reads the NAT counters of task id.
func natStats(t *testing.T, id string) api.NATStats {
	t.Helper()
	root := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS))
	data, err := os.ReadFile(root.NATStats(id))
	if err != nil {
		t.Fatalf("NAT stats of %s: %v", id, err)
	}
	var s api.NATStats
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("NAT stats of %s: %v (%q)", id, err, data)
	}
	return s
}

// logNATOnFailure logs the NAT log of task id if the test fails (while
// the task still exists).
func logNATOnFailure(t *testing.T, id string) func() {
	return func() {
		if t.Failed() {
			root := api.SentryRoot(filepath.Join(harness.State.SentryRoot(id), testNS))
			data, _ := os.ReadFile(root.NATLog(id))
			t.Logf("NAT log of %s:\n%s", id, data)
		}
	}
}

func ctrExec(t *testing.T, id, execID string, args ...string) result {
	t.Helper()
	r, err := e.ctrResult(context.Background(), append([]string{"task", "exec", "--exec-id", execID, id}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestNATEgress: a NAT sandbox sees eth0 10.0.2.15 and DNS 10.0.2.3,
// resolves a name through a DNS server the test runs on loopback, reaches
// a host HTTP server on 127.0.0.1 through 10.0.2.2 on the port its policy
// allows, and is refused at once (an RST, counted, no host socket opened)
// on another port where a server listens too; its NAT process is gvx-nat
// with the sandbox's credentials.
func TestNATEgress(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	allowed := startNATHTTP(t, "hello-from-host")
	other := startNATHTTP(t, "must-not-be-reached")
	dns := startNATDNS(t, map[string]netip.Addr{"host.gvx.test.": api.NATGateway, "tcp.gvx.test.": api.NATGateway}, "tcp.gvx.test.")
	tcpdns := buildTestdata(t, "tcpdns")
	buildTestdataIn(t, filepath.Dir(tcpdns), "icmpecho")
	id := "nat-egress"
	cleanupTask(t, id)
	args := append([]string{"run", "-d", "--runtime", runtime}, natAnnotations(t, api.NAT{
		DNS:    []string{dns.addr},
		Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", allowed.port)}},
	})...)
	args = append(args, "--mount", "type=bind,src="+filepath.Dir(tcpdns)+",dst=/t,options=rbind:ro")
	mustCtr(t, append(args, busybox, id, "sleep", "120")...)
	defer logNATOnFailure(t, id)()

	r := ctrExec(t, id, "ip", "sh", "-c", "ip -4 addr show eth0; ip route; cat /etc/resolv.conf")
	for _, want := range []string{"10.0.2.15/24", "default via 10.0.2.2", "nameserver 10.0.2.3"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("guest network lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	// The file is in the task's root filesystem (no mount of its own),
	// the sandbox root's.
	r = ctrExec(t, id, "resolv", "sh", "-c", "stat -c '%u:%g %a' /etc/resolv.conf; grep -c ' /etc/resolv.conf ' /proc/self/mountinfo")
	if r.stdout != "0:0 644\n0\n" {
		t.Errorf("guest /etc/resolv.conf: want owner 0:0, mode 644 and no mount; got\n%s%s", r.stdout, r.stderr)
	}
	r = ctrExec(t, id, "ns", "nslookup", "host.gvx.test", "10.0.2.3")
	if !strings.Contains(r.stdout, "10.0.2.2") {
		t.Errorf("nslookup through 10.0.2.3: code %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = ctrExec(t, id, "get", "wget", "-q", "-O", "-", fmt.Sprintf("http://host.gvx.test:%d/", allowed.port))
	if r.code != 0 || r.stdout != "hello-from-host" {
		t.Errorf("wget through the NAT: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	// DNS over TCP: a name the resolver answers truncated over UDP is
	// resolved over TCP to 10.0.2.3:53, two names on the guest's
	// connections, each query reaching the resolver over TCP.
	udpBefore := dns.udpQueries.Load()
	r = ctrExec(t, id, "tcpdns", "/t/tcpdns", "10.0.2.3:53", "tcp.gvx.test", "host.gvx.test")
	if r.code != 0 || r.stdout != "tcp.gvx.test 10.0.2.2\nhost.gvx.test 10.0.2.2\n" {
		t.Errorf("DNS over TCP through 10.0.2.3: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	if q := dns.tcpQueries.Load(); q < 2 {
		t.Errorf("the resolver saw %d TCP queries, want one per name at least", q)
	}
	if q := dns.udpQueries.Load(); q != udpBefore {
		t.Errorf("the resolver saw %d UDP queries during the TCP lookups", q-udpBefore)
	}
	// The counters are written with a delay: wait until they show the
	// allowed flow's host socket before taking them as "before".
	var before api.NATStats
	waitFor(t, "the allowed flow in the NAT's counters", func() bool {
		before = natStats(t, id)
		return before.HostSockets >= 1
	})
	start := time.Now()
	r = ctrExec(t, id, "refused", "wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", other.port))
	took := time.Since(start)
	if r.code == 0 || !strings.Contains(r.stderr, "refused") {
		t.Errorf("wget to a port the policy refuses: code %d stdout %q stderr %q; want connection refused", r.code, r.stdout, r.stderr)
	}
	if took > 5*time.Second {
		t.Errorf("the refusal took %v: want an immediate RST, not a timeout", took)
	}
	// Echo requests from the guest's ping socket: the gateway answers
	// itself; one the policy refuses (a private address) gets no reply
	// (gVisor's ping sockets drop the gateway's "administratively
	// prohibited") and opens no host socket.
	r = ctrExec(t, id, "ping-gw", "/t/icmpecho", "10.0.2.2", "5s")
	if r.code != 0 || r.stdout != "reply from 10.0.2.2 seq 7\n" {
		t.Errorf("echo to the gateway: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = ctrExec(t, id, "ping", "/t/icmpecho", "10.9.9.9", "1s")
	if r.code != 1 || r.stdout != "no reply\n" {
		t.Errorf("echo to a private address: code %d stdout %q stderr %q; want no reply", r.code, r.stdout, r.stderr)
	}
	time.Sleep(100 * time.Millisecond) // the stats file's write delay
	after := natStats(t, id)
	if after.Refused < before.Refused+2 {
		t.Errorf("NAT refusals %d → %d: the refused connection and echo were not both counted", before.Refused, after.Refused)
	}
	if after.HostSockets != before.HostSockets {
		t.Errorf("NAT host sockets %d → %d: a refused flow opened a host socket", before.HostSockets, after.HostSockets)
	}
	if n := other.conns.Load(); n != 0 {
		t.Errorf("the refused server saw %d connections", n)
	}
	if allowed.conns.Load() != 1 {
		t.Errorf("the allowed server saw %d connections, want 1", allowed.conns.Load())
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", after.Pid))
	if err != nil {
		t.Fatalf("the NAT process %d: %v", after.Pid, err)
	}
	for _, want := range []string{"Uid:\t100000\t100000\t100000\t100000", "CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(string(status), want) {
			t.Errorf("the NAT process lacks %q:\n%s", want, status)
		}
	}
	// The NAT is gvx-nat, the small binary, not a gvx-sentry with all of
	// gVisor's start-up memory (sentry/natproc).
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", after.Pid)); err != nil || filepath.Base(exe) != api.NATBinary {
		t.Errorf("the NAT process runs %q (%v), want %s", exe, err, api.NATBinary)
	}
	mustCtr(t, "task", "kill", "-s", "SIGKILL", id)
	waitStatus(t, id, "STOPPED")
	mustCtr(t, "task", "rm", id)
	mustCtr(t, "container", "rm", id)
}

// TestNATPublish: a server inside answers on a published TCP port (on
// 127.0.0.1) and a published unix socket (mode 0600, owned by its
// directory's owner); kill -9 of the sandbox leaves no process (the NAT
// exits with the sandbox), and the socket goes at teardown.
func TestNATPublish(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	const owner = 4321
	if err := os.Chown(dir, owner, owner); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "ep.sock")
	port := freePort(t)
	id := "nat-publish"
	cleanupTask(t, id)
	args := append([]string{"run", "-d", "--runtime", runtime}, natAnnotations(t, api.NAT{
		Ports: []string{fmt.Sprintf("%d:8080", port), "unix:" + sock + ":8080"},
	})...)
	mustCtr(t, append(args, busybox, id, "sh", "-c", "mkdir /www && echo hi-from-inside > /www/index.html && exec httpd -f -p 8080 -h /www")...)
	pid := taskPid(t, id)

	get := func(c *http.Client, url string) string {
		t.Helper()
		var last error
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			resp, err := c.Get(url)
			if err != nil {
				last = err
				continue
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(b)
		}
		t.Fatalf("GET %s: %v", url, last)
		return ""
	}
	if got := get(http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/", port)); got != "hi-from-inside\n" {
		t.Errorf("published TCP port: %q", got)
	}
	unixClient := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	if got := get(unixClient, "http://ep/"); got != "hi-from-inside\n" {
		t.Errorf("published unix socket: %q", got)
	}
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 || st.Uid != owner || st.Gid != owner {
		t.Errorf("socket %s: mode %v owner %d:%d, want a socket 0600 of %d:%d", sock, fi.Mode(), st.Uid, st.Gid, owner, owner)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, id, "STOPPED")
	mustCtr(t, "task", "rm", id)
	mustCtr(t, "container", "rm", id)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s after teardown: %v, want it gone", sock, err)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
		c.Close()
		t.Errorf("published port %d still accepts after teardown", port)
	}
}

// TestNATBadInput: a malformed mapping, an unknown policy key, a bad rule,
// a port in use and a socket in a missing directory each fail the create
// with an error naming the problem, and leave nothing behind.
func TestNATBadInput(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := busy.Addr().(*net.TCPAddr).Port
	for i, tc := range []struct {
		nat  string
		want string
	}{
		{`{"ports":["80"]}`, "no guest port"},
		{`{"ports":["8080:80/sctp"]}`, "neither tcp nor udp"},
		{`{"egres":{"default":"deny"}}`, `unknown field "egres"`},
		{`{"egress":{"default":"maybe"}}`, "want allow or deny"},
		{`{"egress":{"allow":["10.0.0.0/33"]}}`, "egress rule"},
		{fmt.Sprintf(`{"ports":["%d:80"]}`, busyPort), "address already in use"},
		{`{"ports":["unix:/nonexistent-gvx-dir/x.sock:80"]}`, "create it first"},
	} {
		id := fmt.Sprintf("nat-bad-%d", i)
		cleanupTask(t, id)
		r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime,
			"--annotation", api.AnnotationNetwork+"=nat", "--annotation", api.AnnotationNAT+"="+tc.nat, busybox, id, "true")
		if err != nil {
			t.Fatal(err)
		}
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: code %d stderr %q; want a failure saying %q", tc.nat, r.code, r.stderr, tc.want)
		}
		e.ctr(context.Background(), "container", "rm", id)
	}
	r, err := e.ctrResult(context.Background(), "run", "--rm", "--runtime", runtime,
		"--annotation", api.AnnotationNetwork+"=natt", busybox, "nat-bad-mode", "true")
	if err != nil {
		t.Fatal(err)
	}
	if r.code == 0 || !strings.Contains(r.stderr, "want sandbox, none, host or nat") {
		t.Errorf("unknown network mode: code %d stderr %q", r.code, r.stderr)
	}
	e.ctr(context.Background(), "container", "rm", "nat-bad-mode")
}

// hostNet is the host's network state a NAT sandbox must not touch.
type hostNet struct {
	iptables, links string
	// conntrack are the host's connection tracking entries (each flow's
	// original tuple), or its count where entries cannot be listed.
	conntrack map[string]bool
}

// changes lists how the host's network differs in after from s: other
// rules or links, and conntrack entries that are new (entries of earlier
// flows expiring meanwhile are no change).
func (s hostNet) changes(after hostNet) []string {
	var out []string
	if s.iptables != after.iptables {
		out = append(out, "iptables:\n"+s.iptables+"\n→\n"+after.iptables)
	}
	if s.links != after.links {
		out = append(out, "links:\n"+s.links+"\n→\n"+after.links)
	}
	for e := range after.conntrack {
		if !s.conntrack[e] {
			out = append(out, "new conntrack entry: "+e)
		}
	}
	return out
}

// hostNetState reads the host's iptables rules, links and conntrack
// entries, leaving out the entries of flows to 127.0.0.1 ports in own:
// the NAT's own host sockets, which the host's conntrack tracks like any
// process's once something (a CNI portmap rule) has turned it on in the
// host's namespace.
func hostNetState(t *testing.T, own ...int) hostNet {
	t.Helper()
	var s hostNet
	if out, err := exec.Command("iptables-save").Output(); err == nil {
		var keep []string
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(l, "#") { // timestamps
				keep = append(keep, strings.TrimSpace(regexpCounters.ReplaceAllString(l, "")))
			}
		}
		s.iptables = strings.Join(keep, "\n")
	} else {
		s.iptables = "iptables-save: " + err.Error()
	}
	out, err := exec.Command("ip", "-o", "link").Output()
	if err != nil {
		t.Fatal(err)
	}
	s.links = string(out)
	s.conntrack = map[string]bool{}
	if b, err := os.ReadFile("/proc/net/nf_conntrack"); err == nil {
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if l != "" && !ownFlow(l, own) {
				s.conntrack[flowTuple(l)] = true
			}
		}
	} else if b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count"); err == nil {
		s.conntrack["count "+strings.TrimSpace(string(b))] = true
	}
	return s
}

// flowTuple is conntrack entry l's protocol and original tuple.
func flowTuple(l string) string {
	f := strings.Fields(l)
	var out []string
	if len(f) > 2 {
		out = append(out, f[2])
	}
	seen := map[string]bool{}
	for _, x := range f {
		for _, k := range []string{"src=", "dst=", "sport=", "dport="} {
			if strings.HasPrefix(x, k) && !seen[k] {
				seen[k] = true
				out = append(out, x)
			}
		}
	}
	return strings.Join(out, " ")
}

// ownFlow says whether conntrack entry l is of a flow to 127.0.0.1 at one
// of ports (its original direction).
func ownFlow(l string, ports []int) bool {
	dst, dport := "", ""
	for _, f := range strings.Fields(l) {
		switch {
		case dst == "" && strings.HasPrefix(f, "dst="):
			dst = strings.TrimPrefix(f, "dst=")
		case dport == "" && strings.HasPrefix(f, "dport="):
			dport = strings.TrimPrefix(f, "dport=")
		}
	}
	for _, p := range ports {
		if dst == "127.0.0.1" && dport == strconv.Itoa(p) {
			return true
		}
	}
	return false
}

// regexpCounters are iptables-save's packet and byte counters.
var regexpCounters = regexp.MustCompile(`\[\d+:\d+\]`)

// TestNATHostUnchanged: 200 NAT sandboxes (GVX_NAT_SANDBOXES) started, 20
// at a time, each resolving through and connecting out of its NAT, then
// stopped: the host's iptables rules and links are the same before,
// during and after, and no conntrack entry appears but those of the NAT's
// own host sockets (to the test's server and DNS port).
func TestNATHostUnchanged(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	total, batch := 200, 20
	if v := os.Getenv("GVX_NAT_SANDBOXES"); v != "" {
		fmt.Sscan(v, &total)
	}
	srv := startNATHTTP(t, "ok")
	// The NAT's host sockets: to the server, and DNS to 127.0.0.1:9.
	own := []int{srv.port, 9}
	before := hostNetState(t, own...)
	enc := natAnnotations(t, api.NAT{DNS: []string{"127.0.0.1:9"}, Egress: &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}}})
	started := time.Now()
	for n := 0; n < total; n += batch {
		var ids []string
		errs := make(chan error, batch)
		for i := n; i < n+batch && i < total; i++ {
			id := fmt.Sprintf("nat-many-%03d", i)
			ids = append(ids, id)
			cleanupTask(t, id)
			go func() {
				_, stderr, err := e.ctr(context.Background(), append(append([]string{"run", "-d", "--runtime", runtime}, enc...), busybox, id,
					"sh", "-c", fmt.Sprintf("wget -q -O /dev/null http://10.0.2.2:%d/ && sleep 60", srv.port))...)
				if err != nil {
					err = fmt.Errorf("%s: %v: %s", id, err, stderr)
				}
				errs <- err
			}()
		}
		for range ids {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if ch := before.changes(hostNetState(t, own...)); len(ch) > 0 {
			t.Errorf("with %d NAT sandboxes running the host's network changed:\n%s", len(ids), strings.Join(ch, "\n"))
		}
		for _, id := range ids {
			mustCtr(t, "task", "kill", "-s", "SIGKILL", id)
		}
		for _, id := range ids {
			waitStatus(t, id, "STOPPED")
			mustCtr(t, "task", "rm", id)
			mustCtr(t, "container", "rm", id)
		}
	}
	t.Logf("%d NAT sandboxes in %v; the host server saw %d connections", total, time.Since(started).Round(time.Second), srv.conns.Load())
	if ch := before.changes(hostNetState(t, own...)); len(ch) > 0 {
		t.Errorf("after %d NAT sandboxes the host's network changed:\n%s", total, strings.Join(ch, "\n"))
	}
}

// startNATPool serves a warm pool of one sandbox of a config with
// network = "nat" whose egress allows srv, stopped at the test's end.
func startNATPool(t *testing.T, srv *natHTTP) *harness.Pool {
	t.Helper()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "pool.toml")
	body := fmt.Sprintf("network = \"nat\"\n[nat.egress]\nallow = [\"10.0.2.2:%d\"]\n[pool]\nsize = 1\nsocket = %q\n", srv.port, filepath.Join(dir, "pool.sock"))
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := harness.ServePool(context.Background(), e.gvxBin, cfg, 1)
	return stopAtCleanup(t, p, err)
}

// TestPoolNAT: a warm pool of a handler with network = "nat" boots NAT
// sandboxes; a task adopts one and goes out through its NAT with the
// config's policy; a task with NAT settings of its own boots its own
// sandbox instead.
func TestPoolNAT(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	srv := startNATHTTP(t, "hello-pool-nat")
	p := startNATPool(t, srv)
	runAdopted(t, p, "poolnat1", nil, "sleep", "120")
	r := ctrExec(t, "poolnat1", "ip", "sh", "-c", "ip -4 addr show eth0; cat /etc/resolv.conf")
	if !strings.Contains(r.stdout, "10.0.2.15/24") || !strings.Contains(r.stdout, "nameserver 10.0.2.3") {
		t.Errorf("adopted task's network: %q %q", r.stdout, r.stderr)
	}
	r = ctrExec(t, "poolnat1", "get", "wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", srv.port))
	if r.code != 0 || r.stdout != "hello-pool-nat" {
		t.Errorf("adopted task through the pool sandbox's NAT: code %d %q %q", r.code, r.stdout, r.stderr)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("the host server saw %d connections, want 1", n)
	}

	cleanupTask(t, "poolnat2")
	args := append([]string{"run", "-d", "--runtime", runtime, "--runtime-config-path", p.Config}, natAnnotations(t, api.NAT{
		Egress: &api.Egress{Allow: []string{"10.0.2.2:1"}},
	})...)
	mustCtr(t, append(args, busybox, "poolnat2", "sleep", "120")...)
	if sb := adopted("poolnat2"); sb != "" {
		t.Errorf("a task with its own NAT policy adopted pool sandbox %s", sb)
	}
}

// TestPoolNATReset: a task narrows its pool NAT sandbox's egress (as
// gvx serve's updateNetwork does, on the NAT's control socket); deleted,
// its sandbox is reset and goes back to the pool with the narrowing
// lifted, and the next task, in the same sandbox, has the pool's policy.
func TestPoolNATReset(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	srv := startNATHTTP(t, "hello-pool-nat")
	p := startNATPool(t, srv)
	get := []string{"wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", srv.port)}
	sb := runAdopted(t, p, "poolnatr1", nil, "sleep", "120")
	ctl := harness.SandboxDir(sb).Root().NATControl(sb)
	if err := api.SetNATNarrow(context.Background(), ctl, &api.Narrow{Default: "deny"}); err != nil {
		t.Fatalf("narrow the pool sandbox's NAT: %v", err)
	}
	if r := ctrExec(t, "poolnatr1", "get", get...); r.code == 0 || srv.conns.Load() != 0 {
		t.Fatalf("a narrowed NAT let the task out: code %d %q, %d host connections", r.code, r.stdout, srv.conns.Load())
	}
	deleteTask(t, "poolnatr1")
	waitResets(t, p, 1)
	if sb2 := runAdopted(t, p, "poolnatr2", nil, "sleep", "120"); sb2 != sb {
		t.Fatalf("the next task adopted %s, not the reset %s", sb2, sb)
	}
	// timeout bounds a stalled connect (busybox 1.35's `wget -T` crashes);
	// the exec's deadline bounds an exec whose end is not reported.
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	start := time.Now()
	timed := append([]string{"task", "exec", "--exec-id", "get2", "poolnatr2", "timeout", "15"}, get...)
	r, err := e.ctrResult(ctx, timed...)
	took := time.Since(start)
	if err != nil || r.code != 0 || r.stdout != "hello-pool-nat" || took > 10*time.Second {
		var seen string
		if at := srv.last.Load(); at != 0 {
			seen = fmt.Sprintf("the host server accepted its last connection %v after the exec began", time.Unix(0, at).Sub(start).Round(time.Millisecond))
		} else {
			seen = "the host server accepted no connection"
		}
		diag, _ := e.ctrResult(context.Background(), "task", "exec", "--exec-id", "diag", "poolnatr2", "sh", "-c", "ps; cat /proc/net/tcp")
		nat, _ := os.ReadFile(harness.SandboxDir(sb).Root().NATLog(sb))
		t.Errorf("the next task in the reset sandbox: code %d %q %q (%v) in %v, want the pool's policy at once; %s; in the guest:\n%s%s\nNAT log:\n%s",
			r.code, r.stdout, r.stderr, err, took.Round(time.Millisecond), seen, diag.stdout, diag.stderr, nat)
	}
	deleteTask(t, "poolnatr2")
}
