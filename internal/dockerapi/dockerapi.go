// Package dockerapi is a minimal client of the Docker Engine API over a
// Unix socket: the few calls gvx makes to a sandbox's inner dockerd.
package dockerapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

// Client talks to one inner dockerd over its host-side Unix socket, with
// the few Docker Engine API calls gvx needs.
type Client struct {
	Socket string
	// Trace, if set, is told of each Engine API call Run makes when it
	// ends (how long it took, its error): a benchmark names a slow step.
	Trace func(method, path string, took time.Duration, err error)
	http  *http.Client
}

// New returns a client for the dockerd listening on socket. Each call has
// a connection of its own: one kept open would be part of the sandbox's
// state at a checkpoint (the shim forwards it into the guest's network
// stack) and dead after a restore.
func New(socket string) *Client {
	return &Client{Socket: socket, http: &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
	}}}
}

// Ping asks dockerd whether it is ready.
func (d *Client) Ping(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/_ping", nil)
	if err != nil {
		return err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("dockerd /_ping: %s", resp.Status)
	}
	return nil
}

// WaitReady polls until dockerd answers, the context ends or stop reports
// that waiting is pointless (e.g. the sandbox exited).
func (d *Client) WaitReady(ctx context.Context, stop func() error) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if _, err := os.Stat(d.Socket); err != nil {
			last = err
		} else {
			pctx, cancel := context.WithTimeout(ctx, time.Second)
			err := d.Ping(pctx)
			cancel()
			if err == nil {
				return nil
			}
			last = err
		}
		if stop != nil {
			if err := stop(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dockerd at %s not ready (last: %v): %w", d.Socket, last, ctx.Err())
		case <-tick.C:
		}
	}
}

// Load streams an image archive (docker-save or OCI layout) into dockerd
// (`docker load`) and returns the names it loaded.
func (d *Client) Load(ctx context.Context, archive io.Reader) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://docker/images/load?quiet=1", archive)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("docker load: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("docker load: %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	var loaded []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var m struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			continue
		}
		if m.Error != "" {
			return loaded, fmt.Errorf("docker load: %s", m.Error)
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(m.Stream), "Loaded image: "); ok {
			loaded = append(loaded, name)
		} else if id, ok := strings.CutPrefix(strings.TrimSpace(m.Stream), "Loaded image ID: "); ok {
			loaded = append(loaded, id)
		}
	}
	if err := sc.Err(); err != nil {
		return loaded, fmt.Errorf("docker load: %w", err)
	}
	if len(loaded) == 0 {
		return nil, errors.New("docker load: dockerd loaded nothing from the archive")
	}
	return loaded, nil
}

// Images lists the repo:tag names dockerd has.
func (d *Client) Images(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://docker/images/json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var imgs []struct {
		RepoTags []string `json:"RepoTags"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&imgs); err != nil {
		return nil, fmt.Errorf("docker images: %w", err)
	}
	var out []string
	for _, i := range imgs {
		out = append(out, i.RepoTags...)
	}
	return out, nil
}

// Run runs image with cmd to completion through the Engine API (create,
// start, wait, remove: what `docker run --rm` does) and returns its exit
// code. It is how a harness drives an episode from the host.
func (d *Client) Run(ctx context.Context, image string, cmd ...string) (int, error) {
	body, err := json.Marshal(map[string]any{"Image": image, "Cmd": cmd, "AttachStdout": false, "AttachStderr": false})
	if err != nil {
		return -1, err
	}
	var created struct {
		ID string `json:"Id"`
	}
	if err := d.call(ctx, http.MethodPost, "/containers/create", body, &created); err != nil {
		return -1, fmt.Errorf("docker run %s: create: %w", image, err)
	}
	defer func() {
		_ = d.call(context.WithoutCancel(ctx), http.MethodDelete, "/containers/"+created.ID+"?force=1", nil, nil)
	}()
	if err := d.call(ctx, http.MethodPost, "/containers/"+created.ID+"/start", nil, nil); err != nil {
		return -1, fmt.Errorf("docker run %s: start: %w", image, err)
	}
	var waited struct {
		StatusCode int `json:"StatusCode"`
	}
	if err := d.call(ctx, http.MethodPost, "/containers/"+created.ID+"/wait", nil, &waited); err != nil {
		return -1, fmt.Errorf("docker run %s: wait: %w", image, err)
	}
	if err := d.call(ctx, http.MethodDelete, "/containers/"+created.ID, nil, nil); err != nil {
		return waited.StatusCode, fmt.Errorf("docker run %s: remove: %w", image, err)
	}
	return waited.StatusCode, nil
}

// call sends one Engine API request with an optional JSON body and decodes
// a JSON answer into out (if not nil).
func (d *Client) call(ctx context.Context, method, path string, body []byte, out any) (err error) {
	if d.Trace != nil {
		t0 := time.Now()
		defer func() { d.Trace(method, path, time.Since(t0), err) }()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Bridge is a bridge network of dockerd's: its Linux bridge device, and
// the gateway address and subnet (CIDR) it has there.
type Bridge struct {
	Device, Gateway, Subnet string
}

// Bridges lists dockerd's bridge networks (the default one's device is
// docker0, a user-defined one's br-<first 12 of its id> unless named).
func (d *Client) Bridges(ctx context.Context) ([]Bridge, error) {
	var nets []struct {
		ID      string            `json:"Id"`
		Driver  string            `json:"Driver"`
		Options map[string]string `json:"Options"`
		IPAM    struct {
			Config []struct {
				Subnet  string `json:"Subnet"`
				Gateway string `json:"Gateway"`
			} `json:"Config"`
		} `json:"IPAM"`
	}
	if err := d.call(ctx, http.MethodGet, "/networks", nil, &nets); err != nil {
		return nil, fmt.Errorf("docker networks: %w", err)
	}
	var out []Bridge
	for _, n := range nets {
		if n.Driver != "bridge" {
			continue
		}
		dev := n.Options["com.docker.network.bridge.name"]
		if dev == "" && len(n.ID) >= 12 {
			dev = "br-" + n.ID[:12]
		}
		for _, c := range n.IPAM.Config {
			gw := c.Gateway
			if p, err := netip.ParsePrefix(c.Subnet); err == nil && gw == "" {
				// dockerd's default: the subnet's first address (the
				// list leaves the default bridge's gateway out).
				gw = p.Masked().Addr().Next().String()
			}
			if dev != "" && c.Subnet != "" && gw != "" {
				out = append(out, Bridge{Device: dev, Gateway: gw, Subnet: c.Subnet})
			}
		}
	}
	return out, nil
}
