package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/oci"
)

// Each task runs gvx-sentry through its own link, with the task's global
// flags in a file beside it (gvx-sentry's launcher reads them), so that
// tasks sharing a shim (a pod) never run with each other's flags.
const sentryLinkName = api.SentryBinary

// taskSentry creates dir (traverse-only) with a link to sentry — or, if
// useFront, to gvx-runtime, its front, when that is installed beside it —
// and the task's flags, and returns the link's path. The front answers some
// calls of tasks in a running sandbox without starting gvx-sentry, and
// costs every other call its own start-up (≈ 1 ms, 6–8 ms on a VM with
// slow page faults): such tasks use it from their create, a sandbox's
// root container once it runs (frontLink).
func taskSentry(dir, sentry, flags string, useFront bool) (string, error) {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", fmt.Errorf("create task dir %s: %w", dir, err)
	}
	target := sentry
	if front, ok := frontOf(sentry); useFront && ok {
		target = front
	}
	link := filepath.Join(dir, sentryLinkName)
	if err := relink(link, target); err != nil {
		return "", fmt.Errorf("link gvx-sentry for the task: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, api.FlagsFile), []byte(flags), 0o600); err != nil {
		return "", fmt.Errorf("record the task's gvx-sentry flags: %w", err)
	}
	return link, nil
}

// mountsPrivately says whether gvx-sentry's create of spec may mount in a
// private mount namespace: its ext4lite volumes and the host bind mounts
// it clones (those root owns: sentry/hostbind) are bind mounts from
// absolute paths. gvx-runtime, linked for such a create, starts
// gvx-sentry in a new mount namespace when it does (its mntns.go), which
// spares gvx-sentry's re-execution into one: a start of gvx-runtime's
// (≈ 6 ms of CPU on a VM) for one of gvx-sentry's (≈ 25–30 ms).
func mountsPrivately(spec *specs.Spec) bool {
	if spec.Annotations[api.AnnotationVolumes] != "" {
		return true // an ext4lite root filesystem mounts there too
	}
	for _, m := range spec.Mounts {
		if oci.IsBind(m) && filepath.IsAbs(m.Source) {
			return true
		}
	}
	return false
}

// sentryLink re-points a task's link at gvx-sentry itself, after a create
// through gvx-runtime (mountsPrivately): its start would cost gvx-runtime's
// start-up for nothing.
func sentryLink(link, sentry string) error {
	if err := relink(link, sentry); err != nil {
		return fmt.Errorf("link gvx-sentry for the task: %w", err)
	}
	return nil
}

// frontLink re-points a task's link (taskSentry's, to sentry) at
// gvx-runtime beside sentry, when that is installed: once a sandbox's
// root container runs, gvx-runtime answers its execs and kills over the
// sandbox's control socket, and hands every other call to gvx-sentry.
func frontLink(link, sentry string) error {
	front, ok := frontOf(sentry)
	if !ok {
		return nil
	}
	if err := relink(link, front); err != nil {
		return fmt.Errorf("link gvx-runtime for the task: %w", err)
	}
	return nil
}

// frontOf is gvx-runtime installed beside gvx-sentry at sentry, if it is.
func frontOf(sentry string) (string, bool) {
	front := filepath.Join(filepath.Dir(sentry), api.RuntimeBinary)
	return front, isExecutable(front)
}

// relink makes link a symbolic link to target in one rename, so that a
// call through it at the same moment finds one or the other.
func relink(link, target string) error {
	tmp := link + ".new"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, link); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// releaseTaskSentry removes what taskSentry made, and dir once empty.
func releaseTaskSentry(dir string) error {
	var errs []error
	for _, name := range []string{sentryLinkName, sentryLinkName + ".new", api.FlagsFile, api.RelayDigestFile, api.MaskedFile} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, api.SysClassDir)); err != nil {
		errs = append(errs, err)
	}
	if err := removeStaging(filepath.Join(dir, api.HostBindDir)); err != nil {
		errs = append(errs, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
		errs = append(errs, err)
	}
	// The task's sentry directory (api.Layout.TaskDir's parent), once no
	// namespace's task of the id has anything left there.
	removeIfEmpty(filepath.Dir(dir))
	return errors.Join(errs...)
}

// removeIfEmpty removes directory dir if it is empty.
func removeIfEmpty(dir string) { _ = os.Remove(dir) }

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode().Perm()&0o111 != 0
}

// removeStaging removes the staging points of a task's host bind clones
// and their directory. On the host they are empty (the clones live in the
// sandbox's private mount namespace): each is removed without recursing,
// so a mount there by mistake fails the removal rather than being emptied.
func removeStaging(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
