package generator_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/generator"
)

// benchPackage writes a package with services services of ops op methods
// each (plus a reconcile method per service) into a scratch module.
func benchPackage(t testing.TB, services, ops int) (string, []string) {
	t.Helper()
	mod, env := scratchModule(t)
	var b strings.Builder
	b.WriteString(`package big

import (
	"context"

	"github.com/idemkit/idem/runtime"
)

type Money struct {
	Amount   int64
	Currency string
}

type Req struct {
	Key    string
	Tenant string
	Money  *Money
	Note   string
}

type Resp struct{ ID string }
`)
	for s := range services {
		fmt.Fprintf(&b, "\n//idem:service\ntype Service%02d interface {\n", s)
		for o := range ops {
			switch o % 4 {
			case 0:
				b.WriteString("\t//idem:op key=req.Key lease=30s ttl=24h reconcile=Find\n")
			case 1:
				b.WriteString("\t//idem:op key=req.Key scope=req.Tenant\n")
			case 2:
				b.WriteString("\t//idem:op key=req.Key fingerprint=req.Money.Amount,req.Money.Currency ttl=1h\n")
			case 3:
				b.WriteString("\t//idem:op key=req.Key op=custom.op" + fmt.Sprint(s*ops+o) + "\n")
			}
			fmt.Fprintf(&b, "\tOp%03d(ctx context.Context, req Req) (Resp, error)\n", o)
		}
		b.WriteString("\t//idem:skip\n\tFind(ctx context.Context, req Req) (Resp, runtime.Outcome, error)\n}\n")
	}
	dir := filepath.Join(mod, "big")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big.go"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, env
}

// BenchmarkGenerate200 runs idemgen on a package with 200 annotated
// methods (10 services of 20 ops) and reports the time of each phase.
func BenchmarkGenerate200(b *testing.B) {
	dir, env := benchPackage(b, 10, 20)
	cfg := generator.Config{Dir: dir, Env: env}
	if _, err := generator.Generate(cfg); err != nil { // warm the build cache
		b.Fatal(err)
	}
	var total generator.Timing
	b.ResetTimer()
	for b.Loop() {
		res, err := generator.Generate(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if len(res.Files) != 10 {
			b.Fatalf("%d files", len(res.Files))
		}
		total.Load += res.Timing.Load
		total.Check += res.Timing.Check
		total.Emit += res.Timing.Emit
	}
	n := float64(b.N)
	all := total.Load + total.Check + total.Emit
	b.ReportMetric(float64(total.Load.Microseconds())/1000/n, "load-ms/op")
	b.ReportMetric(float64(total.Check.Microseconds())/1000/n, "check-ms/op")
	b.ReportMetric(float64(total.Emit.Microseconds())/1000/n, "emit-ms/op")
	b.ReportMetric(100*float64(total.Load)/float64(all), "load-%")
}

// BenchmarkCheckEmit200 is the part idemgen itself does, on packages
// loaded once: directives, checks and rendering of 200 methods.
func BenchmarkCheckEmit200(b *testing.B) {
	dir, env := benchPackage(b, 10, 20)
	pkgs, err := generator.Load(generator.Config{Dir: dir, Env: env})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res := &generator.Result{}
		if err := generator.GeneratePackages(pkgs, res); err != nil {
			b.Fatal(err)
		}
	}
}
