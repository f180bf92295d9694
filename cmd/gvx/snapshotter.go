package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"github.com/containerd/log"
	"github.com/urfave/cli/v3"
	"google.golang.org/grpc"

	"github.com/gvxrun/gvx/snapshotter"
	"github.com/gvxrun/gvx/volume"
)

// crashEnv names a snapshotter hook point (snapshotter.Hook*) at which
// `gvx snapshotter serve` kills itself with SIGKILL. Only for crash tests.
const crashEnv = "GVX_SNAPSHOTTER_CRASH_AT"

// snapshotterCommand is `gvx snapshotter …`.
func snapshotterCommand() *cli.Command {
	return &cli.Command{
		Name:  "snapshotter",
		Usage: "the ext4lite containerd snapshotter (reflink-cloned ext4 images)",
		Description: "Serves containerd's snapshot API as a proxy plugin: every snapshot is one\n" +
			"sparse ext4 image file, and each new one is a reflink clone of its parent.\n" +
			"See docs/snapshotter.md for the containerd configuration.",
		Commands: []*cli.Command{snapshotterServeCommand()},
	}
}

func snapshotterServeCommand() *cli.Command {
	return &cli.Command{
		Name:  "serve",
		Usage: "serve the ext4lite snapshotter over gRPC on a unix socket",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "directory for metadata and images; use XFS or btrfs for reflink clones (required)"},
			&cli.StringFlag{Name: "address", Usage: "unix socket to listen on, named in containerd's [proxy_plugins] (required)"},
			&cli.StringFlag{Name: "default-size", Value: "10G", Usage: "filesystem size of new root snapshots without a containerd.io/snapshot/max-size label (sparse)"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error"},
		},
		Action: func(ctx context.Context, cmd *cli.Command) error {
			if _, err := needArgs(cmd); err != nil {
				return err
			}
			for _, f := range []string{"root", "address"} {
				if cmd.String(f) == "" {
					return usageError(cmd, "--"+f+" is required")
				}
			}
			size, err := volume.ParseSize(cmd.String("default-size"))
			if err != nil {
				return usageError(cmd, "--default-size: "+err.Error())
			}
			if err := log.SetLevel(cmd.String("log-level")); err != nil {
				return usageError(cmd, "--log-level: "+err.Error())
			}
			return serveSnapshotter(ctx, cmd.String("root"), cmd.String("address"), size)
		},
	}
}

// serveSnapshotter runs the snapshotter on root and serves it on address
// until SIGINT or SIGTERM.
func serveSnapshotter(ctx context.Context, root, address string, size int64) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg := snapshotter.Config{DefaultSize: size}
	if point := os.Getenv(crashEnv); point != "" {
		cfg.Hook = func(ctx context.Context, p string) {
			if p == point {
				log.G(ctx).WithField("point", p).Warn("ext4lite: " + crashEnv + ": killing myself")
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	sn, err := snapshotter.New(ctx, root, cfg)
	if err != nil {
		return err
	}
	defer sn.Close()
	l, err := listenUnix(address)
	if err != nil {
		return err
	}
	defer os.Remove(address)
	srv := grpc.NewServer(grpc.UnaryInterceptor(logCalls))
	snapshotsapi.RegisterSnapshotsServer(srv, snapshotservice.FromSnapshotter(sn))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	log.G(ctx).WithField("root", sn.Root()).WithField("address", address).
		WithField("default_size", volume.FormatSize(size)).Info("ext4lite snapshotter serving")
	select {
	case err := <-served:
		return fmt.Errorf("serve %s: %w", address, err)
	case <-ctx.Done():
	}
	log.G(ctx).Info("ext4lite snapshotter stopping")
	done := make(chan struct{})
	go func() { srv.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return nil
}

// listenUnix listens on the unix socket path, replacing a stale socket
// file but refusing one that something still serves.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o711); err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if st, err := os.Lstat(path); err == nil {
		if st.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("listen %s: exists and is not a socket; remove it or choose another --address", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("listen %s: another process serves this socket; stop it or choose another --address", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen %s: remove stale socket: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("listen %s: %w", path, err)
	}
	return l, nil
}

// logCalls logs every snapshot API call at debug level, and failures.
func logCalls(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	entry := log.G(ctx).WithField("method", info.FullMethod).WithField("duration", time.Since(start))
	if err != nil {
		entry.WithError(err).Debug("ext4lite: call failed")
	} else {
		entry.Debug("ext4lite: call")
	}
	return resp, err
}
