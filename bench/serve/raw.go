package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// raw measures the service with a plain Go HTTP client speaking the same
// requests as the e2b SDK (create, process.Process/Start of `true`,
// kill): the service's own overhead, without the JS SDK's.
func (s *service) raw(ctx context.Context, template string, runs int) (sdkResult, error) {
	var r sdkResult
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	do := func(method, path string, body io.Reader, hdr map[string]string) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, s.url+path, body)
		if err != nil {
			return nil, err
		}
		req.Header.Set("X-API-KEY", s.key)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return cl.Do(req)
	}
	cycle := func(res *sdkResult) error {
		if err := s.poolFull(ctx, cl, template); err != nil {
			return err
		}
		t0 := time.Now()
		resp, err := do("POST", "/v2/sandboxes", strings.NewReader(`{"templateID":"`+template+`"}`), map[string]string{"Content-Type": "application/json"})
		if err != nil {
			return err
		}
		var sb struct{ SandboxID, EnvdAccessToken string }
		err = json.NewDecoder(resp.Body).Decode(&sb)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 201 {
			return fmt.Errorf("create: %d %v", resp.StatusCode, err)
		}
		msg := []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","true"]},"stdin":false}`)
		var env bytes.Buffer
		env.WriteByte(0)
		_ = binary.Write(&env, binary.BigEndian, uint32(len(msg)))
		env.Write(msg)
		resp, err = do("POST", "/process.Process/Start", &env, map[string]string{"Content-Type": "application/connect+json",
			"E2b-Sandbox-Id": sb.SandboxID, "X-Access-Token": sb.EnvdAccessToken, "Connect-Timeout-Ms": "60000"})
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body) // the stream ends after the end event
		resp.Body.Close()
		if resp.StatusCode != 200 || !bytes.Contains(b, []byte(`"end"`)) {
			return fmt.Errorf("run: %d %q", resp.StatusCode, b)
		}
		t1 := time.Now()
		resp, err = do("DELETE", "/sandboxes/"+sb.SandboxID, nil, nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 204 {
			return fmt.Errorf("kill: %d", resp.StatusCode)
		}
		res.CreateRun = append(res.CreateRun, ms(t1.Sub(t0)))
		res.Cycle = append(res.Cycle, ms(time.Since(t0)))
		return nil
	}
	var warm sdkResult
	if err := cycle(&warm); err != nil {
		return r, err
	}
	for i := 0; i < runs; i++ {
		if err := cycle(&r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// poolFull waits until template's pool is full, its hot sandboxes
// included (at once without one).
func (s *service) poolFull(ctx context.Context, cl *http.Client, template string) error {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.url+"/gvx/v1/templates/"+template, nil)
		req.Header.Set("X-API-KEY", s.key)
		resp, err := cl.Do(req)
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
