package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/integration/harness"
)

// TestSDKNarrowEgress: Sandbox.NarrowEgress narrows a running NAT
// sandbox's policy at once (a refused flow opens no host connection) and
// lifts it again; a checkpoint taken meanwhile keeps it, so a fork has
// it; a sandbox without a NAT and a bad rule are refused by kind.
// DialPort reaches a guest server through the NAT.
func TestSDKNarrowEgress(t *testing.T) {
	checkNoLeaks(t)
	c, _ := ckClient(t, 0)
	ctx := context.Background()
	srv := startNATHTTP(t, "through the nat")
	sb, err := c.New(ctx, sdk.Config{ID: "sdknarrow", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"},
		Network: sdk.NetworkNAT, NAT: &sdk.NAT{DNS: []string{"127.0.0.1:9"}, EgressAllow: []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := sb.Close(ctx); err != nil {
			t.Error(err)
		}
	}()
	get := []string{"wget", "-q", "-O", "-", fmt.Sprintf("http://10.0.2.2:%d/", srv.port)}
	reaches := func(sb *sdk.Sandbox, want bool, when string) {
		t.Helper()
		before := srv.conns.Load()
		res, err := sb.Exec(ctx, get, sdk.ExecOptions{Timeout: 30 * time.Second})
		if err != nil {
			t.Fatalf("%s: wget in %s: %v", when, sb.ID(), err)
		}
		got := res.ExitCode == 0 && string(res.Stdout) == "through the nat"
		if got != want {
			t.Errorf("%s: %s reached the host's server: %v, want %v (%+v)", when, sb.ID(), got, want, res)
		}
		if opened := srv.conns.Load() - before; !want && opened != 0 {
			t.Errorf("%s: a refused flow of %s opened %d host connections", when, sb.ID(), opened)
		}
	}
	reaches(sb, true, "before any narrowing")
	// The NAT's control socket is root's alone.
	sock, err := api.SentryRoot(filepath.Join(harness.State.SentryRoot(sb.ID()), testNS)).FindNATControl()
	if err != nil {
		t.Fatalf("the NAT of %s: %v", sb.ID(), err)
	}
	socketOf(t, sock)
	if err := sb.NarrowEgress(ctx, "deny", nil, nil); err != nil {
		t.Fatal(err)
	}
	reaches(sb, false, "narrowed to nothing")

	ck, err := sb.Checkpoint(ctx, sdk.CheckpointOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.ReleaseCheckpoint(ctx, ck.ID)
	forks, err := c.Fork(ctx, ck.ID, 1)
	if err != nil {
		t.Fatal(err)
	}
	fork := forks[0]
	defer fork.Close(ctx)
	reaches(fork, false, "a fork of a checkpoint taken narrowed")
	if err := fork.NarrowEgress(ctx, "", nil, nil); err != nil {
		t.Fatal(err)
	}
	reaches(fork, true, "the fork, its narrowing lifted")
	reaches(sb, false, "the sandbox, after its fork's was lifted")

	// E2B's order: an allow rule wins over a deny rule.
	if err := sb.NarrowEgress(ctx, "", []string{fmt.Sprintf("10.0.2.2:%d", srv.port)}, []string{"0.0.0.0/0"}); err != nil {
		t.Fatal(err)
	}
	reaches(sb, true, "denied all but the server")
	if err := sb.NarrowEgress(ctx, "", nil, []string{"10.0.2.2"}); err != nil {
		t.Fatal(err)
	}
	reaches(sb, false, "the host denied")
	if err := sb.NarrowEgress(ctx, "sometimes", nil, nil); !errors.Is(err, sdk.ErrInvalid) || !strings.Contains(err.Error(), "sometimes") {
		t.Errorf("a bad default: %v, want ErrInvalid naming it", err)
	}
	reaches(sb, false, "after a refused narrowing")

	// DialPort: a guest server reached through the NAT, published nowhere.
	srvCtx, stopSrv := context.WithCancel(ctx)
	defer stopSrv()
	go sb.Exec(srvCtx, []string{"sh", "-c", "echo hi-from-guest | nc -l -p 7000"}, sdk.ExecOptions{})
	var got []byte
	for i := 0; i < 100; i++ {
		conn, err := sb.DialPort(ctx, 7000)
		if err == nil {
			got, _ = io.ReadAll(conn)
			conn.Close()
			break
		}
		if !strings.Contains(err.Error(), "guest port 7000") {
			t.Fatalf("DialPort: %v, want an error naming the guest port while nothing listens", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if string(got) != "hi-from-guest\n" {
		t.Errorf("through DialPort: %q", got)
	}
	if _, err := sb.DialPort(ctx, 0); !errors.Is(err, sdk.ErrInvalid) {
		t.Errorf("DialPort(0): %v, want ErrInvalid", err)
	}

	plain, err := c.New(ctx, sdk.Config{ID: "sdknarrownone", Image: busyboxArchive(), Cmd: []string{"sleep", "100000"}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(ctx)
	if err := plain.NarrowEgress(ctx, "deny", nil, nil); !errors.Is(err, sdk.ErrUnsupported) || !strings.Contains(err.Error(), "no NAT") {
		t.Errorf("NarrowEgress of a sandbox without a NAT: %v, want ErrUnsupported", err)
	}
	if nw, err := sb.Network(ctx); err != nil || nw != sdk.NetworkNAT {
		t.Errorf("Network of a NAT sandbox: %q, %v", nw, err)
	}
	if nw, err := plain.Network(ctx); err != nil || nw != sdk.NetworkNone {
		t.Errorf("Network of a sandbox without a NAT: %q, %v", nw, err)
	}
	if _, err := plain.DialPort(ctx, 7000); !errors.Is(err, sdk.ErrUnsupported) {
		t.Errorf("DialPort of a sandbox without a NAT: %v, want ErrUnsupported", err)
	}
}
