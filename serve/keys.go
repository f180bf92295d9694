package serve

import (
	"bufio"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// keyPattern is the shape of E2B API keys (the Python SDK checks it).
var keyPattern = regexp.MustCompile(`^e2b_[0-9a-f]{16,}$`)

// Keys are the API keys the service accepts, read from a keys file: one
// key per line (`e2b_<hex>`, then optionally a name), # comments.
type Keys struct {
	byHash map[string]string // sha256 of the key → its name
}

// NewKey makes a key: e2b_ and 40 hex digits.
func NewKey() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return "e2b_" + hex.EncodeToString(b)
}

// keyID is how a key is kept in the sandbox table: a hash, never the key.
func keyID(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:12])
}

// LoadKeys reads path, which must be a regular file of mode 0600 (or
// stricter) holding at least one key. If it does not exist and create is
// set, it is made with one new key, which is returned.
func LoadKeys(path string, create bool) (_ *Keys, created string, err error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) && create {
		created = NewKey()
		if err := os.WriteFile(path, []byte("# gvx serve API keys: one per line, then an optional name\n"+created+" default\n"), 0o600); err != nil {
			return nil, "", fmt.Errorf("create keys file %s: %w", path, err)
		}
		st, err = os.Stat(path)
	}
	if err != nil {
		return nil, "", fmt.Errorf("keys file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, "", fmt.Errorf("keys file %s is not a regular file", path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, "", fmt.Errorf("keys file %s has mode %04o: others can read the keys; chmod 600 %s", path, st.Mode().Perm(), path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("keys file: %w", err)
	}
	defer f.Close()
	k := &Keys{byHash: map[string]string{}}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if !keyPattern.MatchString(fields[0]) {
			return nil, "", fmt.Errorf("keys file %s line %d: %q is not a key shaped e2b_<hex> (make one with `gvx serve key`)", path, n, fields[0])
		}
		name := fields[0][:8] + "…"
		if len(fields) > 1 {
			name = fields[1]
		}
		k.byHash[keyID(fields[0])] = name
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("keys file %s: %w", path, err)
	}
	if len(k.byHash) == 0 {
		return nil, "", fmt.Errorf("keys file %s holds no key: add a line e2b_<hex> (make one with `gvx serve key`)", path)
	}
	return k, created, nil
}

// Check returns the id of key, or "" if it is not one of the keys.
func (k *Keys) Check(key string) string {
	if !keyPattern.MatchString(key) {
		return ""
	}
	id := keyID(key)
	for h := range k.byHash {
		if subtle.ConstantTimeCompare([]byte(h), []byte(id)) == 1 {
			return id
		}
	}
	return ""
}
