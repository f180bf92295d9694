package integration

import (
	"context"
	"io"
	"testing"
	"time"

	sdk "github.com/gvxrun/gvx"
)

// TestSDKCloseStdin: CloseStdin gives the process EOF while the reader
// it reads from is still open (an io.Pipe nobody closed, a terminal): for
// an exec and for the init. containerd's CloseIO alone closes only the
// shim's end; the client's FIFO stayed open and `cat` waited forever.
func TestSDKCloseStdin(t *testing.T) {
	c := sdkClient(t)
	checkNoLeaks(t)
	ctx := context.Background()
	ipr, ipw := io.Pipe()
	defer ipw.Close()
	var iout syncBuffer
	sb, err := c.New(ctx, sdk.Config{ID: "sdkstdin", Image: busyboxArchive(), Cmd: []string{"cat"}, Stdin: ipr, Stdout: &iout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Close(context.Background()) })

	pr, pw := io.Pipe()
	defer pw.Close()
	var out syncBuffer
	p, err := sb.Start(ctx, []string{"cat"}, sdk.ExecOptions{Stdin: pr, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the exec's cat echoes", func() bool { return out.String() == "x\n" })
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatalf("CloseStdin: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := p.Wait(wctx)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec cat after CloseStdin with its reader open: %+v, %v (want exit 0 within 10 s)", res, err)
	}
	// A second CloseStdin is harmless; the process is gone.
	_ = p.CloseStdin(ctx)

	if _, err := ipw.Write([]byte("y\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the init's cat echoes", func() bool { return iout.String() == "y\n" })
	if err := sb.CloseStdin(ctx); err != nil {
		t.Fatalf("init CloseStdin: %v", err)
	}
	rctx, cancel2 := context.WithTimeout(ctx, 10*time.Second)
	defer cancel2()
	if code, err := sb.Run(rctx); err != nil || code != 0 {
		t.Fatalf("init cat after CloseStdin with its reader open: %d, %v (want 0 within 10 s)", code, err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
