package rollout

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/api"
)

func TestStore(t *testing.T) {
	if _, err := OpenStore("relative"); err == nil {
		t.Error("a relative store directory was accepted")
	}
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, err := s.newHandle(Handle{Lineage: "sb1", Sandbox: "sb1", Image: "img"})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.ImageDir(a.ID), "pages.img"), bytes.Repeat([]byte{1}, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	// Not listed until saved.
	if l, _ := s.List(); len(l) != 0 {
		t.Errorf("an unsaved handle is listed: %v", l)
	}
	if err := s.save(a); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Millisecond)
	b, _ := s.newHandle(Handle{Parent: a.ID, Lineage: "sb1", Sandbox: "sb1"})
	if err := s.save(b); err != nil {
		t.Fatal(err)
	}
	l, err := s.List()
	if err != nil || len(l) != 2 || l[0].ID != a.ID || l[1].Parent != a.ID {
		t.Fatalf("List = %+v, %v; want a then its child b", l, err)
	}
	if n := s.Bytes(a.ID); n < 64<<10 {
		t.Errorf("Bytes(%s) = %d, want at least the 64 KiB written", a.ID, n)
	}
	if err := s.remove(a.ID); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{a.ID, "", "../x", "ck-nope"} {
		if _, err := s.Get(id); !errors.Is(err, ErrUnknownHandle) {
			t.Errorf("Get(%q) = %v, want ErrUnknownHandle", id, err)
		}
	}
	if _, err := os.Stat(s.ImageDir(a.ID)); !os.IsNotExist(err) {
		t.Errorf("a released handle's files are still there: %v", err)
	}
}

func TestGate(t *testing.T) {
	g := &gate{}
	out, errw := g.writer(false), g.writer(true)
	out.Write([]byte("o1 "))
	errw.Write([]byte("e1 "))
	var stdout, stderr bytes.Buffer
	g.open(&stdout, &stderr)
	out.Write([]byte("o2"))
	if stdout.String() != "o1 o2" || stderr.String() != "e1 " {
		t.Errorf("stdout %q stderr %q; want what was held back, then what came", stdout.String(), stderr.String())
	}
	big := &gate{}
	big.writer(false).Write(bytes.Repeat([]byte("x"), maxHeld))
	big.writer(false).Write([]byte("dropped"))
	var b bytes.Buffer
	big.open(&b, &b)
	if b.Len() != maxHeld || strings.Contains(b.String(), "dropped") {
		t.Errorf("held %d bytes, want at most %d", b.Len(), maxHeld)
	}
}

// TestUserPorts: a NAT's ports but a docker-mode backing's own relay
// socket are the user's, which refuse a checkpoint.
func TestUserPorts(t *testing.T) {
	relay := "/run/gvx/docker/ns/sb/relay.sock"
	ports := []string{"8080:80", "unix:" + relay + ":2375", "unix:/srv/a.sock:22", "unix:" + relay + "x:1"}
	got := userPorts(ports, relay)
	if want := []string{"8080:80", "unix:/srv/a.sock:22", "unix:" + relay + "x:1"}; !slices.Equal(got, want) {
		t.Errorf("userPorts = %q, want %q", got, want)
	}
	if got := userPorts([]string{"unix:" + relay + ":2375"}, relay); len(got) != 0 {
		t.Errorf("the relay's socket alone: %q", got)
	}
}

func TestDockerMode(t *testing.T) {
	for flags, want := range map[string]bool{
		"--network=sandbox --net-raw --allow-packet-socket-write": true,
		"--net-raw --allow-packet-socket-write --host-uds=create": true,
		"--network=sandbox --net-raw":                             false,
		"":                                                        false,
	} {
		if got := dockerMode(flags); got != want {
			t.Errorf("dockerMode(%q) = %v, want %v", flags, got, want)
		}
	}
}

// relayOf reads the digest the shim records for a docker-mode task,
// finds none for another task, and refuses a file that holds no sha256.
func TestRelayOf(t *testing.T) {
	e := &Engine{layout: api.Layout{Dir: t.TempDir()}}
	sum := strings.Repeat("ab", 32)
	for id, content := range map[string]string{"docker": sum, "bad": "../../etc/passwd"} {
		dir := e.layout.TaskDir("ns", id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, api.RelayDigestFile), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := e.relayOf("ns", "docker"); got != sum || err != nil {
		t.Errorf("relayOf(docker) = %q, %v; want %s", got, err, sum)
	}
	if got, err := e.relayOf("ns", "plain"); got != "" || err != nil {
		t.Errorf("relayOf(a task without a relay) = %q, %v; want none", got, err)
	}
	if got, err := e.relayOf("ns", "bad"); err == nil || !strings.Contains(err.Error(), "not a sha256") {
		t.Errorf("relayOf(bad) = %q, %v; want a refusal naming the file", got, err)
	}
}

// A release waits for the restores reading the handle's image (use), and
// one asked for while it waits finds the handle released.
func TestReleaseWaitsForUse(t *testing.T) {
	e, err := New(nil, Options{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := e.store.newHandle(Handle{Lineage: "sb1", Sandbox: "sb1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.save(h); err != nil {
		t.Fatal(err)
	}
	_, done, err := e.use(h.ID)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- e.Release(context.Background(), h.ID) }()
	// The release waits; a new use meanwhile is refused.
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.mu.Lock()
		waiting := e.releasing[h.ID]
		e.mu.Unlock()
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the release never began")
		}
		time.Sleep(time.Millisecond)
	}
	if _, _, err := e.use(h.ID); !errors.Is(err, ErrUnknownHandle) {
		t.Errorf("use while the release waits: %v, want ErrUnknownHandle", err)
	}
	select {
	case err := <-released:
		t.Fatalf("the release returned (%v) while the handle was in use", err)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := os.Stat(e.store.ImageDir(h.ID)); err != nil {
		t.Fatalf("the handle's image went while in use: %v", err)
	}
	done()
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.use(h.ID); !errors.Is(err, ErrUnknownHandle) {
		t.Errorf("use after the release: %v, want ErrUnknownHandle", err)
	}
}
