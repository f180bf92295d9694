package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/log"
	"github.com/urfave/cli/v3"

	"github.com/gvxrun/gvx/config"
	"github.com/gvxrun/gvx/janitor"
	"github.com/gvxrun/gvx/metrics"
	"github.com/gvxrun/gvx/serve"
	"github.com/gvxrun/gvx/serve/gvxbackend"
)

const defaultServeDir = "/run/gvx/serve"

// serveCommand is `gvx serve`: the sandbox service speaking E2B's API.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve sandboxes over E2B's API (and gvx's own routes) until SIGINT/SIGTERM",
		Description: "One HTTP listener serves E2B's control plane, E2B's in-sandbox protocol (envd)\n" +
			"and gvx's routes (/gvx/v1/…). Point the e2b SDKs at it with\n" +
			"  E2B_API_URL=http://127.0.0.1:7820 E2B_SANDBOX_URL=http://127.0.0.1:7820 E2B_API_KEY=<a key of --keys>\n" +
			"(https:// with --tls-cert/--tls-key; Node trusts a private CA through NODE_EXTRA_CA_CERTS).\n" +
			"Sandboxes outlive a restart of the service: it re-adopts them. See docs/serve.md.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Usage: "unix:///path (made 0600) or tcp://127.0.0.1:PORT (default unix://<state-dir>/serve.sock)"},
			&cli.BoolFlag{Name: "allow-remote", Usage: "allow a TCP listener on a non-loopback address"},
			&cli.StringFlag{Name: "tls-cert", Usage: "serve HTTPS with this PEM certificate (chain) and --tls-key, both read again when they change"},
			&cli.StringFlag{Name: "tls-key", Usage: "the PEM private key of --tls-cert"},
			&cli.StringFlag{Name: "state-dir", Value: defaultServeDir, Usage: "the sandbox table, API templates, the default socket"},
			&cli.StringFlag{Name: "keys", Usage: "API keys file, mode 0600 (default <state-dir>/keys, made with one key if missing)"},
			&cli.StringFlag{Name: "templates", Usage: "templates TOML file ([[template]] name, image, pool_size, …)"},
			&cli.StringFlag{Name: "domain", Usage: "the sandboxes' domain: getHost(port) is <port>-<id>.<domain>"},
			&cli.StringFlag{Name: "containerd", Usage: "containerd socket with gvx's runtime (default: the SDK's embedded containerd)"},
			&cli.StringFlag{Name: "runtime-config", Usage: "gvx config the sandboxes run with"},
			&cli.DurationFlag{Name: "max-timeout", Value: 24 * time.Hour, Usage: "longest sandbox timeout a client may ask"},
			&cli.DurationFlag{Name: "paused-timeout", Value: time.Hour, Usage: "how long a sandbox paused at its end time is kept"},
			&cli.StringFlag{Name: "checkpoint-dir", Usage: "where checkpoints are kept; on the volumes' XFS or btrfs for reflink copies (default: the SDK's, <data dir>/checkpoints)"},
			&cli.IntFlag{Name: "spares", Usage: "restored sandboxes kept ready per checkpoint: a rollback or fork to it is then ≈ 1 ms instead of a restore (each costs a sandbox's memory)"},
			&cli.StringFlag{Name: "metrics-listen", Usage: "also serve GET /metrics on unix:///path or a loopback host:port (it is on --listen too)"},
			&cli.BoolFlag{Name: "kill-on-exit", Usage: "kill every sandbox when the service stops (default: keep them for the next start)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Commands: []*cli.Command{serveKeyCommand()},
		Action:   runServe,
	}
}

func serveKeyCommand() *cli.Command {
	return &cli.Command{
		Name:  "key",
		Usage: "add a new API key to the keys file and print it",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "keys", Value: filepath.Join(defaultServeDir, "keys"), Usage: "API keys file"},
			&cli.StringFlag{Name: "name", Usage: "a name kept beside the key"},
		},
		Action: func(_ context.Context, cmd *cli.Command) error {
			if _, err := needArgs(cmd); err != nil {
				return err
			}
			path := cmd.String("keys")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return err
			}
			key := serve.NewKey()
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
			if err != nil {
				return fmt.Errorf("keys file: %w", err)
			}
			defer f.Close()
			if _, err := fmt.Fprintf(f, "%s %s\n", key, cmd.String("name")); err != nil {
				return fmt.Errorf("keys file: %w", err)
			}
			if _, _, err := serve.LoadKeys(path, false); err != nil {
				return err
			}
			fmt.Println(key)
			return nil
		},
	}
}

func runServe(ctx context.Context, cmd *cli.Command) error {
	if _, err := needArgs(cmd); err != nil {
		return err
	}
	if err := log.SetLevel(cmd.String("log-level")); err != nil {
		return usageError(cmd, "--log-level: "+err.Error())
	}
	if (cmd.String("tls-cert") == "") != (cmd.String("tls-key") == "") {
		return usageError(cmd, "--tls-cert and --tls-key go together: give both (HTTPS) or neither (HTTP)")
	}
	var tlsFiles *serve.TLS
	if cmd.String("tls-cert") != "" {
		var err error
		if tlsFiles, err = serve.LoadTLS(cmd.String("tls-cert"), cmd.String("tls-key")); err != nil {
			return err
		}
	}
	dir := cmd.String("state-dir")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	keysPath := cmd.String("keys")
	if keysPath == "" {
		keysPath = filepath.Join(dir, "keys")
	}
	keys, created, err := serve.LoadKeys(keysPath, !cmd.IsSet("keys"))
	if err != nil {
		return err
	}
	if created != "" {
		fmt.Fprintf(os.Stderr, "gvx serve: made the keys file %s with the API key %s\n", keysPath, created)
	}
	templates, err := serve.LoadTemplates(cmd.String("templates"), filepath.Join(dir, "templates.json"))
	if err != nil {
		return err
	}
	addr := cmd.String("listen")
	if addr == "" {
		addr = "unix://" + filepath.Join(dir, "serve.sock")
	}
	l, err := serve.Listen(addr, cmd.Bool("allow-remote"))
	if err != nil {
		return err
	}
	defer l.Close()
	scheme := "http"
	if tlsFiles != nil {
		l, scheme = tls.NewListener(l, tlsFiles.Config()), "https"
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if cmd.Int("spares") < 0 {
		return fmt.Errorf("--spares %d: give 0 or more", cmd.Int("spares"))
	}
	b, err := gvxbackend.New(ctx, gvxbackend.Options{
		Containerd: cmd.String("containerd"), RuntimeConfig: cmd.String("runtime-config"),
		StateDir: filepath.Join(dir, "sdk"), Progress: os.Stderr,
		CheckpointDir: cmd.String("checkpoint-dir"), Spares: int(cmd.Int("spares")),
	})
	if err != nil {
		return err
	}
	defer b.Close()
	for _, t := range templates.List() {
		if err := b.Prepare(ctx, t); err != nil {
			return fmt.Errorf("template %s: %w", t.Name, err)
		}
	}
	svc, err := serve.New(ctx, serve.Config{
		Backend: b, Keys: keys, Templates: templates, StateDir: dir, Domain: cmd.String("domain"),
		MaxTimeout: cmd.Duration("max-timeout"), PausedTimeout: cmd.Duration("paused-timeout"),
	})
	if err != nil {
		return err
	}
	if a := cmd.String("metrics-listen"); a != "" {
		if err := metrics.Endpoint(ctx, a, cmd.Bool("allow-remote"), svc.Metrics()); err != nil {
			return err
		}
	}
	// The janitor sweeps the state of the runtime config's sandboxes.
	if rc, err := config.Load(cmd.String("runtime-config")); err != nil {
		log.G(ctx).WithError(err).Warn("gvx serve: no janitor (the runtime config does not load)")
	} else {
		self, _ := os.Executable()
		sentry, _ := rc.SentryPath(self)
		svc.Metrics().NAT(rc.Layout())
		o := janitor.FromConfig(rc, sentry)
		o.Containerd = append(o.Containerd, b.Client().Address())
		go janitor.Every(ctx, rc.Janitor.Interval, o, func(r *janitor.Report) { svc.Metrics().Swept(r.Reclaimed(), r.Failed()) })
	}
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 30 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	log.G(ctx).Infof("gvx serve: listening on %s, %s (%d templates)", addr, scheme, len(templates.List()))
	select {
	case err = <-errc:
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	svc.Close(sctx, cmd.Bool("kill-on-exit"))
	if cmd.Bool("kill-on-exit") {
		b.ClosePools(sctx)
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !serve.IsClosed(err) {
		return err
	}
	return nil
}
