package gvx

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// killMarked kills, inside the sandbox, every process whose environment
// carries exec id's mark, until none is left (through the image's sh and
// grep).
func (s *Sandbox) killMarked(id string) error {
	ctx, cancel := context.WithTimeout(s.c.Context(context.Background()), 30*time.Second)
	defer cancel()
	const script = `m="GVX_EXEC=$1"; i=0
while [ $i -lt 100 ]; do
	found=
	for d in /proc/[0-9]*; do
		if grep -qa -e "$m" "$d/environ" 2>/dev/null; then kill -9 "${d#/proc/}" 2>/dev/null && found=1; fi
	done
	[ -z "$found" ] && exit 0
	i=$((i+1))
done
exit 1`
	spec, err := s.execSpec(ctx, []string{"/bin/sh", "-c", script, "sh", id}, ExecOptions{User: "0:0"})
	if err != nil {
		return err
	}
	proc, ch, err := s.startSweep(ctx, "k"+id, spec)
	if err != nil {
		return err
	}
	defer func() { _, _ = proc.Delete(context.WithoutCancel(ctx), client.WithProcessKill) }()
	select {
	case st := <-ch:
		if st.ExitCode() != 0 {
			return fmt.Errorf("the sweep exited with %d (is there /bin/sh and grep in the image?)", st.ExitCode())
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startSweep starts the sweep's process (exec id kid) in the sandbox's
// current backing, not in one a rollback is replacing.
func (s *Sandbox) startSweep(ctx context.Context, kid string, spec *specs.Process) (client.Process, <-chan client.ExitStatus, error) {
	s.swap.RLock()
	defer s.swap.RUnlock()
	proc, err := s.curTask().Exec(ctx, kid, spec, cio.NullIO)
	if err != nil {
		return nil, nil, err
	}
	ch, err := proc.Wait(ctx)
	if err == nil {
		err = proc.Start(ctx)
	}
	if err != nil {
		_, _ = proc.Delete(context.WithoutCancel(ctx), client.WithProcessKill)
		return nil, nil, err
	}
	return proc, ch, nil
}

// replaceEnv sets kv (K=V) in env, replacing K's value.
func replaceEnv(env []string, kv string) []string {
	k, _, _ := strings.Cut(kv, "=")
	for i, e := range env {
		if ek, _, _ := strings.Cut(e, "="); ek == k {
			env[i] = kv
			return env
		}
	}
	return append(env, kv)
}

// randomSuffix is 8 random lower-case letters.
func randomSuffix() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = 'a' + b[i]%26
	}
	return string(b)
}

// syncBuffer is a bytes.Buffer safe for one writer and readers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
