package shim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/containerd/api/runtime/task/v3"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/log"

	"github.com/gvxrun/gvx/api"
)

// An exec's process lives inside the sandbox; on the host a waiter stands
// for it (the pid containerd's runc shim knows and signals). The waiter
// forwards the signals it receives, but not SIGKILL or SIGSTOP, which it
// cannot catch: sent to it, they would end or stop the waiter and leave
// the process running — and its output open, so that ExecSync with a
// timeout never returned. The shim delivers those two to the guest
// process itself, through the runtime's `kill --pid`; the waiter then
// sees the process die and exits with its status.

// uncatchable reports whether sig is one the exec's waiter cannot forward.
func uncatchable(sig uint32) bool {
	return syscall.Signal(sig) == syscall.SIGKILL || syscall.Signal(sig) == syscall.SIGSTOP
}

// execGuestPid reads the guest pid of exec execID of the task in bundle,
// which gvx-sentry (or gvx-runtime) writes beside the exec's pid file
// (containerd's runc shim names it <bundle>/<exec id>.pid).
func execGuestPid(bundle, execID string) (int, error) {
	p := execGuestPidFile(bundle, execID)
	data, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("guest pid file %s: bad pid %q", p, data)
	}
	return pid, nil
}

// execGuestPidFile is where exec execID of the task in bundle has its
// guest pid.
func execGuestPidFile(bundle, execID string) string {
	return filepath.Join(bundle, execID+".pid"+api.ExecGuestPidSuffix)
}

// removeExecGuestPid removes exec execID's guest pid file once the exec
// is deleted (containerd's runc shim removes its pid file).
func removeExecGuestPid(ctx context.Context, bundle, execID string) {
	if err := os.Remove(execGuestPidFile(bundle, execID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		log.G(ctx).WithError(err).Warnf("gvx shim: exec %s: remove its guest pid file", execID)
	}
}

// killExecInGuest delivers r's signal, if it is SIGKILL or SIGSTOP, to the
// guest process of a running exec of a task of this shim. It reports
// whether it did; when it did not (another signal, no such exec, the exec
// not running, no guest pid recorded, the runtime's kill failed), the runc
// task service's Kill goes ahead as usual and signals the host process.
func (s *service) killExecInGuest(ctx context.Context, r *task.KillRequest) bool {
	if r.ExecID == "" || !uncatchable(r.Signal) {
		return false
	}
	t := s.task(r.ID)
	if t == nil || t.binary == "" {
		return false
	}
	st, err := s.TTRPCTaskService.State(ctx, &task.StateRequest{ID: r.ID, ExecID: r.ExecID})
	if err != nil || st.Status != tasktypes.Status_RUNNING {
		return false
	}
	pid, err := execGuestPid(t.rec.Bundle, r.ExecID)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			log.G(ctx).WithError(err).Warnf("gvx shim: exec %s of %s: signalling its host process", r.ExecID, r.ID)
		}
		return false
	}
	if err := runtimeKill(ctx, t.binary, filepath.Join(t.rec.RuncRoot, t.rec.Namespace), r.ID, int(r.Signal), "--pid", strconv.Itoa(pid)); err != nil {
		// Gone meanwhile, or its sandbox is: the host process then ends
		// the exec for containerd.
		log.G(ctx).WithError(err).Warnf("gvx shim: exec %s of %s: signalling its host process instead", r.ExecID, r.ID)
		return false
	}
	return true
}

// runtimeKill runs `<binary> --root root kill OPTS… id sig`, the task's
// runtime (its gvx-sentry link) as containerd's runc shim runs it; its
// errors are read from its stderr. OPTS pick the processes: `--pid N`,
// `--all`. No --log: a kill may run after containerd removed the task's
// bundle (killAllInSandbox runs beside the task's Delete), and gVisor
// creates a --log file's directory, which made the bundle directory
// again and failed the next task of the same id ("mkdir …: file
// exists", seen in bench/churn).
func runtimeKill(ctx context.Context, binary, root, id string, sig int, opts ...string) error {
	args := append([]string{"--root", root, "kill"}, opts...)
	cmd := exec.CommandContext(ctx, binary, append(args, id, strconv.Itoa(sig))...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	code, err := runReaped(cmd)
	if err == nil && code != 0 {
		err = fmt.Errorf("exit status %d", code)
	}
	if err != nil {
		return fmt.Errorf("kill %s: %w: %s", strings.Join(opts, " "), err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
