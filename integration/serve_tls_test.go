package integration

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gvxrun/gvx/internal/testcert"
)

// TestServeTLS: gvx serve with --tls-cert/--tls-key serves HTTPS only: the
// official e2b SDK, trusting the certificate through NODE_EXTRA_CA_CERTS,
// drives it end to end over https:// (control plane and envd), and so does
// gvx's Python client (SSL_CERT_FILE); plain HTTP
// and clients that do not trust the certificate get nothing; a renewed
// certificate is served from the next connection, without a restart.
func TestServeTLS(t *testing.T) {
	requireEnv(t)
	checkNoLeaks(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := testcert.Write(cert, key, 1); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	pem, err := os.ReadFile(cert)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(pem)
	served := filepath.Join(dir, "serve")
	if err := os.Mkdir(served, 0o700); err != nil {
		t.Fatal(err)
	}
	s := launchGvxServe(t, served, "", &serveTLS{cert: cert, key: key, roots: roots})
	defer s.stop(syscall.SIGTERM)

	out, err := s.node(t, "e2b/sdk.mjs", "NODE_EXTRA_CA_CERTS="+cert)
	t.Logf("e2b SDK over https:\n%s", out)
	if err != nil || !strings.Contains(out, "13 passed, 0 failed") {
		t.Fatalf("the e2b SDK's steps over https: %v\ngvx serve's log:\n%s", err, s.stderr)
	}

	// gvx's Python client, trusting it through SSL_CERT_FILE.
	py := exec.Command("python3", "-c", `
from gvx_client import Client
c = Client()
sb = c.create("base")
try:
    r = sb.run("echo over-$((40+2))")
    print("exit", r.exit_code, r.stdout.strip())
finally:
    sb.kill()
`)
	py.Env = append(os.Environ(), "GVX_API_URL="+s.url, "E2B_API_KEY="+s.key, "SSL_CERT_FILE="+cert, "PYTHONPATH=../clients/python")
	if pout, err := py.CombinedOutput(); err != nil || strings.TrimSpace(string(pout)) != "exit 0 over-42" {
		t.Errorf("the Python client over https: %v\n%s", err, pout)
	}

	plain := "http://" + s.addr + "/healthz"
	if resp, err := http.Get(plain); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("GET %s (plain HTTP to the HTTPS listener): %s, want no answer", plain, resp.Status)
		}
	}
	if resp, err := http.Get(s.url + "/healthz"); err == nil {
		resp.Body.Close()
		t.Errorf("GET %s with no trust in the certificate: %s, want a certificate error", s.url, resp.Status)
	} else if !strings.Contains(err.Error(), "certificate") {
		t.Errorf("GET %s with no trust in the certificate: %v, want a certificate error", s.url, err)
	}

	// Renewed in place: the next connection gets the new certificate.
	if err := testcert.Write(cert, key, 2); err != nil {
		t.Fatal(err)
	}
	var got int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && got != 2; time.Sleep(200 * time.Millisecond) {
		c, err := tls.Dial("tcp", s.addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		got = c.ConnectionState().PeerCertificates[0].SerialNumber.Int64()
		c.Close()
	}
	if got != 2 {
		t.Errorf("after the certificate was renewed, the service still serves serial %d, want 2", got)
	}
}
