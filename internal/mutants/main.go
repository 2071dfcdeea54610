// Command mutants applies a curated list of plausible mutants of idem's
// production code, one at a time, and runs the tests that should catch each.
// A mutant that no test fails on is a survivor: a change to the protocol the
// suites would let ship.
//
// Mutants never touch the work tree: each is compiled through `go test
// -overlay`, which replaces one file's text for the build only, so several
// runs (and an editor) can share the checkout.
//
//	go run ./internal/mutants [-list scripts/mutants.txt] [-run REGEXP] [-timeout 5m] [-report FILE]
//
// scripts/mutants.sh starts the servers the store mutants' tests need and
// runs it. The list's format is documented in scripts/mutants.txt.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// A mutant is one change to one file.
type mutant struct {
	Name string
	File string   // relative to the module root
	From string   // text that occurs exactly once in File
	To   string   // what replaces it
	Pkgs []string // packages whose tests must fail
	Run  string   // optional -run filter for those tests
	Line int      // the line of the list it starts on
}

// result is what running one mutant's tests gave.
type result struct {
	Mutant   mutant
	Status   string // "killed", "SURVIVED", "invalid", "timeout"
	KilledBy string // the first failing test, or the build error
	Seconds  float64
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mutants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	list := fs.String("list", "scripts/mutants.txt", "the mutant list")
	filter := fs.String("run", "", "run only the mutants whose name matches this regular expression")
	timeout := fs.Duration("timeout", 6*time.Minute, "how long one mutant's tests may take")
	report := fs.String("report", "", "also write the report (a Markdown table) to this file")
	check := fs.Bool("check", false, "only check that every mutant applies (its text occurs once) and compiles")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	data, err := os.ReadFile(*list)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	ms, err := parseList(*list, string(data))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	var re *regexp.Regexp
	if *filter != "" {
		if re, err = regexp.Compile(*filter); err != nil {
			fmt.Fprintln(stderr, err)
			return 2
		}
	}
	tmp, err := os.MkdirTemp("", "mutants")
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)

	var results []result
	bad := 0
	for i, m := range ms {
		if re != nil && !re.MatchString(m.Name) {
			continue
		}
		r := runMutant(ctx, m, filepath.Join(tmp, fmt.Sprint(i)), *timeout, *check)
		results = append(results, r)
		fmt.Fprintf(stdout, "%-9s %-44s %6.1fs  %s\n", r.Status, m.Name, r.Seconds, r.KilledBy)
		if r.Status != "killed" && !(*check && r.Status == "applies") {
			bad++
		}
	}
	text := reportTable(results)
	fmt.Fprint(stdout, "\n"+text)
	if *report != "" {
		if err := os.WriteFile(*report, []byte(text), 0o644); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "%d of %d mutants not killed\n", bad, len(results))
		return 1
	}
	return 0
}

// parseList reads blocks separated by blank lines; each line of a block is
// "field: value", "#" starts a comment line. Fields: name, file, from, to,
// pkgs (space-separated), run. In from and to, "\n" and "\t" stand for a
// newline and a tab, and "\\" for a backslash.
func parseList(path, text string) ([]mutant, error) {
	var ms []mutant
	var cur *mutant
	names := map[string]int{}
	flush := func() error {
		if cur == nil {
			return nil
		}
		m := *cur
		cur = nil
		switch {
		case m.Name == "", m.File == "", m.From == "", len(m.Pkgs) == 0:
			return fmt.Errorf("%s:%d: a mutant needs name, file, from and pkgs", path, m.Line)
		case m.From == m.To:
			return fmt.Errorf("%s:%d: mutant %s changes nothing", path, m.Line, m.Name)
		}
		if l, ok := names[m.Name]; ok {
			return fmt.Errorf("%s:%d: mutant %s already named at line %d", path, m.Line, m.Name, l)
		}
		names[m.Name] = m.Line
		ms = append(ms, m)
		return nil
	}
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if trimmed == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if strings.HasPrefix(trimmed, "#") {
			continue
		}
		field, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%s:%d: want \"field: value\"", path, i+1)
		}
		value = strings.TrimPrefix(value, " ")
		if cur == nil {
			cur = &mutant{Line: i + 1}
		}
		switch field {
		case "name":
			cur.Name = value
		case "file":
			cur.File = value
		case "from":
			cur.From = unescape(value)
		case "to":
			cur.To = unescape(value)
		case "pkgs":
			cur.Pkgs = strings.Fields(value)
		case "run":
			cur.Run = value
		default:
			return nil, fmt.Errorf("%s:%d: unknown field %q", path, i+1, field)
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return ms, nil
}

func unescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case '\\':
				b.WriteByte('\\')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// runMutant writes the mutated file and an overlay that points the build at
// it, then runs the mutant's tests (or, with check, only builds them).
func runMutant(ctx context.Context, m mutant, dir string, timeout time.Duration, check bool) result {
	r := result{Mutant: m}
	start := time.Now()
	defer func() { r.Seconds = time.Since(start).Seconds() }()
	src, err := os.ReadFile(m.File)
	if err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}
	if n := strings.Count(string(src), m.From); n != 1 {
		r.Status, r.KilledBy = "invalid", fmt.Sprintf("%q occurs %d times in %s, want once", m.From, n, m.File)
		return r
	}
	mutated := strings.Replace(string(src), m.From, m.To, 1)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}
	abs, err := filepath.Abs(m.File)
	if err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}
	mfile := filepath.Join(dir, filepath.Base(m.File))
	overlay := filepath.Join(dir, "overlay.json")
	ov, _ := json.Marshal(map[string]map[string]string{"Replace": {abs: mfile}})
	if err := errors.Join(os.WriteFile(mfile, []byte(mutated), 0o644), os.WriteFile(overlay, ov, 0o644)); err != nil {
		r.Status, r.KilledBy = "invalid", err.Error()
		return r
	}

	// The mutant must build: a mutant the compiler rejects proves nothing.
	build := exec.CommandContext(ctx, "go", "build", "-overlay="+overlay, "./"+filepath.Dir(m.File))
	if out, err := build.CombinedOutput(); err != nil {
		r.Status, r.KilledBy = "invalid", "does not build: "+firstLine(string(out))
		return r
	}
	if check {
		r.Status = "applies"
		return r
	}

	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-failfast", "-overlay=" + overlay}
	if m.Run != "" {
		args = append(args, "-run", m.Run)
	}
	cmd := exec.CommandContext(tctx, "go", append(args, m.Pkgs...)...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	switch {
	case tctx.Err() != nil:
		r.Status, r.KilledBy = "timeout", fmt.Sprintf("tests still running after %v", timeout)
	case err == nil:
		r.Status = "SURVIVED"
	default:
		r.Status, r.KilledBy = "killed", firstFailure(string(out))
	}
	return r
}

var failRE = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// firstFailure names the first failing test, else the first FAIL line (a
// panic or a build failure of a test file).
func firstFailure(out string) string {
	if m := failRE.FindAllStringSubmatch(out, -1); len(m) > 0 {
		// The deepest name of the first failing tree: the subtest that failed.
		first := m[0][1]
		for _, x := range m[1:] {
			if strings.HasPrefix(x[1], first+"/") {
				first = x[1]
			}
		}
		return first
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "FAIL") || strings.Contains(l, "panic:") {
			return strings.TrimSpace(l)
		}
	}
	return firstLine(out)
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

// reportTable is the report as a Markdown table.
func reportTable(rs []result) string {
	var b strings.Builder
	killed := 0
	for _, r := range rs {
		if r.Status == "killed" {
			killed++
		}
	}
	fmt.Fprintf(&b, "%d of %d mutants killed.\n\n", killed, len(rs))
	b.WriteString("| mutant | file | result | killed by | seconds |\n|---|---|---|---|---|\n")
	for _, r := range rs {
		by := strings.ReplaceAll(r.KilledBy, "|", `\|`)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f |\n", r.Mutant.Name, r.Mutant.File, r.Status, by, r.Seconds)
	}
	return b.String()
}
