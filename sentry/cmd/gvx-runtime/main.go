// Command gvx-runtime is the runc-compatible command the gvx shim runs for
// a task: a small front for gvx-sentry. gvx-sentry carries gVisor and takes
// ≈ 5 ms to start; gvx-runtime ≈ 1 ms. It answers the calls that need no
// gVisor code itself — `create` of a task started as a process in a running
// sandbox (sentry/exectask/record), `start` of a task whose monitor waits
// on its start socket (sentry/monitor), and a detached `exec` in, a `kill`
// or a `delete` of a task whose monitor serves execs — and replaces itself
// with gvx-sentry, next to its own executable, for everything else, keeping its
// argument vector (argv[0] included: gvx-sentry reads the task's flags file
// beside it).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/sentry/bundle"
	"github.com/gvxrun/gvx/sentry/exectask/record"
	"github.com/gvxrun/gvx/sentry/hostcreds"
	"github.com/gvxrun/gvx/sentry/monitor"
)

// fast is what gvx-runtime answers itself, by subcommand: each handler
// reports whether it took the call; one that does not leaves it to
// gvx-sentry, which gets the command line as it came. (gvx-runtime's one
// other command, the waiter of a fast exec (waitCommand), is no runc call:
// main runs it before parsing anything.)
var fast = map[string]func(command) (handled bool, err error){
	"create": command.create, // a task started as a process in a running sandbox: its record and monitor
	"start":  command.start,  // a container or task whose monitor waits on its start socket
	"exec":   command.exec,   // a detached exec in a task whose monitor serves execs
	"kill":   command.kill,   // a started task: its monitor signals the process
	"delete": command.delete, // a task whose process has exited (or --force)
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == waitCommand {
		os.Exit(waitMain(os.Args[2:]))
	}
	sentry, err := sentryPath()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gvx-runtime: %v\n", err)
		os.Exit(1)
	}
	if c, ok := parse(os.Args); ok && fast[c.sub] != nil {
		c.sentry = sentry
		handled, err := fast[c.sub](c)
		if handled {
			if err != nil {
				c.fail(err)
			}
			return
		}
	}
	err = syscall.Exec(sentry, os.Args, os.Environ())
	fmt.Fprintf(os.Stderr, "gvx-runtime: exec %s: %v\n", sentry, err)
	os.Exit(1)
}

// sentryPath is gvx-sentry (api.SentryBinary) next to this executable.
func sentryPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	p := filepath.Join(filepath.Dir(self), api.SentryBinary)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s next to %s: %w (install both with `make install`)", api.SentryBinary, self, err)
	}
	return p, nil
}

// command is a parsed command line: global flags, subcommand and its
// arguments.
type command struct {
	globals []string // argv[0] and the global flags
	root    string
	log     string
	sub     string
	args    []string
	sentry  string // gvx-sentry's path (main sets it)
}

// valued are the global flags containerd's runc shim (go-runc) passes with
// a separate value; boolFlags those it passes alone. Anything else makes
// gvx-runtime hand the call to gvx-sentry untouched.
var (
	valued    = map[string]bool{"--root": true, "--log": true, "--log-format": true}
	boolFlags = map[string]bool{"--debug": true, "--systemd-cgroup": true}
)

func parse(argv []string) (command, bool) {
	c := command{globals: argv[:1]}
	i := 1
	for ; i < len(argv) && strings.HasPrefix(argv[i], "-"); i++ {
		a := argv[i]
		name, value, hasValue := strings.Cut(a, "=")
		name = "--" + strings.TrimLeft(name, "-")
		switch {
		case hasValue:
		case valued[name] && i+1 < len(argv):
			i++
			value = argv[i]
			c.globals = append(c.globals, a)
			a = argv[i]
		case boolFlags[name]:
		default:
			return c, false
		}
		c.globals = append(c.globals, a)
		switch name {
		case "--root":
			c.root = value
		case "--log":
			c.log = value
		}
	}
	if i >= len(argv) || c.root == "" {
		return c, false
	}
	c.sub, c.args = argv[i], argv[i+1:]
	return c, true
}

// start handles `start <id>` of a container or task whose monitor waits
// on its start socket: the monitor starts it.
func (c command) start() (bool, error) {
	if len(c.args) != 1 || !monitor.Has(c.root, c.args[0]) {
		return false, nil
	}
	return true, monitor.RequestStart(c.root, c.args[0])
}

// delete handles `delete [--force] <id>` of a task started as a process in
// a running sandbox whose process has exited (its monitor is gone) or with
// --force: it removes the task's record and socket. The sandbox was the
// task's alone and goes with the shim's release of it (pool.Sandbox.Destroy
// kills it through its cgroup), so no gvx-sentry start-up is needed here.
func (c command) delete() (bool, error) {
	flags, ids, ok := subArgs(c.args, nil, map[string]string{"--force": "force", "--f": "force"})
	if !ok || len(ids) != 1 {
		return false, nil
	}
	id, force := ids[0], flags["force"] == "true"
	if !record.Exists(c.root, id) {
		return false, nil
	}
	if !force {
		if conn, err := monitor.Dial(c.root, id); err == nil {
			conn.Close()
			return false, nil // still running: gvx-sentry refuses it
		}
	}
	os.Remove(api.SentryRoot(c.root).MonitorSocket(id))
	if err := os.Remove(api.SentryRoot(c.root).TaskRecord(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return true, fmt.Errorf("delete task %s: %w", id, err)
	}
	return true, nil
}

// kill handles `kill <id> [signal]` of a running task started as a process
// in a running sandbox: its monitor signals the process.
func (c command) kill() (bool, error) {
	if len(c.args) == 0 || len(c.args) > 2 || strings.HasPrefix(c.args[0], "-") {
		return false, nil // --all, --pid: gvx-sentry's
	}
	id, name := c.args[0], "TERM"
	if len(c.args) == 2 {
		name = c.args[1]
	}
	sig, err := monitor.ParseSignal(name)
	if err != nil {
		return false, nil
	}
	r, err := record.Load(c.root, id)
	if err != nil || r.Pid == 0 {
		return false, nil // not started: gvx-sentry records the kill
	}
	conn, err := monitor.Dial(c.root, id)
	if err != nil {
		return false, nil
	}
	defer conn.Close()
	if _, err := monitor.Send(conn, monitor.Request{Op: monitor.OpSignal, Pid: r.Pid, Signal: int(sig)}); err != nil {
		if errors.Is(err, monitor.ErrGone) {
			// The monitor exits with the task's process: it is gone. (A
			// monitor that answers says api.NotRunning itself when the
			// process or its sandbox is gone.)
			err = fmt.Errorf("%s: %w", api.NotRunning, err)
		}
		return true, fmt.Errorf("kill task %s: %w", id, err)
	}
	return true, nil
}

// exec handles `exec --detach --pid-file P --process F <id>` of a task
// started as a process in a running sandbox: its monitor executes the
// process (it holds a control connection to the sandbox), and a waiter —
// this program again, ≈ 1 ms to start — stands for it on the host.
func (c command) exec() (bool, error) {
	flags, ids, ok := subArgs(c.args, map[string]string{"--pid-file": "pid-file", "--process": "process", "--p": "process"},
		map[string]string{"--detach": "detach", "--d": "detach"})
	if !ok || len(ids) != 1 {
		return false, nil // a command line, a console socket, preserved fds, …
	}
	id, pidFile, process, detach := ids[0], flags["pid-file"], flags["process"], flags["detach"] == "true"
	if !detach || pidFile == "" || process == "" {
		return false, nil
	}
	r, err := record.Load(c.root, id)
	if err != nil {
		return false, nil // not such a task
	}
	data, err := os.ReadFile(process)
	if err != nil {
		return false, nil
	}
	var p specs.Process
	if err := json.Unmarshal(data, &p); err != nil || p.Terminal {
		return false, nil
	}
	spec, err := bundle.ReadSpec(r.Bundle)
	if err != nil {
		return false, nil
	}
	conn, err := monitor.Dial(c.root, id)
	if err != nil {
		return false, nil // the task's process has exited: gvx-sentry's exec
	}
	defer conn.Close()
	// Like runsc, hand the sandbox stdio it owns.
	uid, gid := hostcreds.HostRoot(spec)
	stdio := []*os.File{os.Stdin, os.Stdout, os.Stderr}
	for _, f := range stdio {
		if err := f.Chown(uid, gid); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EROFS) {
			return true, fmt.Errorf("exec: stdio: %w", err)
		}
	}
	reply, err := monitor.Send(conn, monitor.Request{Op: monitor.OpExec, Process: &p}, stdio...)
	if err != nil {
		return true, fmt.Errorf("exec in task %s: %w", id, err)
	}
	waiter, err := spawnWaiter(c.root, id, reply, uid, gid)
	if err == nil {
		err = bundle.WritePidFile(pidFile, waiter.Pid)
	}
	if err != nil {
		if waiter != nil {
			_ = waiter.Kill()
		}
		_, _ = monitor.Send(conn, monitor.Request{Op: monitor.OpSignal, Pid: reply.Pid, Signal: int(unix.SIGKILL)})
		return true, fmt.Errorf("exec in task %s: %w", id, err)
	}
	_ = waiter.Release()
	return true, nil
}

// waitCommand is the waiter's internal subcommand.
const waitCommand = "gvx-runtime-wait"

// spawnWaiter starts the waiter of exec'd guest process reply.Pid, with a
// connection to the sandbox's control socket opened here (as root) for it;
// it drops to host uid and gid.
func spawnWaiter(root, id string, reply *monitor.Reply, uid, gid int) (*os.Process, error) {
	conn, err := monitor.DialPath(reply.Control)
	if err != nil {
		return nil, fmt.Errorf("sandbox control %w", err)
	}
	ctl, err := conn.File()
	conn.Close()
	if err != nil {
		return nil, err
	}
	defer ctl.Close()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	w := exec.Command(self, waitCommand, root, id, strconv.Itoa(int(reply.Pid)), strconv.Itoa(uid), strconv.Itoa(gid))
	w.ExtraFiles = []*os.File{ctl}
	w.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := w.Start(); err != nil {
		return nil, fmt.Errorf("start waiter: %w", err)
	}
	return w.Process, nil
}

// waitMain is the waiter (gvx-runtime-wait root id pid uid gid, the
// sandbox connection as fd 3): it asks the task's monitor to wait for the
// exec'd process over that connection, drops to the sandbox's host uid,
// forwards the signals it receives to the process and exits with its
// status (api.ExitCode; api.ExitKilled if the monitor goes away first: the
// task's process exited and the sandbox is being torn down).
func waitMain(args []string) int {
	if len(args) != 5 {
		fmt.Fprintf(os.Stderr, "usage: %s root id pid uid gid\n", waitCommand)
		return 2
	}
	root, id := args[0], args[1]
	pid, err1 := strconv.Atoi(args[2])
	uid, err2 := strconv.Atoi(args[3])
	gid, err3 := strconv.Atoi(args[4])
	if err := errors.Join(err1, err2, err3); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", waitCommand, err)
		return 2
	}
	ctl := os.NewFile(3, "sandbox")
	waitConn, err := monitor.Dial(root, id)
	if err != nil {
		return api.ExitKilled
	}
	err = monitor.Write(waitConn, monitor.Request{Op: monitor.OpWait, Pid: int32(pid)}, ctl)
	ctl.Close()
	if err != nil {
		return api.ExitKilled
	}
	sigConn, err := monitor.Dial(root, id)
	if err != nil {
		return api.ExitKilled
	}
	if err := hostcreds.Drop(uid, gid); err != nil {
		fmt.Fprintf(os.Stderr, "%s: keeps its privileges: %v\n", waitCommand, err)
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for s := range sigs {
			sig, ok := s.(syscall.Signal)
			if !ok || sig == syscall.SIGURG || sig == syscall.SIGCHLD || sig == syscall.SIGPIPE {
				continue // the Go runtime's own, or not for the process
			}
			if _, err := monitor.Send(sigConn, monitor.Request{Op: monitor.OpSignal, Pid: int32(pid), Signal: int(sig)}); err != nil {
				fmt.Fprintf(os.Stderr, "%s: forward signal %d: %v\n", waitCommand, sig, err)
			}
		}
	}()
	reply, err := monitor.Read(waitConn)
	if err != nil {
		return api.ExitKilled
	}
	return api.ExitCode(syscall.WaitStatus(reply.Status))
}

// create handles `create --bundle B --pid-file P <id>` of a task started
// as a process in a running sandbox.
func (c command) create() (bool, error) {
	flags, ids, ok := subArgs(c.args, map[string]string{"--bundle": "bundle", "--b": "bundle", "--pid-file": "pid-file"},
		map[string]string{"--no-pivot": "", "--no-new-keyring": ""})
	if !ok || len(ids) != 1 || flags["pid-file"] == "" {
		return false, nil // a console socket, preserved fds, …
	}
	id, dir, pidFile := ids[0], flags["bundle"], flags["pid-file"]
	if dir == "" {
		dir, _ = os.Getwd()
	}
	spec, err := bundle.ReadSpec(dir)
	if err != nil || !record.IsTask(spec) || spec.Process == nil || spec.Process.Terminal {
		return false, nil
	}
	m := exec.Command(c.sentry, append(append([]string(nil), c.globals[1:]...), record.MonitorCommand, id)...)
	m.Args[0] = c.globals[0]
	m.Stdin, m.Stdout, m.Stderr = os.Stdin, os.Stdout, os.Stderr
	return true, record.Create(c.root, id, dir, spec, m, pidFile)
}

// subArgs parses a subcommand's arguments the way runsc's flag package
// does (-name or --name, a value after = or as the next argument): flags
// in valued take a value, flags in bools none (or =true/=false); both map
// a flag to the key it is returned under ("" to ignore it). Any other flag
// makes ok false: gvx-runtime then leaves the call to gvx-sentry.
func subArgs(args []string, valued, bools map[string]string) (flags map[string]string, positional []string, ok bool) {
	flags = map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			positional = append(positional, a)
			continue
		}
		name, value, hasValue := strings.Cut(a, "=")
		name = "--" + strings.TrimLeft(name, "-")
		if key, isBool := bools[name]; isBool {
			if !hasValue {
				value = "true"
			}
			if key != "" {
				flags[key] = value
			}
			continue
		}
		key, isValued := valued[name]
		if !isValued {
			return nil, nil, false
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, nil, false
			}
			i++
			value = args[i]
		}
		flags[key] = value
	}
	return flags, positional, true
}

// fail reports err the way runsc does — a JSON line in the --log file,
// which containerd's runc shim quotes in its error — and on stderr, and
// exits 1.
func (c command) fail(err error) {
	msg := fmt.Sprintf("%s: %v", c.sub, err)
	fmt.Fprintf(os.Stderr, "gvx-runtime: %s\n", msg)
	if c.log != "" {
		if f, ferr := os.OpenFile(c.log, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); ferr == nil {
			line, _ := json.Marshal(map[string]string{"level": "error", "msg": msg, "time": time.Now().Format(time.RFC3339)})
			_, _ = f.Write(append(line, '\n'))
			f.Close()
		}
	}
	os.Exit(1)
}
