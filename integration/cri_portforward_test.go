package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// portForward runs `crictl port-forward pod local:port` until the test
// ends, once it says it listens (a probe connection would be forwarded to
// the pod too).
func (x *criEnv) portForward(t *testing.T, pod string, port int) int {
	t.Helper()
	local := freePort(t)
	cmd := exec.Command(x.crictl, "--runtime-endpoint", "unix://"+x.ctrd.Socket(), "port-forward", pod, fmt.Sprintf("%d:%d", local, port))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("crictl port-forward %s %d:%d:\n%s", pod, local, port, out.String())
			x.logContainerd(t, "ort forward|ortforward")
		}
	})
	for i := 0; !strings.Contains(out.String(), fmt.Sprintf("Forwarding from 127.0.0.1:%d", local)); i++ {
		if i == 100 {
			t.Fatalf("crictl port-forward %s %d:%d did not listen:\n%s", pod, local, port, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return local
}

// getForwarded GETs / and /big from container web's httpd on port 80 of
// pod through crictl port-forward: / must answer index, /big its size
// bytes whose sha256 the container wrote to /sum-big.
func (x *criEnv) getForwarded(t *testing.T, pod, web, index string, size int) {
	t.Helper()
	ctx := context.Background()
	local := x.portForward(t, pod, 80)
	body, err := httpGetRetry(ctx, fmt.Sprintf("http://127.0.0.1:%d/", local), 20*time.Second)
	if err != nil || strings.TrimSpace(body) != index {
		t.Fatalf("GET / through crictl port-forward: %q, %v", body, err)
	}
	big, err := httpGetRetry(ctx, fmt.Sprintf("http://127.0.0.1:%d/big", local), 60*time.Second)
	if err != nil {
		t.Fatalf("GET /big: %v", err)
	}
	sum := sha256.Sum256([]byte(big))
	want := strings.Fields(x.must(t, "exec", web, "cat", "/sum-big"))[0]
	if got := hex.EncodeToString(sum[:]); len(big) != size || got != want {
		t.Errorf("GET /big: %d bytes, sha256 %s; the pod's file is %d bytes, sha256 %s", len(big), got, size, want)
	}
}

// waitListening waits until container id has a TCP listener on port.
func (x *criEnv) waitListening(t *testing.T, id string, port int) {
	t.Helper()
	for i := 0; ; i++ {
		if out := x.run(t, "exec", id, "netstat", "-lnt").stdout; strings.Contains(out, fmt.Sprintf(":%d ", port)) {
			return
		}
		if i == 100 {
			t.Fatalf("container %s has no listener on port %d", id, port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logContainerd logs the lines of containerd's log (the shims' included)
// that match re.
func (x *criEnv) logContainerd(t *testing.T, re string) {
	b, err := os.ReadFile(filepath.Join(x.ctrd.Dir, "containerd.log"))
	if err != nil {
		t.Log(err)
		return
	}
	m := regexp.MustCompile(re)
	for _, l := range strings.Split(string(b), "\n") {
		if m.MatchString(l) {
			t.Log(l)
		}
	}
}

// TestCRIPortForward: crictl port-forward (kubectl port-forward's CRI
// call) reaches a server in a gvx pod, whose listener lives in gVisor's
// netstack rather than in the pod's network namespace (containerd dials
// localhost:PORT in that namespace; the shim's sk_lookup steering sends
// the dial to the pod's address). 8 MiB each way arrive intact: a file
// served by the pod, and an upload the pod checksums.
func TestCRIPortForward(t *testing.T) {
	x := newCRIEnv(t)
	checkNoLeaks(t)
	pod, podCfg := x.runPod(t, "pf", "gvx")
	web := x.createContainer(t, pod, podCfg, "web", []string{"sh", "-c",
		"mkdir /www && echo forwarded-into-gvisor > /www/index.html && head -c 8388608 /dev/urandom > /www/big && sha256sum /www/big > /sum-big && exec httpd -f -p 80 -h /www"}, nil)
	x.must(t, "start", web)
	// crictl port-forward (like kubectl's) exits at the first connection
	// the pod refuses: wait for the pod's listeners first.
	x.waitListening(t, web, 80)
	x.getForwarded(t, pod, web, "forwarded-into-gvisor", 8<<20)

	// Upload: the pod's nc takes one connection and checksums it.
	x.must(t, "exec", web, "sh", "-c", "(nc -l -p 9000 </dev/null 2>/dev/null | sha256sum > /sum-up 2>&1 &) </dev/null >/dev/null 2>&1; true")
	x.waitListening(t, web, 9000)
	upLocal := x.portForward(t, pod, 9000)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 512<<10) // 8 MiB
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", upLocal))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(c, bytes.NewReader(payload)); err != nil {
		t.Fatalf("upload: %v", err)
	}
	c.Close()
	upSum := sha256.Sum256(payload)
	var got string
	for i := 0; i < 100; i++ {
		if got = strings.TrimSpace(x.run(t, "exec", web, "cat", "/sum-up").stdout); strings.HasPrefix(got, hex.EncodeToString(upSum[:])) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !strings.HasPrefix(got, hex.EncodeToString(upSum[:])) {
		t.Errorf("the pod's sha256 of the 8 MiB upload: %q, want %x", got, upSum)
	}
	x.must(t, "stop", "--timeout", "1", web)
	x.must(t, "rm", web)
	x.stopRemovePod(t, pod)
}
