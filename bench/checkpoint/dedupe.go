package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/integration/harness"
	"github.com/gvxrun/gvx/rollout"
)

// chainLength is how many checkpoints dedupeChain takes in a row.
const chainLength = 6

// dedupeChain measures what a chain of checkpoints costs on a store on
// XFS: a sandbox with mib MiB of dirty memory checkpointed chainLength
// times, 4 MiB more written before each checkpoint after the first, by
// an engine that deduplicates each checkpoint's memory against its
// parent's (the default) and by one that does not (Options.NoDedupe).
// The disk is what the store's filesystem lost; the CPU is the bench
// process's own (the engine, dedupe included, runs in it) from the
// first checkpoint until the engine closed (Close waits for the
// dedupes).
func (x *env) dedupeChain(ctx context.Context, mib int) error {
	work, err := os.MkdirTemp("", "gvx-ckdedupe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	mnt, umount, err := harness.LoopFS(work, "xfs")
	if err != nil {
		return err
	}
	defer umount()
	for _, off := range []bool{false, true} {
		used, cpu, took, err := x.chain(ctx, mnt, mib, off)
		if err != nil {
			return err
		}
		what := "dedupe"
		if off {
			what = "NoDedupe"
		}
		fmt.Printf("%-7s %-36s %10.1f MiB  (%.1f MiB each; %s, %.0f ms of the engine's CPU; XFS store)\n", fmt.Sprintf("%d MiB", mib),
			fmt.Sprintf("disk, %d checkpoints 4 MiB apart, %s", chainLength, what), float64(used)/(1<<20), float64(used)/(1<<20)/chainLength,
			ms(took), float64(cpu.Microseconds())/1000)
	}
	return nil
}

// chain takes the checkpoints of dedupeChain with one engine whose store
// is on filesystem mnt, and returns the disk they used, the CPU the
// process spent and the time it took.
func (x *env) chain(ctx context.Context, mnt string, mib int, noDedupe bool) (used int64, cpu, took time.Duration, retErr error) {
	store := filepath.Join(mnt, fmt.Sprintf("store-%v", noDedupe))
	defer os.RemoveAll(store)
	e, err := rollout.New(x.c, rollout.Options{StoreDir: store, NoDedupe: noDedupe})
	if err != nil {
		return 0, 0, 0, err
	}
	id := fmt.Sprintf("ckdd%d-%v", mib, noDedupe)
	if err := x.start(ctx, id, guest(mib), nil, ""); err != nil {
		return 0, 0, 0, err
	}
	sb, err := e.Adopt(ctx, id)
	if err != nil {
		if cont, err := x.c.LoadContainer(ctx, id); err == nil {
			stop(ctx, cont)
		}
		_ = e.Close(ctx)
		return 0, 0, 0, err
	}
	closeAll := func() error {
		return errors.Join(e.Destroy(ctx, sb), e.Close(ctx)) // Close waits for the dedupes
	}
	free0, cpu0, t0 := freeBytes(mnt), selfCPU(), time.Now()
	for i := 0; i < chainLength; i++ {
		if i > 0 {
			if _, err := execOut(ctx, sb.Task(), "sh", "-c", fmt.Sprintf("dd if=/dev/urandom of=/dev/shm/more%d bs=1M count=4 2>/dev/null", i)); err != nil {
				return 0, 0, 0, errors.Join(err, closeAll())
			}
		}
		if _, err := e.Checkpoint(ctx, sb); err != nil {
			return 0, 0, 0, errors.Join(err, closeAll())
		}
	}
	if err := closeAll(); err != nil {
		return 0, 0, 0, err
	}
	syscall.Sync()
	return free0 - freeBytes(mnt), selfCPU() - cpu0, time.Since(t0), nil
}

// freeBytes is the free space of the filesystem at path.
func freeBytes(path string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0
	}
	return int64(st.Bfree) * st.Bsize
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
