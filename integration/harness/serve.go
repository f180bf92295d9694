package harness

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Serve is a `gvx serve` a bench started on its containerd, with one API
// key, spoken to as the e2b SDKs do.
type Serve struct {
	URL, Key string
	Log      string // its log file
	cmd      *exec.Cmd
	http     *http.Client
}

// StartServe runs gvx serve on a loopback port with state in dir, the
// templates (a templates.toml's text) and the containerd at socket, and
// waits (up to 2 minutes) until it answers. Its sandboxes and pools go
// with it (--kill-on-exit).
func StartServe(dir string, bins Bins, socket, templates string) (*Serve, error) {
	key := "e2b_" + strings.Repeat("0123456789", 4)
	if err := os.WriteFile(filepath.Join(dir, "keys"), []byte(key+" bench\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "templates.toml"), []byte(templates), 0o644); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	s := &Serve{URL: "http://" + addr, Key: key, Log: filepath.Join(dir, "serve.log"),
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	logf, err := os.Create(s.Log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(filepath.Join(bins.GVX, "gvx"), "serve", "--listen", "tcp://"+addr, "--state-dir", filepath.Join(dir, "serve"),
		"--keys", filepath.Join(dir, "keys"), "--templates", filepath.Join(dir, "templates.toml"), "--containerd", socket, "--kill-on-exit", "--log-level", "warn")
	s.cmd.Env = append(os.Environ(), "PATH="+bins.Path())
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if resp, err := http.Get(s.URL + "/healthz"); err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, s.Failed(fmt.Errorf("gvx serve did not answer within 2 minutes"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop ends gvx serve (SIGTERM) and waits for it.
func (s *Serve) Stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

// Failed adds the end of the service's log to err.
func (s *Serve) Failed(err error) error {
	b, _ := os.ReadFile(s.Log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 30 {
		lines = lines[len(lines)-30:]
	}
	return fmt.Errorf("%w\ngvx serve's log (%s):\n%s", err, s.Log, strings.Join(lines, "\n"))
}

// do sends an API request with the key.
func (s *Serve) do(ctx context.Context, method, path string, body io.Reader, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-API-KEY", s.Key)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return s.http.Do(req)
}

// Cycle is one E2B sandbox's life as the e2b SDKs drive it: create from
// template, run argv through envd's process.Process/Start (streamed to
// its end), kill. It returns the time to the command's end and to the
// kill's answer.
func (s *Serve) Cycle(ctx context.Context, template string, argv ...string) (toExec, whole time.Duration, err error) {
	t0 := time.Now()
	resp, err := s.do(ctx, "POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"`+template+`"}`), map[string]string{"Content-Type": "application/json"})
	if err != nil {
		return 0, 0, err
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	err = json.NewDecoder(resp.Body).Decode(&sb)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 201 {
		return 0, 0, fmt.Errorf("create: %d %v", resp.StatusCode, err)
	}
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": argv[0], "args": argv[1:]}, "stdin": false})
	var env bytes.Buffer
	env.WriteByte(0)
	_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
	env.Write(msg)
	resp, err = s.do(ctx, "POST", "/process.Process/Start", &env, map[string]string{"Content-Type": "application/connect+json",
		"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": sb.EnvdAccessToken, "Connect-Timeout-Ms": "60000"})
	if err == nil {
		b, _ := io.ReadAll(resp.Body) // the stream ends after the end event
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"end"`)) {
			err = fmt.Errorf("run: %d %q", resp.StatusCode, b)
		}
	}
	toExec = time.Since(t0)
	// Killed whatever the command did.
	kresp, kerr := s.do(context.WithoutCancel(ctx), "DELETE", "/sandboxes/"+sb.SandboxID, nil, nil)
	if kerr == nil {
		kresp.Body.Close()
		if kresp.StatusCode != 204 {
			kerr = fmt.Errorf("kill: %d", kresp.StatusCode)
		}
	}
	if err == nil {
		err = kerr
	}
	return toExec, time.Since(t0), err
}

// PoolFull waits (up to a minute) until template's pool is full, its hot
// sandboxes included (at once without a pool).
func (s *Serve) PoolFull(ctx context.Context, template string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		resp, err := s.do(ctx, "GET", "/gvx/v1/templates/"+template, nil, nil)
		if err != nil {
			return err
		}
		var t struct {
			Pool *struct{ Size, Ready, Hot, HotReady int }
		}
		err = json.NewDecoder(resp.Body).Decode(&t)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if t.Pool == nil || t.Pool.Ready >= t.Pool.Size && t.Pool.HotReady >= t.Pool.Hot {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("the pool of %s did not fill within a minute", template)
}
