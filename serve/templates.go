package serve

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"sync"

	"github.com/BurntSushi/toml"

	"github.com/gvxrun/gvx/api"
	"github.com/gvxrun/gvx/serve/backend"
)

// templateName is the shape of template names (E2B's ids and aliases).
var templateName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// templatesFile is the TOML file's shape:
//
//	[[template]]
//	name = "base"
//	image = "gvx.test/e2b-base:latest"
//	pool_size = 2
type templatesFile struct {
	Template []backend.Template `toml:"template"`
}

// Templates are the templates sandboxes are made from: those of the
// TOML file (fixed while the service runs) and those added through the
// API (kept in the state directory).
type Templates struct {
	mu      sync.Mutex
	byName  map[string]backend.Template
	fromAPI map[string]bool
	path    string // where the API's templates are kept
}

// CheckTemplate says what is wrong with t, if anything.
func CheckTemplate(t backend.Template) error {
	if !templateName.MatchString(t.Name) {
		return fmt.Errorf("template name %q: use 1-64 of a-z, 0-9, '.', '_', '-', starting with a letter or digit", t.Name)
	}
	if t.Image == "" {
		return fmt.Errorf("template %s has no image: set image to a containerd reference or an image archive", t.Name)
	}
	if t.MemoryMB < 0 || t.CPUMillis < 0 || t.DiskMB < 0 || t.PoolSize < 0 {
		return fmt.Errorf("template %s: resources and pool size cannot be negative", t.Name)
	}
	if t.PoolSize > 256 {
		return fmt.Errorf("template %s: pool size %d is over 256", t.Name, t.PoolSize)
	}
	if t.Hot != nil && (*t.Hot < 0 || *t.Hot > t.PoolSize) {
		return fmt.Errorf("template %s: hot %d: give 0 to the pool size (%d); hot sandboxes are taken from the pool", t.Name, *t.Hot, t.PoolSize)
	}
	if t.Golden != "" && !t.Docker {
		return fmt.Errorf("template %s: a golden volume is docker mode's /var/lib/docker: set docker = true", t.Name)
	}
	if t.Lease {
		switch {
		case t.PoolSize == 0:
			return fmt.Errorf("template %s: lease = true serves leases of the template's pool: set pool_size", t.Name)
		case t.Docker || t.Checkpointable || len(t.Cmd) > 0:
			return fmt.Errorf("template %s: a lease template's sandboxes run its image's files with no init of their own: drop docker, checkpointable and cmd, or lease", t.Name)
		case t.Hot != nil && *t.Hot > 0:
			return fmt.Errorf("template %s: hot %d: a lease is handed out at once; drop hot", t.Name, *t.Hot)
		}
	}
	return checkNetwork(t)
}

// LoadTemplates reads the TOML file (if file is set) and the API's
// templates kept at apiPath.
func LoadTemplates(file, apiPath string) (*Templates, error) {
	ts := &Templates{byName: map[string]backend.Template{}, fromAPI: map[string]bool{}, path: apiPath}
	if file != "" {
		var f templatesFile
		md, err := toml.DecodeFile(file, &f)
		if err != nil {
			return nil, fmt.Errorf("templates file %s: %w", file, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("templates file %s: unknown key %s (see docs/serve.md)", file, und[0])
		}
		for _, t := range f.Template {
			if err := CheckTemplate(t); err != nil {
				return nil, fmt.Errorf("templates file %s: %w", file, err)
			}
			if _, dup := ts.byName[t.Name]; dup {
				return nil, fmt.Errorf("templates file %s: template %s is defined twice", file, t.Name)
			}
			ts.byName[t.Name] = t
		}
	}
	b, err := os.ReadFile(apiPath)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("templates: %w", err)
	}
	if err == nil {
		var list []backend.Template
		if err := json.Unmarshal(b, &list); err != nil {
			return nil, fmt.Errorf("templates kept in %s: %w (move the file away to start without them)", apiPath, err)
		}
		for _, t := range list {
			if _, fixed := ts.byName[t.Name]; !fixed {
				ts.byName[t.Name] = t
				ts.fromAPI[t.Name] = true
			}
		}
	}
	return ts, nil
}

// Get returns template name.
func (ts *Templates) Get(name string) (backend.Template, bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.byName[name]
	return t, ok
}

// List returns every template, by name.
func (ts *Templates) List() []backend.Template {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := make([]backend.Template, 0, len(ts.byName))
	for _, t := range ts.byName {
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Names lists the template names.
func (ts *Templates) Names() []string {
	var out []string
	for _, t := range ts.List() {
		out = append(out, t.Name)
	}
	return out
}

// errFixed says a template comes from the TOML file.
type errFixed string

func (e errFixed) Error() string {
	return fmt.Sprintf("template %s is defined in the templates file: change it there and restart gvx serve", string(e))
}

// Put adds or replaces an API template.
func (ts *Templates) Put(t backend.Template) error {
	if err := CheckTemplate(t); err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.byName[t.Name]; ok && !ts.fromAPI[t.Name] {
		return errFixed(t.Name)
	}
	old, had := ts.byName[t.Name]
	ts.byName[t.Name], ts.fromAPI[t.Name] = t, true
	if err := ts.saveLocked(); err != nil {
		if had {
			ts.byName[t.Name] = old
		} else {
			delete(ts.byName, t.Name)
			delete(ts.fromAPI, t.Name)
		}
		return err
	}
	return nil
}

// Delete removes an API template; false if there is none of that name.
func (ts *Templates) Delete(name string) (bool, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.byName[name]
	if !ok {
		return false, nil
	}
	if !ts.fromAPI[name] {
		return true, errFixed(name)
	}
	delete(ts.byName, name)
	delete(ts.fromAPI, name)
	if err := ts.saveLocked(); err != nil {
		ts.byName[name], ts.fromAPI[name] = t, true
		return true, err
	}
	return true, nil
}

func (ts *Templates) saveLocked() error {
	list := []backend.Template{}
	for n := range ts.fromAPI {
		list = append(list, ts.byName[n])
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	b, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return err
	}
	if err := api.WriteFile(ts.path, b, 0o600); err != nil {
		return fmt.Errorf("keep templates: %w", err)
	}
	return nil
}
