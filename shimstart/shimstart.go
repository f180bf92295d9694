// Package shimstart is containerd-shim-gvx-v2: the command containerd
// runs to start gvx's shim, small enough to start in a few milliseconds.
//
// containerd runs a shim's binary twice per task besides the server it
// serves: `start`, whose answer it waits for before it creates the task,
// and `delete` after the server exits. The server (gvx-shim, package
// shim) links containerd's libraries, whose package initialisation alone
// costs ≈ 25 ms of CPU per process start. This command links none of
// them: it answers `start` itself — the bootstrap parameters containerd
// writes to its standard input, the group's socket, the server launched
// on it, the bootstrap result on its standard output, all as containerd's
// shim library does — and replaces itself with gvx-shim, installed next to
// it, for everything else (`-info`, `-v`, and a `delete` that has
// something to clean up), keeping its argument vector. A `delete` after a
// server that released everything (the usual end of a task) it answers
// itself. The server keeps this command's name as its argv[0], so it
// shows as containerd-shim-gvx-v2 in ps, as before.
package shimstart

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gvxrun/gvx/api"
)

// defaultSocketDir is where shim sockets go when containerd names none
// (containerd's default state directory's "s").
const defaultSocketDir = "/run/containerd/s"

// socketDirLink is the bundle's link to the socket directory, which the
// server (given no bootstrap parameters) reads to clean up (containerd's
// shim library names it so).
const socketDirLink = "s"

// groupLabels put several containers in one shim (and so one sandbox):
// anything that sets the gvx group label, and Kubernetes pods via CRI.
var groupLabels = []string{api.GroupLabel, api.CRISandboxID}

// Main runs the command with args (os.Args) and returns its exit status.
func Main(args []string) int {
	server, err := serverPath()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", api.ShimBinary, err)
		return 1
	}
	f, ok := parse(args)
	switch {
	case ok && f.action == "start":
		if err := start(f, server, args[0], os.Stdin, os.Stdout); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v", api.RuntimeType, err)
			return 1
		}
		return 0
	case ok && f.action == "delete" && f.namespace != "":
		if done, err := deleteFast(f.id, os.Stdout); done {
			if err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v", api.RuntimeType, err)
				return 1
			}
			return 0
		}
	}
	err = syscall.Exec(server, args, os.Environ())
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", api.ShimBinary, server, err)
	return 1
}

// serverPath is gvx-shim next to this executable.
func serverPath() (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), api.ShimServerBinary)
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%s next to %s: %w (install both with `make install`)", api.ShimServerBinary, self, err)
	}
	return p, nil
}

// flags are the command line containerd gives a shim binary.
type flags struct {
	namespace, id, address string
	debug                  bool
	action                 string
}

// parse reads the shim library's flags; ok is false for a command line
// this command leaves to the server (which reports what is wrong).
func parse(args []string) (flags, bool) {
	var f flags
	fs := flag.NewFlagSet(api.ShimBinary, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var ignored string
	var version, info bool
	fs.BoolVar(&f.debug, "debug", false, "")
	fs.BoolVar(&version, "v", false, "")
	fs.BoolVar(&version, "version", false, "")
	fs.BoolVar(&info, "info", false, "")
	fs.StringVar(&f.namespace, "namespace", "", "")
	fs.StringVar(&f.id, "id", "", "")
	fs.StringVar(&ignored, "socket", "", "")
	fs.StringVar(&ignored, "debug-socket", "", "")
	fs.StringVar(&ignored, "bundle", "", "")
	fs.StringVar(&f.address, "address", "", "")
	fs.StringVar(&ignored, "publish-binary", "", "")
	if len(args) == 0 || fs.Parse(args[1:]) != nil || version || info {
		return f, false
	}
	f.action = fs.Arg(0)
	return f, true
}

// start answers `start` for the task f names, whose bundle is the working
// directory: it creates the socket of the task's group and starts the
// server on it (or finds the group's server already there) and writes the
// bootstrap result to out. self is argv[0], the server's too.
func start(f flags, server, self string, in io.Reader, out io.Writer) (retErr error) {
	if f.namespace == "" {
		return errors.New("shim namespace cannot be empty")
	}
	input, err := io.ReadAll(io.LimitReader(in, 10<<20))
	if err != nil {
		return fmt.Errorf("read bootstrap parameters: %w", err)
	}
	if len(input) == 0 {
		return errors.New("no bootstrap parameters on stdin: this shim needs containerd 2.2 or later")
	}
	p, err := decodeParams(input)
	if err != nil {
		return err
	}
	if p.instanceID != f.id || p.namespace != f.namespace {
		return fmt.Errorf("bootstrap parameters (id %q, namespace %q) do not match the command line (id %q, namespace %q)",
			p.instanceID, p.namespace, f.id, f.namespace)
	}
	socketDir := defaultSocketDir
	if p.socketDir != "" {
		socketDir = p.socketDir
		if err := linkSocketDir(socketDir); err != nil {
			return err
		}
	}
	group, err := groupID(f.id)
	if err != nil {
		return err
	}
	address := socketAddress(socketDir, p.grpcAddress, f.namespace, group)
	result := func() error {
		_, err := out.Write(encodeResult(address))
		return err
	}
	ln, err := listen(address)
	if err != nil {
		if !errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("create shim socket %s: %w", address, err)
		}
		if canConnect(address) {
			// Another container of the group: its shim serves this one too.
			return result()
		}
		if err := os.Remove(socketPath(address)); err != nil {
			return fmt.Errorf("remove stale shim socket %s: %w", address, err)
		}
		if ln, err = listen(address); err != nil {
			return fmt.Errorf("create shim socket %s: %w", address, err)
		}
	}
	defer func() {
		ln.Close()
		if retErr != nil {
			_ = os.Remove(socketPath(address))
		}
	}()
	lf, err := ln.File()
	if err != nil {
		return fmt.Errorf("shim socket file: %w", err)
	}
	defer lf.Close()
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	args := []string{self, "-namespace", f.namespace, "-id", f.id, "-address", p.grpcAddress}
	if p.logLevel <= logLevelDebug {
		args = append(args, "-debug")
	}
	cmd := &exec.Cmd{Path: server, Args: args, Dir: cwd, Env: append(os.Environ(), "GOMAXPROCS=2"),
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true}, ExtraFiles: []*os.File{lf}}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start shim server: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = cmd.Process.Kill()
			_, _ = cmd.Process.Wait()
		}
	}()
	// containerd may ask for a negative OOM score; some hosts refuse that
	// even to root. A shim that cannot be protected from the OOM killer
	// still works, so this is a warning, not a failure.
	if err := adjustOOMScore(os.Getppid(), cmd.Process.Pid); err != nil {
		fmt.Fprintf(os.Stderr, "%s: cannot adjust the shim's OOM score (continuing): %v\n", api.ShimBinary, err)
	}
	return result()
}

// linkSocketDir points the bundle's socket directory link at dir.
func linkSocketDir(dir string) error {
	if _, err := os.Lstat(socketDirLink); err == nil {
		if err := os.Remove(socketDirLink); err != nil {
			return fmt.Errorf("remove existing socket dir link: %w", err)
		}
	}
	if err := os.Symlink(dir, socketDirLink); err != nil {
		return fmt.Errorf("failed to write socket-dir: %w", err)
	}
	return nil
}

// groupID reads the bundle's (the working directory's) spec annotations to
// decide which shim serves task id.
func groupID(id string) (string, error) {
	var s struct {
		Annotations map[string]string `json:"annotations"`
	}
	if err := api.ReadSpec(".", &s); err != nil {
		return "", err
	}
	return groupOf(id, s.Annotations), nil
}

// groupOf names the shim (and sandbox) that container id belongs to.
func groupOf(id string, annotations map[string]string) string {
	for _, l := range groupLabels {
		if g, ok := annotations[l]; ok && g != "" {
			return g
		}
	}
	return id
}

// socketAddress is the shim socket of group in namespace ns under dir, as
// containerd's shim library names it: the sha256 of containerd's address,
// the namespace and the group.
func socketAddress(dir, containerd, ns, group string) string {
	return fmt.Sprintf("unix://%s/%x", dir, sha256.Sum256([]byte(filepath.Join(containerd, ns, group))))
}

// socketPath is the file of a unix:// address.
func socketPath(address string) string { return strings.TrimPrefix(address, "unix://") }

// listen creates the socket at address, owner-only, in an owner-only
// directory.
func listen(address string) (*net.UnixListener, error) {
	path := socketPath(address)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("mkdir failed for %s: %w", path, err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the server serves it, and removes it at its end
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		os.Remove(path)
		return nil, fmt.Errorf("chmod failed for %s: %w", path, err)
	}
	return ln, nil
}

// canConnect reports whether a server answers at address.
func canConnect(address string) bool {
	c, err := net.DialTimeout("unix", socketPath(address), 100*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// adjustOOMScore gives the server (pid) the OOM score of containerd
// (parent) plus one, as containerd's shim library does.
func adjustOOMScore(parent, pid int) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/oom_score_adj", parent))
	if err != nil {
		return fmt.Errorf("get parent OOM score: %w", err)
	}
	score, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("get parent OOM score: %w", err)
	}
	score = min(max(score+1, -1000), 1000)
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(strconv.Itoa(score)), 0); err != nil {
		if os.IsPermission(err) && os.Geteuid() != 0 {
			return nil
		}
		return fmt.Errorf("set shim OOM score: %w", err)
	}
	return nil
}
