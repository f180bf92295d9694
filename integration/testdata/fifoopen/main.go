// Command fifoopen checks that a blocking open(2) of a FIFO survives signals
// whose handlers have SA_RESTART, as on Linux (signal(7)): a thread blocks
// opening a FIFO for writing, is sent SIGUSR1 several times (the Go runtime
// installs its handlers with SA_RESTART), and only then does a reader open
// the other end. It prints "ok" or the open's error and exits 1.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGUSR1)
	dir, err := os.MkdirTemp("", "fifoopen")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)
	for i := 0; i < 3; i++ {
		if err := openInterrupted(filepath.Join(dir, fmt.Sprint(i))); err != nil {
			fail(err)
		}
	}
	fmt.Println("ok")
}

func openInterrupted(path string) error {
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return fmt.Errorf("mkfifo: %w", err)
	}
	tid := make(chan int)
	opened := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		tid <- unix.Gettid()
		fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		opened <- err
	}()
	writer := <-tid
	for i := 0; i <= 5; i++ {
		select {
		case err := <-opened:
			return fmt.Errorf("open for writing returned before a reader opened the FIFO (after %d signals): %v", i, err)
		case <-time.After(20 * time.Millisecond):
		}
		if i == 5 {
			break
		}
		if err := unix.Tgkill(unix.Getpid(), writer, syscall.SIGUSR1); err != nil {
			return fmt.Errorf("tgkill: %w", err)
		}
	}
	r, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open for reading: %w", err)
	}
	defer r.Close()
	if err := <-opened; err != nil {
		return fmt.Errorf("open for writing: %w", err)
	}
	return nil
}

func fail(err error) {
	fmt.Println(err)
	os.Exit(1)
}
