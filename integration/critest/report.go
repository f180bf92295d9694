package critest

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// Spec states as this package counts them.
const (
	Passed  = "passed"
	Failed  = "failed"
	Skipped = "skipped"
)

// Spec is one critest spec's result.
type Spec struct {
	// Name is the spec's full text, as -ginkgo.focus matches it: its
	// containers' texts and its own, joined by spaces.
	Name string
	// State is Passed, Failed or Skipped.
	State string
	// Raw is ginkgo's own state (timedout, panicked, pending, …).
	Raw string
	// Failure is the first line of the failure's message, for a failed
	// spec; the skip message for a skipped one.
	Failure string
	RunTime time.Duration
}

// Report is one critest run's result.
type Report struct {
	Specs   []Spec
	RunTime time.Duration
}

// ginkgo's JSON report (-ginkgo.json-report): the fields read here.
type ginkgoSuite struct {
	RunTime     int64 `json:"RunTime"`
	SpecReports []struct {
		ContainerHierarchyTexts []string `json:"ContainerHierarchyTexts"`
		LeafNodeType            string   `json:"LeafNodeType"`
		LeafNodeText            string   `json:"LeafNodeText"`
		State                   string   `json:"State"`
		RunTime                 int64    `json:"RunTime"`
		Failure                 *struct {
			Message  string `json:"Message"`
			Location struct {
				FileName   string `json:"FileName"`
				LineNumber int    `json:"LineNumber"`
			} `json:"Location"`
		} `json:"Failure"`
	} `json:"SpecReports"`
}

// ReadReport reads a ginkgo JSON report file.
func ReadReport(path string) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("critest report: %w", err)
	}
	r, err := ParseReport(data)
	if err != nil {
		return nil, fmt.Errorf("critest report %s: %w", path, err)
	}
	return r, nil
}

// ParseReport reads ginkgo's JSON report: the It specs of every suite,
// sorted by name. Suite nodes (BeforeSuite, ReportAfterSuite, …) are left
// out; a failed BeforeSuite shows as every spec failing.
func ParseReport(data []byte) (*Report, error) {
	var suites []ginkgoSuite
	if err := json.Unmarshal(data, &suites); err != nil {
		return nil, fmt.Errorf("parse ginkgo JSON: %w", err)
	}
	r := &Report{}
	for _, s := range suites {
		r.RunTime += time.Duration(s.RunTime)
		for _, sr := range s.SpecReports {
			if sr.LeafNodeType != "It" {
				continue
			}
			sp := Spec{
				Name:    strings.Join(append(append([]string{}, sr.ContainerHierarchyTexts...), sr.LeafNodeText), " "),
				Raw:     sr.State,
				State:   state(sr.State),
				RunTime: time.Duration(sr.RunTime),
			}
			if sr.Failure != nil {
				sp.Failure = firstLine(sr.Failure.Message)
			}
			r.Specs = append(r.Specs, sp)
		}
	}
	if len(r.Specs) == 0 {
		return nil, fmt.Errorf("no specs in the report")
	}
	sort.Slice(r.Specs, func(i, j int) bool { return r.Specs[i].Name < r.Specs[j].Name })
	return r, nil
}

func state(s string) string {
	switch s {
	case "passed":
		return Passed
	case "skipped", "pending":
		return Skipped
	default: // failed, panicked, timedout, aborted, interrupted
		return Failed
	}
}

// firstLine is the first non-blank line of msg, at most 240 bytes.
func firstLine(msg string) string {
	for _, l := range strings.Split(msg, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 240 {
				l = l[:240] + "…"
			}
			return l
		}
	}
	return ""
}

// Counts is how many specs passed, failed and were skipped.
func (r *Report) Counts() (passed, failed, skipped int) {
	for _, s := range r.Specs {
		switch s.State {
		case Passed:
			passed++
		case Failed:
			failed++
		default:
			skipped++
		}
	}
	return passed, failed, skipped
}

// Passed lists the names of the specs that passed.
func (r *Report) Passed() []string {
	var out []string
	for _, s := range r.Specs {
		if s.State == Passed {
			out = append(out, s.Name)
		}
	}
	return out
}

// Get returns the named spec's result.
func (r *Report) Get(name string) (Spec, bool) {
	i := sort.Search(len(r.Specs), func(i int) bool { return r.Specs[i].Name >= name })
	if i < len(r.Specs) && r.Specs[i].Name == name {
		return r.Specs[i], true
	}
	return Spec{}, false
}

// Regressions are the specs peer passed and r did not (failed, or skipped
// where peer ran them).
func (r *Report) Regressions(peer *Report) []Spec {
	var out []Spec
	for _, p := range peer.Specs {
		if p.State != Passed {
			continue
		}
		s, ok := r.Get(p.Name)
		if !ok {
			s = Spec{Name: p.Name, State: Skipped, Failure: "not run"}
		}
		if s.State != Passed {
			out = append(out, s)
		}
	}
	return out
}

// ReadFloor reads a floor file: one spec name a line; blank lines and
// lines starting with # are ignored.
func ReadFloor(path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("critest floor: %w", err)
	}
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return out, nil
}

// WriteFloor writes the floor file: the specs r passed, with a header.
func WriteFloor(path, header string, r *Report) error {
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(header), "\n") {
		b.WriteString("# " + l + "\n")
	}
	for _, n := range r.Passed() {
		b.WriteString(n + "\n")
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write critest floor: %w", err)
	}
	return nil
}
