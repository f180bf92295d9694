package harness

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// interruptible is set once a program handles its interrupts
// (Interruptible): the processes the harness starts after it (containerd,
// pool servers) get process groups of their own, so that a Ctrl-C in the
// terminal reaches only the program, which stops them in order — tasks
// first, while containerd still answers.
var interruptible atomic.Bool

// children are the harness's processes still running, which a second
// interrupt stops before the program exits.
var children sync.Map // *os.Process → struct{}

// Interruptible returns ctx ended by the first SIGINT or SIGTERM, which
// it reports on stderr: a benchmark stops its work on it and returns
// through its clean-ups (Bench.Close and Containerd.Close remove every
// task the containerd still has, then stop it). A second signal stops
// the harness's processes and ends the program at once (exit 130). stop
// releases the signals.
func Interruptible(ctx context.Context, what string) (_ context.Context, stop func()) {
	interruptible.Store(true)
	ctx, cancel := context.WithCancel(ctx)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "\n%s: %v: stopping and cleaning up (again to quit at once)\n", what, s)
			cancel()
		case <-done:
			return
		}
		select {
		case <-sigs:
			fmt.Fprintf(os.Stderr, "%s: quitting: containerd, its shims and sandboxes may be left\n", what)
			children.Range(func(p, _ any) bool {
				_ = p.(*os.Process).Signal(syscall.SIGTERM)
				return true
			})
			os.Exit(130)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel()
		})
	}
}

// ownGroup gives a process the harness starts its own process group once
// the program handles its interrupts (Interruptible).
func ownGroup() *syscall.SysProcAttr {
	if !interruptible.Load() {
		return nil
	}
	return &syscall.SysProcAttr{Setpgid: true}
}

// started and ended track the harness's running processes (children).
func started(p *os.Process) { children.Store(p, struct{}{}) }
func ended(p *os.Process)   { children.Delete(p) }
