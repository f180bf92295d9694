package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/containerd/log"

	"github.com/gvxrun/gvx/internal/listen"
)

// Endpoint listens on addr (unix:///path, or a loopback host:port unless
// remote) and answers GET /metrics with m there until ctx is done.
func Endpoint(ctx context.Context, addr string, remote bool, m *Set) error {
	l, err := listen.Listen(addr, remote)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	go serve(ctx, l, addr, m)
	return nil
}

func serve(ctx context.Context, l net.Listener, addr string, m *Set) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.G(ctx).Infof("gvx: metrics on %s/metrics", addr)
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		log.G(ctx).WithError(err).Error("gvx: metrics endpoint stopped")
	}
}
