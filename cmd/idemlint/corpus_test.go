package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/modtest"
)

var (
	reWant     = regexp.MustCompile(`// want ((?:txrpc|timeoutfail|tokenorder)(?: (?:txrpc|timeoutfail|tokenorder))*)\s*$`)
	reNegative = regexp.MustCompile(`^// negative:`)
	rules      = []string{"txrpc", "timeoutfail", "tokenorder"}
)

type site struct {
	file string
	line int
}

// labels reads the labels of the files under dir (paths relative to
// root): want[rule] is the set of labelled
// lines, negatives counts the functions documented as negative.
func labels(t *testing.T, root, dir string) (map[string]map[site]bool, int) {
	t.Helper()
	want := map[string]map[site]bool{}
	for _, r := range rules {
		want[r] = map[site]bool{}
	}
	negatives := 0
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(data), "\n") {
			if m := reWant.FindStringSubmatch(line); m != nil {
				for _, r := range strings.Fields(m[1]) {
					want[r][site{filepath.ToSlash(rel), i + 1}] = true
				}
			}
			if reNegative.MatchString(strings.TrimSpace(line)) {
				negatives++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return want, negatives
}

// findings parses -json output into rule -> reported lines, of the
// packages whose path starts with prefix.
func findings(t *testing.T, stdout, prefix string) map[string]map[site]bool {
	t.Helper()
	var tree map[string]map[string][]struct {
		Posn string `json:"posn"`
	}
	if err := json.Unmarshal([]byte(stdout), &tree); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	got := map[string]map[site]bool{}
	for _, r := range rules {
		got[r] = map[site]bool{}
	}
	for pkg, byRule := range tree {
		if !strings.HasPrefix(pkg, prefix) {
			continue
		}
		for r, ds := range byRule {
			if got[r] == nil {
				// A rule the corpus is not labelled for (the issue-13 rules:
				// blindupdate finds the corpus's key-only gorm updates).
				t.Logf("%s: %d findings (not scored: the corpus is not labelled for it)", r, len(ds))
				continue
			}
			for _, d := range ds {
				parts := strings.Split(d.Posn, ":")
				if len(parts) < 3 {
					t.Fatalf("posn %q", d.Posn)
				}
				line, _ := strconv.Atoi(parts[len(parts)-2])
				got[r][site{strings.Join(parts[:len(parts)-2], ":"), line}] = true
			}
		}
	}
	return got
}

type score struct{ tp, fn, fp int }

func (s score) recall() float64 {
	if s.tp+s.fn == 0 {
		return 1
	}
	return float64(s.tp) / float64(s.tp+s.fn)
}

func compare(want, got map[string]map[site]bool) (map[string]score, []string) {
	out := map[string]score{}
	var notes []string
	for _, r := range rules {
		var s score
		for st := range want[r] {
			if got[r][st] {
				s.tp++
			} else {
				s.fn++
				notes = append(notes, "missed "+r+" at "+st.file+":"+strconv.Itoa(st.line))
			}
		}
		for st := range got[r] {
			if !want[r][st] {
				s.fp++
				notes = append(notes, "false positive "+r+" at "+st.file+":"+strconv.Itoa(st.line))
			}
		}
		out[r] = s
	}
	sort.Strings(notes)
	return out, notes
}

// TestCorpus lints the corpus service (analyzer/testdata/mod/corpus: real
// gorm, bun, sqlx, pop, ent dialect, Firestore, go-redis and pgx) end to
// end with default flags. The direct run is `idemlint -json ./...` in the
// module (shared with TestLSPMatchesCLI, see lintJSON), scored on the
// corpus's packages. No package outside the corpus imports it (it imports
// netx and txrpc/enttx), and its findings there were those of
// `./corpus/...` when the run was shared (55, same positions and
// messages): naming the rest of the module adds implementations to
// interface resolution, and none changed a corpus finding.
func TestCorpus(t *testing.T) {
	mod := modtest.Dir(t)
	bin := idemlintBinary(t)
	want, negatives := labels(t, mod, filepath.Join(mod, "corpus"))
	total := 0
	for _, r := range rules {
		total += len(want[r])
	}
	if total+negatives < 40 {
		t.Fatalf("corpus has %d labelled positives and %d negatives, want at least 40 cases", total, negatives)
	}

	scores, notes := compare(want, findings(t, lintJSON(t, mod), "example.com/orm/corpus/"))
	for _, n := range notes {
		t.Error(n)
	}
	for _, r := range rules {
		s := scores[r]
		t.Logf("idemlint %s: recall %d/%d = %.2f, false positives %d", r, s.tp, s.tp+s.fn, s.recall(), s.fp)
		if s.recall() < 0.9 || s.fp > 0 {
			t.Errorf("%s: recall %.2f (want >= 0.9), %d false positives (want 0)", r, s.recall(), s.fp)
		}
	}
	t.Logf("%d labelled positives, %d negative functions", total, negatives)

	// The modular driver (go vet -vettool) sees one package at a time: no
	// interface resolution. Its figures are logged, and it must stay
	// precise.
	vetOut, vetErr, _ := run(t, mod, "go", "vet", "-vettool="+bin, "-json", "./corpus/...")
	stderr := vetOut + "\n" + vetErr
	vet := map[string]map[site]bool{}
	for _, r := range rules {
		vet[r] = map[site]bool{}
	}
	var body strings.Builder
	for _, line := range strings.Split(stderr, "\n") {
		if !strings.HasPrefix(line, "#") {
			body.WriteString(line + "\n")
		}
	}
	dec := json.NewDecoder(strings.NewReader(body.String()))
	for dec.More() {
		var tree map[string]map[string][]struct {
			Posn string `json:"posn"`
		}
		if err := dec.Decode(&tree); err != nil {
			t.Fatalf("go vet -json: %v\n%s", err, stderr)
		}
		for _, byRule := range tree {
			for r, ds := range byRule {
				if vet[r] == nil {
					continue // a rule the corpus is not labelled for
				}
				for _, d := range ds {
					parts := strings.Split(d.Posn, ":")
					line, _ := strconv.Atoi(parts[len(parts)-2])
					rel, err := filepath.Rel(mod, strings.Join(parts[:len(parts)-2], ":"))
					if err != nil {
						rel = strings.Join(parts[:len(parts)-2], ":")
					}
					vet[r][site{filepath.ToSlash(rel), line}] = true
				}
			}
		}
	}
	vs, _ := compare(want, vet)
	for _, r := range rules {
		s := vs[r]
		t.Logf("go vet -vettool %s: recall %d/%d = %.2f, false positives %d", r, s.tp, s.tp+s.fn, s.recall(), s.fp)
		if s.fp > 0 {
			t.Errorf("go vet -vettool %s: %d false positives", r, s.fp)
		}
	}
}
