package serve

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gvxrun/gvx/internal/testcert"
)

// writePair writes a self-signed pair for 127.0.0.1 with serial.
func writePair(t *testing.T, cert, key string, serial int64) {
	t.Helper()
	if err := testcert.Write(cert, key, serial); err != nil {
		t.Fatal(err)
	}
}

// serial is the serial of the certificate a TLS handshake with cfg gets.
func serial(t *testing.T, cfg *tls.Config) int64 {
	t.Helper()
	c, err := cfg.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf.SerialNumber.Int64()
}

// TestTLSReload: the pair is served from its files, a renewed pair from
// the handshakes after it is written, and a half-written one (a key that
// does not match) keeps the last good pair; bad files are refused at
// load, naming them.
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if _, err := LoadTLS(cert, key); err == nil || !strings.Contains(err.Error(), cert) {
		t.Errorf("LoadTLS of missing files: %v, want an error naming %s", err, cert)
	}
	writePair(t, cert, key, 1)
	tl, err := LoadTLS(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := tl.Config()
	if got := serial(t, cfg); got != 1 {
		t.Fatalf("serial %d, want 1", got)
	}
	writePair(t, cert, key, 2)
	time.Sleep(tlsRecheck + 100*time.Millisecond)
	if got := serial(t, cfg); got != 2 {
		t.Errorf("after the pair was renewed: serial %d, want 2", got)
	}
	// A new certificate whose key is not written yet.
	other := filepath.Join(dir, "other")
	writePair(t, cert, other+".key", 3)
	time.Sleep(tlsRecheck + 100*time.Millisecond)
	if got := serial(t, cfg); got != 2 {
		t.Errorf("with a certificate and a key that do not match: serial %d, want the last good pair's, 2", got)
	}
	if err := os.WriteFile(key, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTLS(cert, key); err == nil || !strings.Contains(err.Error(), key) {
		t.Errorf("LoadTLS of a bad key: %v, want an error naming %s", err, key)
	}
}
