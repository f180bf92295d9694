package envd

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvxrun/gvx/serve/backend"
	"github.com/gvxrun/gvx/serve/internal/fakebackend"
)

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	return newServerOn(t, fakebackend.New())
}

func newServerOn(t *testing.T, b *fakebackend.Backend) *httptest.Server {
	t.Helper()
	sb, err := b.Create(context.Background(), "t1", backend.Template{Name: "base"}, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(sb, Defaults{User: "user", Workdir: t.TempDir()})
	hs := httptest.NewServer(s)
	t.Cleanup(func() { hs.Close(); s.Close() })
	return hs
}

// stream calls a server-streaming method and returns its messages and the
// end-stream body.
func stream(t *testing.T, hs *httptest.Server, method string, req any, hdr map[string]string) ([]StreamResponse, string) {
	t.Helper()
	b, _ := json.Marshal(req)
	var body bytes.Buffer
	body.WriteByte(0)
	_ = binary.Write(&body, binary.BigEndian, uint32(len(b)))
	body.Write(b)
	hr, _ := http.NewRequest("POST", hs.URL+"/"+method, &body)
	hr.Header.Set("Content-Type", "application/connect+json")
	for k, v := range hdr {
		hr.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/connect+json" {
		t.Fatalf("%s: status %d, content type %q", method, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []StreamResponse
	for {
		var h [5]byte
		if _, err := io.ReadFull(resp.Body, h[:]); err != nil {
			t.Fatalf("%s: stream ended without an end-stream envelope: %v", method, err)
		}
		msg := make([]byte, binary.BigEndian.Uint32(h[1:]))
		if _, err := io.ReadFull(resp.Body, msg); err != nil {
			t.Fatal(err)
		}
		if h[0] == 2 {
			return out, string(msg)
		}
		var m StreamResponse
		if err := json.Unmarshal(msg, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
}

func unary(t *testing.T, hs *httptest.Server, method string, req any, out any) int {
	t.Helper()
	b, _ := json.Marshal(req)
	resp, err := http.Post(hs.URL+"/"+method, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s: %v: %s", method, err, data)
		}
	}
	return resp.StatusCode
}

func bash(cmd string) *StartRequest {
	f := false
	return &StartRequest{Process: &ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", cmd}}, Stdin: &f}
}

func collect(msgs []StreamResponse) (pid uint32, stdout, stderr string, end *EndEvent) {
	for _, m := range msgs {
		switch e := m.Event; {
		case e.Start != nil:
			pid = e.Start.PID
		case e.Data != nil:
			stdout += string(e.Data.Stdout)
			stderr += string(e.Data.Stderr)
		case e.End != nil:
			end = e.End
		}
	}
	return
}

func TestStartOutputAndExit(t *testing.T) {
	hs := newServer(t)
	msgs, es := stream(t, hs, "process.Process/Start", bash("echo hi; echo err >&2; exit 7"), nil)
	if es != "{}" {
		t.Fatalf("end-stream %s, want {}", es)
	}
	if msgs[0].Event.Start == nil {
		t.Fatalf("first event %+v is not start", msgs[0].Event)
	}
	pid, out, errOut, end := collect(msgs)
	if pid == 0 || out != "hi\n" || errOut != "err\n" || end == nil || end.ExitCode != 7 || !end.Exited || end.Status != "exit status 7" {
		t.Fatalf("pid %d stdout %q stderr %q end %+v", pid, out, errOut, end)
	}
	// Zero values are omitted, as proto3 JSON does: exit 0 has no exitCode.
	msgs, _ = stream(t, hs, "process.Process/Start", bash("true"), nil)
	b, _ := json.Marshal(msgs[len(msgs)-1])
	if !strings.Contains(string(b), `"end":{"exited":true,"status":"exit status 0"}`) {
		t.Fatalf("end of true: %s", b)
	}
}

func TestStartTimeoutKills(t *testing.T) {
	hs := newServer(t)
	t0 := time.Now()
	msgs, _ := stream(t, hs, "process.Process/Start", bash("sleep 30"), map[string]string{"Connect-Timeout-Ms": "300"})
	_, _, _, end := collect(msgs)
	if time.Since(t0) > 5*time.Second || end == nil || end.Exited || end.ExitCode != -1 {
		t.Fatalf("after %v: end %+v, want the process killed at its 300 ms lifetime", time.Since(t0), end)
	}
}

func TestStdinSignalListConnect(t *testing.T) {
	hs := newServer(t)
	tr := true
	req := &StartRequest{Process: &ProcessConfig{Cmd: "/bin/cat"}, Stdin: &tr, Tag: strPtr("cat1")}
	done := make(chan []StreamResponse)
	go func() { m, _ := stream(t, hs, "process.Process/Start", req, nil); done <- m }()
	var list ListResponse
	deadline := time.Now().Add(5 * time.Second)
	for len(list.Processes) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		unary(t, hs, "process.Process/List", struct{}{}, &list)
	}
	if len(list.Processes) != 1 || list.Processes[0].Config.Cmd != "/bin/cat" || *list.Processes[0].Tag != "cat1" {
		t.Fatalf("list: %+v", list)
	}
	pid := list.Processes[0].PID
	if c := unary(t, hs, "process.Process/SendInput", SendInputRequest{Process: &ProcessSelector{PID: &pid}, Input: &ProcessInput{Stdin: []byte("ping\n")}}, nil); c != 200 {
		t.Fatalf("SendInput: %d", c)
	}
	if c := unary(t, hs, "process.Process/CloseStdin", CloseStdinRequest{Process: &ProcessSelector{Tag: strPtr("cat1")}}, nil); c != 200 {
		t.Fatalf("CloseStdin: %d", c)
	}
	_, out, _, end := collect(<-done)
	if out != "ping\n" || end == nil || end.ExitCode != 0 {
		t.Fatalf("cat: stdout %q end %+v", out, end)
	}
	// A signal to a process that is gone is not_found (the SDK's kill
	// returns false on it).
	var e map[string]string
	if c := unary(t, hs, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, &e); c != 404 || e["code"] != "not_found" {
		t.Fatalf("signal to a finished process: %d %v", c, e)
	}

	// Connect attaches to a running process; SIGKILL ends it.
	go func() { m, _ := stream(t, hs, "process.Process/Start", bash("echo started; sleep 30"), nil); done <- m }()
	for list.Processes = nil; len(list.Processes) == 0; {
		time.Sleep(20 * time.Millisecond)
		unary(t, hs, "process.Process/List", struct{}{}, &list)
	}
	pid = list.Processes[0].PID
	conn := make(chan []StreamResponse)
	go func() {
		m, _ := stream(t, hs, "process.Process/Connect", ConnectRequest{Process: &ProcessSelector{PID: &pid}}, nil)
		conn <- m
	}()
	time.Sleep(200 * time.Millisecond)
	if c := unary(t, hs, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, nil); c != 200 {
		t.Fatalf("SendSignal: %d", c)
	}
	_, out, _, end = collect(<-done)
	if out != "started\n" || end == nil || end.Status != "signal: killed" {
		t.Fatalf("killed process: stdout %q end %+v", out, end)
	}
	cm := <-conn
	if cm[0].Event.Start == nil || cm[0].Event.Start.PID != pid || cm[len(cm)-1].Event.End == nil {
		t.Fatalf("connect stream: %+v", cm)
	}
}

func strPtr(s string) *string { return &s }

func TestFiles(t *testing.T) {
	hs := newServer(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "a.txt")
	// multipart, the SDK's default: the part's filename is the path.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", p)
	fw.Write([]byte("hello gvx"))
	mw.Close()
	resp, err := http.Post(hs.URL+"/files?path="+p, mw.FormDataContentType(), &body)
	if err != nil {
		t.Fatal(err)
	}
	var info []map[string]string
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(info) != 1 || info[0]["path"] != p || info[0]["name"] != "a.txt" {
		t.Fatalf("POST /files multipart: %d %v", resp.StatusCode, info)
	}
	if b, _ := os.ReadFile(p); string(b) != "hello gvx" {
		t.Fatalf("file holds %q", b)
	}
	// octet-stream overwrites.
	resp, _ = http.Post(hs.URL+"/files?path="+p, "application/octet-stream", strings.NewReader("second"))
	resp.Body.Close()
	resp, _ = http.Get(hs.URL + "/files?path=" + p)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "second" {
		t.Fatalf("GET /files: %d %q", resp.StatusCode, b)
	}
	resp, _ = http.Get(hs.URL + "/files?path=" + dir + "/missing")
	var e map[string]any
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 404 || e["code"] != float64(404) {
		t.Fatalf("missing file: %d %v", resp.StatusCode, e)
	}
	resp, _ = http.Get(hs.URL + "/files?path=" + dir)
	resp.Body.Close()
	if resp.StatusCode != 400 {
		t.Fatalf("GET of a directory: %d, want 400", resp.StatusCode)
	}
}

func TestFilesystem(t *testing.T) {
	hs := newServer(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "f"), []byte("12345"), 0o640)
	os.Symlink("f", filepath.Join(dir, "l"))
	var ld ListDirResponse
	if c := unary(t, hs, "filesystem.Filesystem/ListDir", ListDirRequest{Path: dir, Depth: 1}, &ld); c != 200 || len(ld.Entries) != 2 {
		t.Fatalf("ListDir: %d %+v", c, ld)
	}
	byName := map[string]EntryInfo{}
	for _, e := range ld.Entries {
		byName[e.Name] = e
	}
	f, l := byName["f"], byName["l"]
	if f.Type != FileTypeFile || f.Size != 5 || f.Permissions != "-rw-r-----" || f.Path != filepath.Join(dir, "f") || f.ModifiedTime == "" {
		t.Fatalf("entry f: %+v", f)
	}
	if l.Type != FileTypeSymlink || l.SymlinkTarget == nil || *l.SymlinkTarget != "f" {
		t.Fatalf("entry l: %+v", l)
	}
	// int64 size travels as a string.
	raw, _ := json.Marshal(f)
	if !strings.Contains(string(raw), `"size":"5"`) {
		t.Fatalf("size not a string: %s", raw)
	}
	var er EntryResponse
	var ce map[string]string
	if c := unary(t, hs, "filesystem.Filesystem/Stat", PathRequest{Path: dir + "/nope"}, &ce); c != 404 || ce["code"] != "not_found" {
		t.Fatalf("Stat of a missing file: %d %v", c, ce)
	}
	if c := unary(t, hs, "filesystem.Filesystem/MakeDir", PathRequest{Path: dir + "/d/e"}, &er); c != 200 || er.Entry.Type != FileTypeDirectory {
		t.Fatalf("MakeDir: %d %+v", c, er)
	}
	if c := unary(t, hs, "filesystem.Filesystem/MakeDir", PathRequest{Path: dir + "/d/e"}, &ce); c != 409 || ce["code"] != "already_exists" {
		t.Fatalf("MakeDir again: %d %v", c, ce)
	}
	if c := unary(t, hs, "filesystem.Filesystem/Move", MoveRequest{Source: dir + "/f", Destination: dir + "/g"}, &er); c != 200 || er.Entry.Name != "g" {
		t.Fatalf("Move: %d %+v", c, er)
	}
	if c := unary(t, hs, "filesystem.Filesystem/Remove", PathRequest{Path: dir + "/d"}, nil); c != 200 {
		t.Fatalf("Remove: %d", c)
	}
	if _, err := os.Stat(dir + "/d"); !os.IsNotExist(err) {
		t.Fatalf("removed dir still there: %v", err)
	}
	if c := unary(t, hs, "filesystem.Filesystem/ListDir", ListDirRequest{Path: dir + "/g"}, &ce); c != 400 {
		t.Fatalf("ListDir of a file: %d %v", c, ce)
	}
}

func TestWatchDir(t *testing.T) {
	hs := newServer(t)
	dir := t.TempDir()
	var cw CreateWatcherResponse
	if c := unary(t, hs, "filesystem.Filesystem/CreateWatcher", WatchDirRequest{Path: dir}, &cw); c != 200 || cw.WatcherID == "" {
		t.Fatalf("CreateWatcher: %d %+v", c, cw)
	}
	os.WriteFile(filepath.Join(dir, "new"), []byte("x"), 0o644)
	var ev GetWatcherEventsResponse
	deadline := time.Now().Add(5 * time.Second)
	for len(ev.Events) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		unary(t, hs, "filesystem.Filesystem/GetWatcherEvents", WatcherRequest{WatcherID: cw.WatcherID}, &ev)
	}
	if len(ev.Events) != 1 || ev.Events[0].Name != "new" || ev.Events[0].Type != EventCreate {
		t.Fatalf("events: %+v", ev)
	}
	if c := unary(t, hs, "filesystem.Filesystem/RemoveWatcher", WatcherRequest{WatcherID: cw.WatcherID}, nil); c != 200 {
		t.Fatalf("RemoveWatcher: %d", c)
	}
}

func TestBadRequests(t *testing.T) {
	hs := newServer(t)
	resp, _ := http.Post(hs.URL+"/process.Process/List", "application/json", strings.NewReader("{not json"))
	var e map[string]string
	json.NewDecoder(resp.Body).Decode(&e)
	resp.Body.Close()
	if resp.StatusCode != 400 || e["code"] != "invalid_argument" {
		t.Fatalf("malformed JSON: %d %v", resp.StatusCode, e)
	}
	resp, _ = http.Post(hs.URL+"/process.Process/List", "application/proto", strings.NewReader(""))
	resp.Body.Close()
	if resp.StatusCode != 415 {
		t.Fatalf("binary codec: %d, want 415", resp.StatusCode)
	}
	_, es := stream(t, hs, "process.Process/Start", &StartRequest{}, nil)
	if !strings.Contains(es, "invalid_argument") {
		t.Fatalf("start without cmd: end-stream %s", es)
	}
	resp, _ = http.Post(hs.URL+"/init", "application/json", strings.NewReader("{}"))
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Fatalf("/init from outside: %d, want 403", resp.StatusCode)
	}
}

func TestSignature(t *testing.T) {
	r := httptest.NewRequest("GET", "/files?path=/a&signature="+Signature("/a", "read", "", "tok", 0), nil)
	if !CheckSignature(r, "tok", time.Now()) || CheckSignature(r, "other", time.Now()) {
		t.Fatal("signature check")
	}
	exp := time.Now().Add(-time.Minute).Unix()
	r = httptest.NewRequest("GET", "/files?path=/a&signature_expiration="+itoa(exp)+"&signature="+Signature("/a", "read", "", "tok", exp), nil)
	if CheckSignature(r, "tok", time.Now()) {
		t.Fatal("expired signature accepted")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// endedSandbox's processes refuse signals as having ended (containerd's
// "process already finished" between a process's death and its exit
// event — a rollback's kill, say).
type endedSandbox struct{ backend.Sandbox }

func (s endedSandbox) Exec(ctx context.Context, c backend.Cmd) (backend.Process, error) {
	p, err := s.Sandbox.Exec(ctx, c)
	return endedProcess{p}, err
}

type endedProcess struct{ backend.Process }

func (endedProcess) Signal(context.Context, syscall.Signal) error {
	return fmt.Errorf("%w: process already finished: not found", backend.ErrEnded)
}

// TestSignalEnded: a signal the backend refuses because the process has
// ended is not_found, as for a process whose end was seen (the SDKs'
// kill returns false), not an internal error.
func TestSignalEnded(t *testing.T) {
	sb, err := fakebackend.New().Create(context.Background(), "t1", backend.Template{Name: "base"}, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(endedSandbox{sb}, Defaults{User: "user", Workdir: t.TempDir()})
	hs := httptest.NewServer(s)
	t.Cleanup(func() { hs.Close(); s.Close() })
	done := make(chan []StreamResponse)
	go func() { m, _ := stream(t, hs, "process.Process/Start", bash("sleep 2"), nil); done <- m }()
	var list ListResponse
	for deadline := time.Now().Add(5 * time.Second); len(list.Processes) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		unary(t, hs, "process.Process/List", struct{}{}, &list)
	}
	if len(list.Processes) != 1 {
		t.Fatalf("list: %+v", list)
	}
	pid := list.Processes[0].PID
	var e map[string]string
	if c := unary(t, hs, "process.Process/SendSignal", map[string]any{"process": map[string]any{"pid": pid}, "signal": "SIGNAL_SIGKILL"}, &e); c != 404 || e["code"] != "not_found" {
		t.Errorf("signal refused as ended: %d %v, want 404 not_found", c, e)
	}
	<-done
}

// TestStartGate: a command starts only through the gate, which it
// releases once started; a gate's refusal is unavailable and runs
// nothing.
func TestStartGate(t *testing.T) {
	sb, err := fakebackend.New().Create(context.Background(), "t1", backend.Template{Name: "base"}, backend.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := New(sb, Defaults{User: "user", Workdir: dir})
	var taken, released int
	refuse := false
	s.SetStartGate(func() (func(), error) {
		if refuse {
			return nil, fmt.Errorf("the sandbox is paused")
		}
		taken++
		return func() { released++ }, nil
	})
	hs := httptest.NewServer(s)
	t.Cleanup(func() { hs.Close(); s.Close() })
	msgs, _ := stream(t, hs, "process.Process/Start", bash("echo ran"), nil)
	if _, out, _, end := collect(msgs); out != "ran\n" || end == nil || taken != 1 || released != 1 {
		t.Fatalf("through the gate: %q %+v, gate taken %d released %d", out, end, taken, released)
	}
	refuse = true
	msgs, es := stream(t, hs, "process.Process/Start", bash("touch "+filepath.Join(dir, "ran")), nil)
	if !strings.Contains(es, `"unavailable"`) || !strings.Contains(es, "paused") {
		t.Errorf("a start the gate refuses: %v, end-stream %s; want unavailable saying why", msgs, es)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command the gate refused ran")
	}
}
