package harness

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// NPMModules installs the npm packages of dir's package.json and
// package-lock.json once into ~/.cache/gvx/npm/<name>-<hash of the
// lockfile> (npm ci, from the npm registry) and returns that node_modules
// directory; later calls with the same lockfile reuse it. Progress goes to
// progress.
func NPMModules(dir, name string, progress io.Writer) (string, error) {
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", fmt.Errorf("npm packages: %w", err)
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	cache := filepath.Join(home, ".cache", "gvx", "npm", fmt.Sprintf("%s-%x", name, sha256.Sum256(lock))[:len(name)+17])
	mods := filepath.Join(cache, "node_modules")
	if _, err := os.Stat(mods); err == nil {
		return mods, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("npm is missing: install Node.js 20 and npm (Debian: apt-get install nodejs npm)")
	}
	tmp := cache + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, f := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(tmp, f), b, 0o644); err != nil {
			return "", err
		}
	}
	fmt.Fprintf(progress, "npm: installing %s's packages into %s (once per lockfile)\n", dir, cache)
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = tmp
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in %s: %w\n%s", dir, err, out)
	}
	_ = os.RemoveAll(cache)
	if err := os.Rename(tmp, cache); err != nil {
		return "", err
	}
	return mods, nil
}
