package facts

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// embedSrc declares a Notifier interface and implementations that reach
// their Notify through embedding (by pointer, by value, two levels deep,
// from an embedded interface) or decorate another interface.
const embedSrc = `package p

type N interface{ Notify(msg string) error }

type M interface{ Send(msg string) error }

type HTTP struct{}

func (*HTTP) Notify(msg string) error { return nil }

type HTTPV struct{}

func (HTTPV) Notify(msg string) error { return nil }

type Tagged struct{ *HTTP }   // pointer
type Counted struct{ Tagged } // two levels, by value
type Val struct{ HTTPV }      // by value, value receiver
type Logging struct{ N }      // an embedded interface: forwards

type Outbox struct{}

func (*Outbox) Notify(msg string) error { return nil }

// Mailer decorates an N behind another interface.
type Mailer struct{ inner N }

func (m *Mailer) Send(msg string) error { return m.inner.Notify(msg) }
`

func embedProgram(t *testing.T) (*Program, *types.Package) {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", embedSrc, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{}).Check("p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := NewProgram()
	p.AddTypes(pkg, nil)
	return p, pkg
}

func iface(pkg *types.Package, name string) (*types.Interface, *types.Func) {
	it := pkg.Scope().Lookup(name).Type().Underlying().(*types.Interface)
	return it, it.Method(0)
}

// TestPromotedKeys: a method promoted through embedding, at any depth, by
// pointer or by value, resolves to the declaring type's key; one promoted
// from an embedded interface forwards to it.
func TestPromotedKeys(t *testing.T) {
	p, pkg := embedProgram(t)
	it, m := iface(pkg, "N")
	got := map[string]string{}
	for _, impl := range p.implementations(it, m) {
		k := impl.key
		if impl.fwd != nil {
			k = "forwards to " + impl.fwd.name
		}
		got[impl.display] = k
	}
	want := map[string]string{
		"(*p.HTTP).Notify":    "p.HTTP.Notify",
		"(*p.Tagged).Notify":  "p.HTTP.Notify",
		"(*p.Counted).Notify": "p.HTTP.Notify",
		"(*p.HTTPV).Notify":   "p.HTTPV.Notify",
		"(*p.Val).Notify":     "p.HTTPV.Notify",
		"(*p.Logging).Notify": "forwards to Notify",
		"(*p.Outbox).Notify":  "p.Outbox.Notify",
	}
	for d, k := range want {
		if got[d] != k {
			t.Errorf("%s: key %q, want %q", d, got[d], k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("implementations %v, want %v", got, want)
	}
}

// TestJudgeNet: an interface call may do network I/O when one
// implementation is seen doing it (or I/O out of sight), is silent when one
// is seen writing to the database instead, and sees through decorators.
func TestJudgeNet(t *testing.T) {
	net := &NetIO{Chain: []string{"http.Post"}, Leaf: "x.go:1:1"}
	cgo := &NetIO{Chain: []string{"C.notify (cgo)"}, Leaf: "x.go:2:1"}
	via := []invokedMethod{{want: map[string]string{"Notify": "(string)(error)"}, name: "Notify"}}
	for _, tc := range []struct {
		name      string
		iface     string
		sums      map[string]*MethodSummary
		wantImpl  string
		wantChain string
	}{
		{"the declaring type does HTTP", "N", map[string]*MethodSummary{"p.HTTP.Notify": {Net: net}}, "(*p.HTTP).Notify", "http.Post"},
		{"an implementation out of sight does not silence", "N", map[string]*MethodSummary{"p.HTTP.Notify": {Net: net}, "p.HTTPV.Notify": {}}, "(*p.HTTP).Notify", "http.Post"},
		{"the outbox writes instead", "N", map[string]*MethodSummary{"p.HTTP.Notify": {Net: net}, "p.Outbox.Notify": {Writes: true}}, "", ""},
		{"a cgo call may do I/O", "N", map[string]*MethodSummary{"p.HTTPV.Notify": {MayIO: cgo}}, "(*p.HTTPV).Notify", "C.notify (cgo)"},
		{"seen I/O before I/O out of sight", "N", map[string]*MethodSummary{"p.HTTPV.Notify": {MayIO: cgo}, "p.HTTP.Notify": {Net: net}}, "(*p.HTTP).Notify", "http.Post"},
		{"a decorator of another interface", "M", map[string]*MethodSummary{"p.HTTP.Notify": {Net: net}, "p.Mailer.Send": {Via: via}}, "(*p.Mailer).Send", "Notify -> (*p.HTTP).Notify -> http.Post"},
		{"a decorator of an outbox", "M", map[string]*MethodSummary{"p.Outbox.Notify": {Writes: true}, "p.Mailer.Send": {Via: via}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, pkg := embedProgram(t)
			for k, s := range tc.sums {
				s.Runner = -1
				p.methods[k] = s
			}
			it, m := iface(pkg, tc.iface)
			impl, f := p.invokeNet(it, m)
			chain := ""
			if f != nil {
				chain = strings.Join(f.Chain, " -> ")
			}
			if impl != tc.wantImpl || chain != tc.wantChain {
				t.Errorf("invokeNet = %q, %q; want %q, %q", impl, chain, tc.wantImpl, tc.wantChain)
			}
		})
	}
}

// TestInvokeRunnerPromoted: every implementation runs the callback, the
// embedding ones through the declaring type; forwarders do not count.
func TestInvokeRunnerPromoted(t *testing.T) {
	p, pkg := embedProgram(t)
	p.methods["p.HTTP.Notify"] = &MethodSummary{Runner: 1}
	p.methods["p.HTTPV.Notify"] = &MethodSummary{Runner: 1}
	p.methods["p.Outbox.Notify"] = &MethodSummary{Runner: 1}
	it, m := iface(pkg, "N")
	if got := p.invokeRunner(it, m); got != 1 {
		t.Errorf("invokeRunner = %d, want 1", got)
	}
	p.methods["p.Outbox.Notify"] = &MethodSummary{Runner: -1}
	if got := p.invokeRunner(it, m); got != -1 {
		t.Errorf("with a non-runner: invokeRunner = %d, want -1", got)
	}
}
