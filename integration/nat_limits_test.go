package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

// limitServer is a test HTTP server on 127.0.0.1: /hold answers only once
// released (it holds a connection open), /data sends size bytes, /up
// reads a request body and reports how long it took from its first byte.
// upPort is a plain TCP port that reads size bytes, reports how long they
// took from the first, and closes.
type limitServer struct {
	port    int
	upPort  int
	holds   atomic.Int64
	release chan struct{}
	upTook  chan time.Duration
}

func startLimitServer(t *testing.T, size int) *limitServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &limitServer{port: ln.Addr().(*net.TCPAddr).Port, release: make(chan struct{}), upTook: make(chan time.Duration, 4)}
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		s.holds.Add(1)
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/data", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(size))
		w.Write(make([]byte, size))
	})
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	s.upPort = up.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			var first [1]byte
			if _, err := io.ReadFull(c, first[:]); err == nil {
				start := time.Now()
				if k, _ := io.CopyN(io.Discard, c, int64(size-1)); k == int64(size-1) {
					s.upTook <- time.Since(start)
				}
			}
			c.Close()
		}
	}()
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		srv.Close()
	})
	return s
}

// TestNATLimits: a NAT sandbox with max_connections 3 holds three open
// connections to a host server on 127.0.0.1; a fourth is refused at once
// (connection refused, counted as a limit refusal) and the server sees
// three only; once they end, a download and an upload of 4 MiB run at the
// 1 MiB/s bandwidth cap (no faster than 20% over it, measured in the
// guest and on the host).
func TestNATLimits(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	const size, rate = 4 << 20, 1 << 20
	srv := startLimitServer(t, size)
	id := "nat-limits"
	cleanupTask(t, id)
	args := append([]string{"run", "-d", "--runtime", runtime}, natAnnotations(t, api.NAT{
		Egress:         &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port), fmt.Sprintf("10.0.2.2:%d", srv.upPort)}},
		MaxConnections: 3,
		Bandwidth:      rate,
	})...)
	hold := fmt.Sprintf("http://10.0.2.2:%d/hold", srv.port)
	mustCtr(t, append(args, busybox, id, "sh", "-c",
		fmt.Sprintf("for i in 1 2 3; do wget -q -O /dev/null %s & done; sleep 120", hold))...)
	defer logNATOnFailure(t, id)()
	waitFor(t, "three held connections at the host server", func() bool { return srv.holds.Load() == 3 })

	start := time.Now()
	r := ctrExec(t, id, "fourth", "wget", "-q", "-O", "/dev/null", hold)
	if r.code == 0 || !strings.Contains(r.stderr, "refused") {
		t.Errorf("a fourth connection with max_connections 3: code %d stderr %q, want connection refused", r.code, r.stderr)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the refusal took %v: want an immediate RST", took)
	}
	var st api.NATStats
	waitFor(t, "the limit refusal in the NAT's counters", func() bool {
		st = natStats(t, id)
		return st.RefusedLimit >= 1
	})
	if st.RefusedLimit != 1 || st.Open != 3 {
		t.Errorf("NAT counters %+v: want 1 limit refusal and 3 open flows", st)
	}
	if n := srv.holds.Load(); n != 3 {
		t.Errorf("the host server saw %d held connections, want 3", n)
	}

	close(srv.release)
	waitFor(t, "the held flows to end", func() bool { return natStats(t, id).Open == 0 })
	want := time.Duration(float64(size) / rate * float64(time.Second))
	within := func(what string, took time.Duration) {
		t.Logf("%s: %d MiB in %v = %.2f MiB/s (cap %d MiB/s)", what, size>>20, took, float64(size)/took.Seconds()/(1<<20), rate>>20)
		// The cap is the lower bound; a loaded node can only make the
		// bytes slower.
		if took < want*80/100 || took > want*2 {
			t.Errorf("%s took %v, want %v − 20%% … × 2 (bandwidth %d B/s)", what, took, want, rate)
		}
	}
	r = ctrExec(t, id, "down", "sh", "-c", fmt.Sprintf(
		"a=$(cut -d' ' -f1 /proc/uptime); wget -q -O /dev/null http://10.0.2.2:%d/data || exit 1; b=$(cut -d' ' -f1 /proc/uptime); echo $a $b", srv.port))
	var a, b float64
	if _, err := fmt.Sscan(r.stdout, &a, &b); r.code != 0 || err != nil {
		t.Fatalf("download: code %d %v stdout %q stderr %q", r.code, err, r.stdout, r.stderr)
	}
	within("download (guest clock)", time.Duration((b-a)*float64(time.Second)))
	r = ctrExec(t, id, "up", "sh", "-c", fmt.Sprintf(
		"dd if=/dev/zero of=/tmp/blob bs=1M count=%d 2>/dev/null && nc 10.0.2.2 %d < /tmp/blob", size>>20, srv.upPort))
	if r.code != 0 {
		t.Fatalf("upload: code %d stderr %q", r.code, r.stderr)
	}
	select {
	case took := <-srv.upTook:
		within("upload (host clock)", took)
	case <-time.After(10 * time.Second):
		t.Fatal("the host server got no upload")
	}
	waitFor(t, "4 MiB each way in the NAT's byte counters", func() bool {
		st = natStats(t, id)
		return st.BytesIn >= size && st.BytesOut >= size
	})
	mustCtr(t, "task", "kill", "-s", "SIGKILL", id)
	waitStatus(t, id, "STOPPED")
	mustCtr(t, "task", "rm", id)
	mustCtr(t, "container", "rm", id)
}

// TestNATMetrics: a pool server with metrics.listen exports the NAT
// counters of the NAT sandboxes in its state directory: a policy refusal
// and a max_connections refusal of a sandbox show up in the scraped text
// by reason, with its open flow and its allowed one.
func TestNATMetrics(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	startPoolWith(t, 1, fmt.Sprintf("[metrics]\nlisten = %q\n", "unix://"+sock))
	srv := startLimitServer(t, 1)
	id := "nat-metrics"
	cleanupTask(t, id)
	args := append([]string{"run", "-d", "--runtime", runtime}, natAnnotations(t, api.NAT{
		Egress:         &api.Egress{Allow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}},
		MaxConnections: 1,
	})...)
	hold := fmt.Sprintf("http://10.0.2.2:%d/hold", srv.port)
	mustCtr(t, append(args, busybox, id, "sh", "-c", "wget -q -O /dev/null "+hold+"; sleep 120")...)
	defer logNATOnFailure(t, id)()
	waitFor(t, "the held connection at the host server", func() bool { return srv.holds.Load() == 1 })
	if r := ctrExec(t, id, "policy", "wget", "-q", "-O", "/dev/null", fmt.Sprintf("http://10.0.2.2:%d/", srv.upPort)); r.code == 0 {
		t.Error("a port the policy does not allow was reached")
	}
	if r := ctrExec(t, id, "limit", "wget", "-q", "-O", "/dev/null", hold); r.code == 0 {
		t.Error("a second connection with max_connections 1 was let out")
	}
	series := func(name string, labels ...string) string {
		return fmt.Sprintf(`%s{%snamespace=%q,%ssandbox=%q}`, name, labels[0], testNS, labels[1], id)
	}
	want := []string{
		series("gvx_nat_refused_total", "", `reason="policy",`) + " 1",
		series("gvx_nat_refused_total", "", `reason="limit",`) + " 1",
		series("gvx_nat_open_flows", "", "") + " 1",
		series("gvx_nat_flows_total", "", "") + " 1",
	}
	var body string
	waitFor(t, "the NAT's refusals in the pool server's scrape", func() bool {
		body = scrapeUnix(t, sock)
		for _, w := range want {
			if !strings.Contains(body, w+"\n") {
				return false
			}
		}
		return true
	})
	mustCtr(t, "task", "kill", "-s", "SIGKILL", id)
	waitStatus(t, id, "STOPPED")
	mustCtr(t, "task", "rm", id)
	mustCtr(t, "container", "rm", id)
	if body = scrapeUnix(t, sock); strings.Contains(body, fmt.Sprintf("sandbox=%q", id)) {
		t.Errorf("the removed sandbox's NAT counters are still exported")
	}
}

// scrapeUnix GETs /metrics on the unix socket sock.
func scrapeUnix(t *testing.T, sock string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://gvx/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}
