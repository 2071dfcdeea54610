// Command report turns the output of the side-by-side benchmarks (metrics
// a/floor, a-us/op, floor-us/op from internal/benchcmp) into a Markdown
// table and one SVG bar chart per benchmark group. bench/stores.sh runs it.
//
//	go test -run '^$' -bench Perf -count 5 ./runtime/pgstore | go run ./bench/report -title PostgreSQL -svg docs/perf/pg.svg
package main

import (
	"bufio"
	"flag"
	"fmt"
	"html"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	title := flag.String("title", "benchmark", "title of the table and chart")
	svg := flag.String("svg", "", "write an SVG bar chart of the ratios to this file")
	target := flag.String("targets", "", "comma list of prefix=ratio targets drawn on the chart (first=0.9,replay=0.8); the longest matching prefix applies")
	summary := flag.String("summary", "", "append one Markdown row per target (the range of the medians of its rows, and whether each met it) to this file")
	flag.Parse()
	rows, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "report: no benchmark with an a/floor metric in the input")
		os.Exit(1)
	}
	targets := parseTargets(*target)
	writeTable(os.Stdout, *title, rows, targets)
	if *summary != "" {
		f, err := os.OpenFile(*summary, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		writeSummary(f, *title, rows, targets)
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
	if *svg != "" {
		f, err := os.Create(*svg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		writeSVG(f, *title, rows, targets)
		if err := f.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
	}
}

// row is one benchmark's runs.
type row struct {
	name            string
	ratio, aUs, fUs []float64
}

var nameRE = regexp.MustCompile(`^BenchmarkPerf/(\S+?)(-\d+)?$`)

func parse(r io.Reader) ([]*row, error) {
	byName := map[string]*row{}
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		m := nameRE.FindStringSubmatch(f[0])
		if m == nil {
			continue
		}
		rw := byName[m[1]]
		if rw == nil {
			rw = &row{name: m[1]}
			byName[m[1]] = rw
			order = append(order, m[1])
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch f[i+1] {
			case "a/floor":
				rw.ratio = append(rw.ratio, v)
			case "a-us/op":
				rw.aUs = append(rw.aUs, v)
			case "floor-us/op":
				rw.fUs = append(rw.fUs, v)
			}
		}
	}
	var out []*row
	for _, n := range order {
		if len(byName[n].ratio) > 0 {
			out = append(out, byName[n])
		}
	}
	return out, sc.Err()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// parseTargets reads "prefix=ratio,..."; a prefix may hold "=" itself
// (first-group-commit/callers=32=1.5): the ratio follows the last one.
func parseTargets(s string) map[string]float64 {
	t := map[string]float64{}
	for _, kv := range strings.Split(s, ",") {
		i := strings.LastIndex(kv, "=")
		if i < 0 {
			continue
		}
		if f, err := strconv.ParseFloat(kv[i+1:], 64); err == nil {
			t[kv[:i]] = f
		}
	}
	return t
}

// targetOf returns the target of the longest prefix of name, so that
// "first-group-commit" is not judged by "first".
func targetOf(name string, targets map[string]float64) (float64, bool) {
	best, v, ok := -1, 0.0, false
	for k, t := range targets {
		if strings.HasPrefix(name, k) && len(k) > best {
			best, v, ok = len(k), t, true
		}
	}
	return v, ok
}

// prefixOf returns the longest target prefix of name.
func prefixOf(name string, targets map[string]float64) string {
	best := ""
	for k := range targets {
		if strings.HasPrefix(name, k) && len(k) > len(best) {
			best = k
		}
	}
	return best
}

// writeSummary writes one row per target prefix, in the order the rows
// first name it: the rows it judges, the range of their medians, and
// whether every one met it.
func writeSummary(w io.Writer, title string, rows []*row, targets map[string]float64) {
	var order []string
	meds := map[string][]float64{}
	names := map[string][]string{}
	for _, r := range rows {
		k := prefixOf(r.name, targets)
		if k == "" {
			continue
		}
		if _, seen := meds[k]; !seen {
			order = append(order, k)
		}
		meds[k] = append(meds[k], median(r.ratio))
		names[k] = append(names[k], r.name)
	}
	for _, k := range order {
		m, t := meds[k], targets[k]
		met := "**met**"
		if slices.Min(m) < t {
			met = fmt.Sprintf("not met (%d of %d rows under)", countUnder(m, t), len(m))
		}
		fmt.Fprintf(w, "| %s: %s (%d rows) | %.2fx - %.2fx | >= %.2fx | %s |\n", title, strings.TrimSuffix(k, "/"), len(m),
			slices.Min(m), slices.Max(m), t, met)
	}
}

func countUnder(v []float64, t float64) int {
	n := 0
	for _, x := range v {
		if x < t {
			n++
		}
	}
	return n
}

func writeTable(w io.Writer, title string, rows []*row, targets map[string]float64) {
	fmt.Fprintf(w, "%s (medians of %d runs):\n\n", title, len(rows[0].ratio))
	fmt.Fprintln(w, "| benchmark | idem µs/op | floor µs/op | idem / floor throughput | min - max | target |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		tgt := ""
		if t, ok := targetOf(r.name, targets); ok {
			tgt = fmt.Sprintf(">= %.2fx", t)
		}
		fmt.Fprintf(w, "| %s | %.1f | %.1f | **%.2fx** | %.2f - %.2f | %s |\n", r.name, median(r.aUs), median(r.fUs),
			median(r.ratio), slices.Min(r.ratio), slices.Max(r.ratio), tgt)
	}
	fmt.Fprintln(w)
}

// writeSVG draws one horizontal bar per benchmark (the median ratio, the
// min-max range as a whisker) and the 1.0 line and targets.
func writeSVG(w io.Writer, title string, rows []*row, targets map[string]float64) {
	const left, right, barH, gap, top = 230, 40, 18, 8, 40
	width := 720
	plot := float64(width - left - right)
	maxV := 1.2
	for _, r := range rows {
		maxV = max(maxV, slices.Max(r.ratio)*1.05)
	}
	x := func(v float64) float64 { return float64(left) + v/maxV*plot }
	height := top + len(rows)*(barH+gap) + 30
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="10" y="20" font-size="14" font-weight="bold">%s: idem throughput / floor (median, min-max)</text>`+"\n", html.EscapeString(title))
	for i, r := range rows {
		y := top + i*(barH+gap)
		m := median(r.ratio)
		color := "#4878a8"
		if t, ok := targetOf(r.name, targets); ok {
			if m < t {
				color = "#c8553d"
			}
			fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#333" stroke-dasharray="3,2"/>`+"\n", x(t), x(t), y-2, y+barH+2)
		}
		fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH-4, html.EscapeString(r.name))
		fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, x(m)-float64(left), barH, color)
		fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="black"/>`+"\n", x(slices.Min(r.ratio)), x(slices.Max(r.ratio)), y+barH/2, y+barH/2)
		fmt.Fprintf(w, `<text x="%.1f" y="%d">%.2fx</text>`+"\n", x(slices.Max(r.ratio))+4, y+barH-4, m)
	}
	y1 := top - 4
	y2 := top + len(rows)*(barH+gap)
	fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#999"/>`+"\n", x(1), x(1), y1, y2)
	fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">1.0 = the floor</text>`+"\n", x(1), y2+16)
	fmt.Fprintln(w, `</svg>`)
}
