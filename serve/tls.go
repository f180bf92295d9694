package serve

import (
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"time"
)

// TLS serves a certificate and key from files, loaded again when either
// file changes (a renewed certificate is served from the next handshake;
// connections already open keep theirs). A change that does not load —
// a key written before its certificate — keeps the last good pair and
// is tried again.
type TLS struct {
	cert, key string
	mu        sync.Mutex
	pair      *tls.Certificate
	stamp     [2]fileStamp // of cert and key when pair was loaded
	checked   time.Time
}

// fileStamp is what tells a rewritten file.
type fileStamp struct {
	mod  time.Time
	size int64
}

// tlsRecheck is how often a handshake looks at the files again.
const tlsRecheck = time.Second

// LoadTLS loads the PEM certificate (chain) in cert and the key in key,
// or says which does not load.
func LoadTLS(cert, key string) (*TLS, error) {
	t := &TLS{cert: cert, key: key}
	if err := t.load(); err != nil {
		return nil, err
	}
	return t, nil
}

// Config is a TLS server configuration serving t's certificate (HTTP/1.1:
// what the e2b SDKs speak, and what gvx serve's plain listener serves).
func (t *TLS) Config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}, GetCertificate: t.certificate}
}

// certificate implements tls.Config.GetCertificate.
func (t *TLS) certificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.checked) >= tlsRecheck {
		t.checked = time.Now()
		if s, err := stamps(t.cert, t.key); err == nil && s != t.stamp {
			_ = t.loadLocked() // a half-written pair: keep the last good one
		}
	}
	return t.pair, nil
}

func (t *TLS) load() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.loadLocked()
}

func (t *TLS) loadLocked() error {
	s, err := stamps(t.cert, t.key)
	if err != nil {
		return err
	}
	pair, err := tls.LoadX509KeyPair(t.cert, t.key)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", t.cert, t.key, err)
	}
	t.pair, t.stamp, t.checked = &pair, s, time.Now()
	return nil
}

// stamps are the stamps of files cert and key.
func stamps(cert, key string) ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, path := range []string{cert, key} {
		st, err := os.Stat(path)
		if err != nil {
			return s, fmt.Errorf("TLS file: %w", err)
		}
		s[i] = fileStamp{mod: st.ModTime(), size: st.Size()}
	}
	return s, nil
}
