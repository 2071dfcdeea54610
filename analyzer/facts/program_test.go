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

// checkPkg type-checks one file as package path, importing the packages
// given.
func checkPkg(t *testing.T, path, src string, imports map[string]*types.Package) *types.Package {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path+".go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	imp := importerFunc(func(p string) (*types.Package, error) { return imports[p], nil })
	pkg, err := (&types.Config{Importer: imp}).Check(path, fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return pkg
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(p string) (*types.Package, error) { return f(p) }

// addPkg adds pkg to p as the first pass does: its types, a summary for
// each of its methods (network I/O for those named in net), and its calls
// of the interface methods of iface.
func addPkg(p *Program, pkg *types.Package, net map[string]bool, iface *types.Interface) {
	p.AddTypes(pkg, nil)
	for _, name := range pkg.Scope().Names() {
		tn, ok := pkg.Scope().Lookup(name).(*types.TypeName)
		if !ok {
			continue
		}
		n, ok := tn.Type().(*types.Named)
		if !ok {
			continue
		}
		for i := 0; i < n.NumMethods(); i++ {
			fn := n.Method(i)
			s := &MethodSummary{Runner: -1}
			if net[name+"."+fn.Name()] {
				s.Net = &NetIO{Chain: []string{"http.Post"}, Leaf: pkg.Path() + ".go:1:1"}
			}
			p.record(fn, s)
		}
	}
	if iface != nil {
		p.invoked(pkg.Path(), iface, iface.Method(0))
	}
}

// TestForget: a package analyzed again after Forget contributes only what
// it declares now. A deleted method, a type that no longer implements the
// interface and a method that stopped doing I/O all disappear, in the
// resolution of another package's interface call too; the other
// packages' contributions stay.
func TestForget(t *testing.T) {
	api := checkPkg(t, "api", "package api\n\ntype N interface{ Notify(msg string) error }\n", nil)
	it := api.Scope().Lookup("N").Type().Underlying().(*types.Interface)
	m := it.Method(0)
	imports := map[string]*types.Package{"api": api}
	const other = "package other\n\ntype Mail struct{}\n\nfunc (*Mail) Notify(msg string) error { return nil }\n"
	for _, tc := range []struct {
		name, after string
		net         map[string]bool
		wantImpls   string // implementations of N after the edit
		wantNet     string // the implementation invokeNet names after it
	}{
		{"method deleted", "package impl\n\ntype HTTP struct{}\n", nil, "(*other.Mail).Notify", ""},
		{"no longer implements", "package impl\n\ntype HTTP struct{}\n\nfunc (*HTTP) Notify(msg string, n int) error { return nil }\n", map[string]bool{"HTTP.Notify": true}, "(*other.Mail).Notify", ""},
		{"no longer does I/O", "package impl\n\ntype HTTP struct{}\n\nfunc (*HTTP) Notify(msg string) error { return nil }\n", nil, "(*impl.HTTP).Notify (*other.Mail).Notify", ""},
		{"type renamed", "package impl\n\ntype Web struct{}\n\nfunc (*Web) Notify(msg string) error { return nil }\n", map[string]bool{"Web.Notify": true}, "(*impl.Web).Notify (*other.Mail).Notify", "(*impl.Web).Notify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewProgram()
			p.SetRoots([]string{"api", "impl", "other", "caller"})
			before := checkPkg(t, "impl", "package impl\n\ntype HTTP struct{}\n\nfunc (*HTTP) Notify(msg string) error { return nil }\n", imports)
			addPkg(p, before, map[string]bool{"HTTP.Notify": true}, it)
			addPkg(p, checkPkg(t, "other", other, imports), nil, nil)
			p.invoked("caller", it, m)
			if impl, _ := p.invokeNet(it, m); impl != "(*impl.HTTP).Notify" {
				t.Fatalf("before the edit: invokeNet = %q, want (*impl.HTTP).Notify", impl)
			}
			if !p.Resolves("caller") || !p.Resolves("impl") {
				t.Fatal("before the edit: caller and impl should resolve to I/O")
			}

			p.Forget("impl")
			if p.Resolves("impl") {
				t.Error("impl's interface calls survive Forget")
			}
			addPkg(p, checkPkg(t, "impl", tc.after, imports), tc.net, nil)
			var impls []string
			for _, nm := range p.implementations(it, m) {
				impls = append(impls, nm.display)
			}
			if got := strings.Join(impls, " "); got != tc.wantImpls {
				t.Errorf("implementations = %q, want %q", got, tc.wantImpls)
			}
			if impl, _ := p.invokeNet(it, m); impl != tc.wantNet {
				t.Errorf("invokeNet = %q, want %q", impl, tc.wantNet)
			}
			if got := p.Resolves("caller"); got != (tc.wantNet != "") {
				t.Errorf("Resolves(caller) = %v, want %v", got, tc.wantNet != "")
			}
			if p.summary("impl.HTTP.Notify") != nil && !strings.Contains(tc.after, "func (*HTTP) Notify(") {
				t.Errorf("the summary of a method no longer declared survives: %+v", p.summary("impl.HTTP.Notify"))
			}
			if p.summary("other.Mail.Notify") == nil {
				t.Error("Forget(impl) took other's summary")
			}
		})
	}
}

// TestDigest: a package's digest changes with what it contributes (a
// method's summary, a type's method set, an interface call) and not when
// it is forgotten and contributes the same again.
func TestDigest(t *testing.T) {
	api := checkPkg(t, "api", "package api\n\ntype N interface{ Notify(msg string) error }\n", nil)
	it := api.Scope().Lookup("N").Type().Underlying().(*types.Interface)
	imports := map[string]*types.Package{"api": api}
	const src = "package impl\n\ntype HTTP struct{}\n\nfunc (*HTTP) Notify(msg string) error { return nil }\n"
	const other = "package other\n\ntype Mail struct{}\n\nfunc (*Mail) Notify(msg string) error { return nil }\n"
	build := func(src string, net map[string]bool, calls bool) *Program {
		p := NewProgram()
		p.SetRoots([]string{"impl", "other"})
		var call *types.Interface
		if calls {
			call = it
		}
		addPkg(p, checkPkg(t, "impl", src, imports), net, call)
		addPkg(p, checkPkg(t, "other", other, imports), nil, nil)
		return p
	}
	base := build(src, map[string]bool{"HTTP.Notify": true}, true)
	d0 := base.Digest("impl")
	if d := base.Digest("impl", "impl"); d != d0 {
		t.Error("a path named twice changes the digest")
	}
	base.Forget("impl")
	if base.Digest("impl") == d0 {
		t.Error("the digest of a forgotten package is unchanged")
	}
	addPkg(base, checkPkg(t, "impl", src, imports), map[string]bool{"HTTP.Notify": true}, it)
	if base.Digest("impl") != d0 {
		t.Error("the same contribution made again changes the digest")
	}
	for _, tc := range []struct {
		name  string
		p     *Program
		equal bool
	}{
		{"the same, built anew", build(src, map[string]bool{"HTTP.Notify": true}, true), true},
		{"the method no longer does I/O", build(src, nil, true), false},
		{"the method deleted", build("package impl\n\ntype HTTP struct{}\n", nil, true), false},
		{"its signature changed", build("package impl\n\ntype HTTP struct{}\n\nfunc (*HTTP) Notify(msg string, n int) error { return nil }\n", map[string]bool{"HTTP.Notify": true}, true), false},
		{"the interface call gone", build(src, map[string]bool{"HTTP.Notify": true}, false), false},
	} {
		if got := tc.p.Digest("impl") == d0; got != tc.equal {
			t.Errorf("%s: digest equal: %v, want %v", tc.name, got, tc.equal)
		}
		if tc.p.Digest("other") != base.Digest("other") {
			t.Errorf("%s: another package's digest changed", tc.name)
		}
	}
}

// TestDigestRowLocks: what a package records for blindupdate's callers'
// row locks (its lockers, its calls of helpers and the locks held at them,
// the helpers it uses as values, whether it holds a blind helper) is part
// of its digest: a caller that stops locking must bring its helper's
// finding back in a driver that keeps second passes by digest.
func TestDigestRowLocks(t *testing.T) {
	pkg := checkPkg(t, "repo", "package repo\n\nfunc Lock() {}\n\nfunc Save() {}\n", nil)
	lock, save := pkg.Scope().Lookup("Lock").(*types.Func), pkg.Scope().Lookup("Save").(*types.Func)
	build := func(record func(p *Program)) [32]byte {
		p := NewProgram()
		p.SetRoots([]string{"repo"})
		record(p)
		return p.Digest("repo")
	}
	call := LockedCall{Locks: []LockRef{{}}, File: "svc.go", Line: 10, Col: 2, Caller: "Pay"}
	base := build(func(p *Program) {
		p.RecordLocker("repo", lock, []string{"orders"})
		p.RecordCall("repo", save, nil, call)
	})
	for _, tc := range []struct {
		name   string
		record func(p *Program)
	}{
		{"no locker", func(p *Program) { p.RecordCall("repo", save, nil, call) }},
		{"the call holds no lock", func(p *Program) {
			p.RecordLocker("repo", lock, []string{"orders"})
			p.RecordCall("repo", save, nil, LockedCall{File: "svc.go", Line: 10, Col: 2, Caller: "Pay"})
		}},
		{"a blind helper besides", func(p *Program) {
			p.RecordLocker("repo", lock, []string{"orders"})
			p.RecordCall("repo", save, nil, call)
			p.RecordBlindHelper("repo")
		}},
		{"the helper used as a value besides", func(p *Program) {
			p.RecordLocker("repo", lock, []string{"orders"})
			p.RecordCall("repo", save, nil, call)
			p.RecordEscape("repo", save, nil)
		}},
	} {
		if build(tc.record) == base {
			t.Errorf("%s: the digest is unchanged", tc.name)
		}
	}
	if build(func(p *Program) {
		p.RecordLocker("repo", lock, []string{"orders"})
		p.RecordCall("repo", save, nil, call)
	}) != base {
		t.Error("the same records made again change the digest")
	}
}

// TestRowLocksOrderAndTwins: a package and its test variant record the same
// calls, each in the order its analysis reaches them, and the scheduler
// interleaves the two. The digest, and what CallersLock says (the count of
// unlocked callers and the one it names), must not depend on that order,
// and a call recorded twice is one call. Before, the sites were kept in
// the order they came: two runs on pocketbase with no file changed gave 8
// of 67 packages another digest, and a twin counted as "1 other call".
func TestRowLocksOrderAndTwins(t *testing.T) {
	pkg := checkPkg(t, "repo", "package repo\n\nfunc Save() {}\n\nfunc Keep() {}\n", nil)
	save, keep := pkg.Scope().Lookup("Save").(*types.Func), pkg.Scope().Lookup("Keep").(*types.Func)
	calls := []LockedCall{
		{File: "a.go", Line: 10, Col: 2, Caller: "Pay"},
		{File: "a.go", Line: 30, Col: 5, Caller: "Refund"},
		{File: "b.go", Line: 7, Col: 1, Caller: "Ship"},
	}
	type rec struct {
		call   int
		escape bool
	}
	run := func(order []rec) (digest [32]byte, locked bool, first string) {
		p := NewProgram()
		p.SetRoots([]string{"repo"})
		p.SetWhole([]string{"repo"})
		for _, r := range order {
			if r.escape {
				p.RecordEscape("repo", keep, nil)
				continue
			}
			p.RecordCall("repo", save, nil, calls[r.call])
		}
		locked, first = p.CallersLock(save, "orders", 0)
		return p.Digest("repo"), locked, first
	}
	d0, l0, f0 := run([]rec{{0, false}, {1, false}, {2, false}, {0, true}})
	if l0 || f0 != "a.go:10:2 in Pay, and at 2 other calls," {
		t.Fatalf("in order: locked %v, first %q", l0, f0)
	}
	for _, order := range [][]rec{
		{{2, false}, {0, true}, {1, false}, {0, false}},
		{{1, false}, {2, false}, {0, false}, {0, true}, {0, true}, {2, false}, {0, false}, {1, false}}, // twins
	} {
		d, l, f := run(order)
		if d != d0 || l != l0 || f != f0 {
			t.Errorf("order %v: digest equal %v, locked %v, first %q; want %q", order, d == d0, l, f, f0)
		}
	}
}
