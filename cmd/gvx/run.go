package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx"
	"github.com/gvxrun/gvx/volume"
)

// runCommand is `gvx run`.
func runCommand() *cli.Command {
	first := 1
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command in a new gVisor sandbox (docker run's shape)",
		ArgsUsage: "IMAGE [COMMAND [ARG...]]",
		Description: "IMAGE is an image archive file (OCI or docker save; imported once) or an image\n" +
			"in containerd. The sandbox's exit status is gvx run's; gvx's own errors exit 125,\n" +
			"--timeout 124. Signals are passed on to the sandbox's init (twice: it is killed).\n" +
			"With --docker the image's init (its dockerd) keeps running and COMMAND runs\n" +
			"beside it once dockerd answers. Sandboxes run on gvx's embedded containerd\n" +
			"unless --address names one; gvx ps, exec and rm find detached ones.",
		StopOnNthArg:           &first,
		UseShortOptionHandling: true,
		Flags: append(sdkFlags(),
			&cli.BoolFlag{Name: "rm", Usage: "remove the sandbox when it exits"},
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "start it and print its id"},
			&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "attach standard input"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "give it a terminal"},
			&cli.StringFlag{Name: "name", Usage: "the sandbox's id ([a-z0-9]+; default random)"},
			&cli.StringFlag{Name: "memory", Aliases: []string{"m"}, Usage: "memory cap, e.g. 4g"},
			&cli.StringFlag{Name: "cpus", Usage: "CPU cap in cores, e.g. 2 or 0.5"},
			&cli.IntFlag{Name: "pids-limit", Usage: "cap on the sandbox's host tasks (gVisor's and the guest's)"},
			&cli.StringFlag{Name: "disk", Usage: "cap on what the root filesystem can take, e.g. 2g"},
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "KEY=VALUE (KEY alone: this process's value); repeatable"},
			&cli.StringFlag{Name: "workdir", Aliases: []string{"w"}, Usage: "working directory in the sandbox"},
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "user[:group] or uid[:gid] of the image"},
			&cli.StringFlag{Name: "entrypoint", Usage: "replace the image's entrypoint"},
			&cli.StringFlag{Name: "hostname", Usage: "the sandbox's hostname"},
			&cli.StringSliceFlag{Name: "volume", Aliases: []string{"v"}, Usage: "IMG.ext4:/guest/path[:ro|:clone] (an ext4lite volume) or HOST:/guest/path:ro (a read-only bind); repeatable"},
			&cli.BoolFlag{Name: "docker", Usage: "docker mode: dockerd inside; its socket on the host"},
			&cli.StringSliceFlag{Name: "publish", Aliases: []string{"p"}, Usage: "unix:/host.sock:/guest/dir/app.sock: a socket the guest creates, reachable on the host; with --net nat also HOSTPORT:GUESTPORT[/udp] and unix:/host.sock:GUESTPORT; repeatable"},
			&cli.StringFlag{Name: "net", Aliases: []string{"network"}, Value: "none", Usage: "network: none (loopback only) or nat (eth0 behind the sandbox's own userspace NAT, docs/network.md)"},
			&cli.StringSliceFlag{Name: "allow", Usage: "with --net nat: an egress allow rule (CIDR, address or DNS name, each [:PORT]); repeatable"},
			&cli.StringSliceFlag{Name: "deny", Usage: "with --net nat: an egress deny rule; repeatable"},
			&cli.StringFlag{Name: "egress", Usage: "with --net nat: what no rule matches: allow (default) or deny"},
			&cli.StringSliceFlag{Name: "dns", Usage: "with --net nat: a resolver ADDR:PORT the NAT's DNS forwards to; repeatable"},
			&cli.IntFlag{Name: "max-connections", Usage: "with --net nat: cap on the flows open at once (more are refused with an RST)"},
			&cli.StringFlag{Name: "bandwidth", Usage: "with --net nat: cap on the traffic per second each way, e.g. 8m (bytes)"},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the sandbox after this long (exit 124)"},
		),
		Action: exiting(exitCodeGVX, runAction),
	}
}

func runAction(ctx context.Context, cmd *cli.Command) error {
	args := cmd.Args().Slice()
	if len(args) == 0 {
		return usageError(cmd, "missing IMAGE")
	}
	cfg, err := runConfig(cmd, args[0], args[1:])
	if err != nil {
		return usageError(cmd, err.Error())
	}
	detach, docker := cmd.Bool("detach"), cmd.Bool("docker")
	switch {
	case detach && cmd.Bool("rm"):
		return usageError(cmd, "--rm with -d: no gvx process stays to remove the sandbox when it exits; remove it with gvx rm")
	case detach && cmd.Duration("timeout") > 0:
		return usageError(cmd, "--timeout with -d: no gvx process stays to enforce it")
	case detach && docker && len(args) > 1:
		return usageError(cmd, "-d --docker with a COMMAND: start the sandbox with -d, then gvx exec the command")
	}
	// With --docker, COMMAND runs beside the image's init (dockerd).
	var execCmd []string
	if docker && len(args) > 1 {
		execCmd, cfg.Cmd = args[1:], nil
	}
	tty := cmd.Bool("tty")
	if detach || execCmd != nil {
		cfg.Stdin, cfg.TTY = nil, false
	} else {
		cfg.Stdin, cfg.Stdout = stdinFor(cmd.Bool("interactive")), os.Stdout
		if !tty {
			cfg.Stderr = os.Stderr
		}
	}
	c, err := connectSDK(ctx, cmd)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	if tty && !detach && !isTerminal(os.Stdin) {
		return errors.New("-t: the input device is not a terminal (drop -t, or run from one)")
	}
	// Ctrl-C while the sandbox is being made cancels it (New removes what
	// it made); once it runs, signals are passed on to it.
	nctx, stopNotify := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	if cfg.TTY {
		cfg.Cols, cfg.Rows = termSize(true)
	}
	sb, err := c.New(nctx, cfg)
	if err != nil {
		interrupted := nctx.Err() != nil && ctx.Err() == nil
		stopNotify()
		if interrupted {
			return &exitError{code: 130, err: errors.New("interrupted while the sandbox was being made; it was removed")}
		}
		return err
	}
	if detach {
		stopNotify()
		fmt.Println(sb.ID())
		if docker {
			fmt.Fprintf(os.Stderr, "DOCKER_HOST=unix://%s\n", sb.DockerSocket())
		}
		return nil
	}
	cols, rows, restore, err := terminal(tty)
	if err != nil {
		stopNotify()
		if cmd.Bool("rm") {
			_ = sb.Close(context.WithoutCancel(ctx))
		}
		return err
	}
	if cfg.TTY && cols > 0 && (cols != cfg.Cols || rows != cfg.Rows) {
		_ = sb.Resize(ctx, cols, rows) // resized while it was being made
	}
	var code int
	if execCmd != nil {
		code, err = dockerExec(ctx, cmd, sb, execCmd, cols, rows, stopNotify)
		restore()
	} else {
		stop := forwardSignals(ctx, sb, cfg.TTY, func() { _ = sb.Signal(context.WithoutCancel(ctx), syscall.SIGKILL) })
		stopNotify()
		code, err = sb.Run(ctx)
		stop()
		restore()
	}
	if cmd.Bool("rm") {
		if cerr := sb.Close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = cerr
		}
	}
	if errors.Is(err, gvx.ErrTimeout) {
		return &exitError{code: exitCodeTimeout, err: err}
	}
	if err != nil {
		return err
	}
	if code != 0 {
		return &exitError{code: code}
	}
	return nil
}

// dockerExec runs a --docker sandbox's COMMAND beside its init, attached
// to this terminal, and returns its exit status.
func dockerExec(ctx context.Context, cmd *cli.Command, sb *gvx.Sandbox, args []string, cols, rows uint32, stopNotify func()) (int, error) {
	tty := cmd.Bool("tty")
	o := gvx.ExecOptions{Stdin: stdinFor(cmd.Bool("interactive")), Stdout: os.Stdout, Stderr: os.Stderr, TTY: tty, Cols: cols, Rows: rows}
	if tty {
		o.Stderr = nil
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := sb.Start(pctx, args, o)
	if err != nil {
		stopNotify()
		return 0, err
	}
	stop := forwardSignals(ctx, p, tty, cancel)
	stopNotify()
	res, err := p.Wait(ctx)
	stop()
	return res.ExitCode, err
}

// runConfig turns gvx run's flags into a sandbox Config.
func runConfig(cmd *cli.Command, image string, args []string) (gvx.Config, error) {
	cfg := gvx.Config{ID: cmd.String("name"), Image: image, Cmd: args, Workdir: cmd.String("workdir"), User: cmd.String("user"),
		Hostname: cmd.String("hostname"), TTY: cmd.Bool("tty"), Docker: cmd.Bool("docker"), Timeout: cmd.Duration("timeout")}
	if cfg.ID != "" && !gvx.ValidID(cfg.ID) {
		return cfg, fmt.Errorf("--name %q: use lower-case letters and digits ([a-z0-9]+)", cfg.ID)
	}
	if ep := cmd.String("entrypoint"); ep != "" {
		cfg.Entrypoint = []string{ep}
	}
	if ip := image; strings.HasSuffix(ip, ".tar") {
		if _, err := os.Stat(ip); err != nil {
			return cfg, fmt.Errorf("image archive %s: %w", ip, err)
		}
	}
	for _, kv := range cmd.StringSlice("env") {
		if !strings.Contains(kv, "=") {
			kv += "=" + os.Getenv(kv)
		}
		cfg.Env = append(cfg.Env, kv)
	}
	var err error
	if cfg.Resources, err = runResources(cmd); err != nil {
		return cfg, err
	}
	for _, v := range cmd.StringSlice("volume") {
		m, err := parseVolume(v)
		if err != nil {
			return cfg, err
		}
		cfg.Mounts = append(cfg.Mounts, m)
	}
	var nat gvx.NAT
	for _, p := range cmd.StringSlice("publish") {
		if natPort(p) {
			nat.Ports = append(nat.Ports, p)
			continue
		}
		pub, err := parsePublish(p)
		if err != nil {
			return cfg, err
		}
		cfg.Publish = append(cfg.Publish, pub)
	}
	// Empty stays nil: the gvx config's value then applies.
	nat.EgressAllow, nat.EgressDeny = nonEmpty(cmd.StringSlice("allow")), nonEmpty(cmd.StringSlice("deny"))
	nat.EgressDefault, nat.DNS = cmd.String("egress"), nonEmpty(cmd.StringSlice("dns"))
	nat.MaxConnections = int(cmd.Int("max-connections"))
	if bw := cmd.String("bandwidth"); bw != "" {
		if nat.Bandwidth, err = volume.ParseSize(bw); err != nil {
			return cfg, fmt.Errorf("--bandwidth: %w (bytes per second)", err)
		}
	}
	switch n := cmd.String("net"); n {
	case "", "none":
		if len(nat.Ports)+len(nat.EgressAllow)+len(nat.EgressDeny)+len(nat.DNS) > 0 || nat.EgressDefault != "" || nat.MaxConnections != 0 || nat.Bandwidth != 0 {
			return cfg, fmt.Errorf("published ports (-p %s), --allow, --deny, --egress, --dns, --max-connections and --bandwidth need --net nat", strings.Join(nat.Ports, ", -p "))
		}
	case "nat":
		cfg.Network, cfg.NAT = gvx.NetworkNAT, &nat
	default:
		return cfg, fmt.Errorf("--net %s: want none (loopback) or nat", n)
	}
	return cfg, nil
}

// runResources reads -m, --cpus, --pids-limit and --disk.
func runResources(cmd *cli.Command) (gvx.Resources, error) {
	var r gvx.Resources
	var err error
	if m := cmd.String("memory"); m != "" {
		if r.MemoryBytes, err = volume.ParseSize(m); err != nil {
			return r, fmt.Errorf("-m: %w", err)
		}
	}
	if d := cmd.String("disk"); d != "" {
		if r.DiskBytes, err = volume.ParseSize(d); err != nil {
			return r, fmt.Errorf("--disk: %w", err)
		}
	}
	if c := cmd.String("cpus"); c != "" {
		f, err := strconv.ParseFloat(c, 64)
		if err != nil || f <= 0 {
			return r, fmt.Errorf("--cpus %q: want a positive number of cores, e.g. 2 or 0.5", c)
		}
		r.CPUMillis = int64(f * 1000)
	}
	r.Pids = int64(cmd.Int("pids-limit"))
	return r, nil
}

// parseVolume reads -v SRC:DST[:OPTS]: an ext4 image file is a volume
// (OPTS ro, rw, clone), anything else a bind, which must be :ro.
func parseVolume(v string) (gvx.Mount, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || !strings.HasPrefix(parts[1], "/") {
		return gvx.Mount{}, fmt.Errorf("-v %s: want SOURCE:/guest/path[:ro|rw|clone]", v)
	}
	src, err := filepath.Abs(parts[0])
	if err != nil {
		return gvx.Mount{}, err
	}
	m := gvx.Mount{Source: src, Target: parts[1], Type: gvx.MountBind}
	var opts []string
	if len(parts) == 3 {
		opts = strings.Split(parts[2], ",")
	}
	st, err := os.Stat(src)
	if err != nil {
		return m, fmt.Errorf("-v %s: %w", v, err)
	}
	if st.Mode().IsRegular() {
		if _, err := volume.Inspect(context.Background(), src); err == nil {
			m.Type = gvx.MountVolume
		}
	}
	ro := false
	for _, o := range opts {
		switch o {
		case "ro":
			ro = true
		case "rw":
		case "clone":
			if m.Type != gvx.MountVolume {
				return m, fmt.Errorf("-v %s: clone applies to ext4lite volumes (an ext4 image file)", v)
			}
			m.Clone = true
		default:
			return m, fmt.Errorf("-v %s: unknown option %q (ro, rw, clone)", v, o)
		}
	}
	if m.Type == gvx.MountBind && !ro {
		return m, fmt.Errorf("-v %s: host files and directories are bound read-only in gvx: add :ro (writable storage: an ext4lite volume, see gvx volume create)", v)
	}
	m.ReadOnly = ro
	return m, nil
}

func nonEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// natPort reports whether -p p publishes a guest port through the NAT
// (HOSTPORT:GUESTPORT…, unix:/host.sock:GUESTPORT) rather than a guest
// unix socket (unix:/host.sock:/guest/path).
func natPort(p string) bool {
	if rest, ok := strings.CutPrefix(p, "unix:"); ok {
		_, guest, _ := strings.Cut(rest, ":")
		return !strings.HasPrefix(guest, "/")
	}
	return true
}

// parsePublish reads -p unix:/host.sock:/guest/dir/app.sock.
func parsePublish(p string) (gvx.Publish, error) {
	rest, ok := strings.CutPrefix(p, "unix:")
	host, guest, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return gvx.Publish{}, fmt.Errorf("-p %s: want unix:/host/path.sock:/guest/dir/app.sock, or with --net nat HOSTPORT:GUESTPORT or unix:/host.sock:GUESTPORT", p)
	}
	if !filepath.IsAbs(host) || !strings.HasPrefix(guest, "/") {
		return gvx.Publish{}, fmt.Errorf("-p %s: both socket paths must be absolute", p)
	}
	return gvx.Publish{HostPath: host, GuestPath: guest}, nil
}
