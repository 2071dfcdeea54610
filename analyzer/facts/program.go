package facts

import (
	"go/types"
	"runtime"
	"sort"
	"strings"
	"sync"
	"weak"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Program is a whole-program view for the standalone command: the concrete
// named types of every loaded package of the module and what the facts
// analyzer learned about their methods in a first pass. With it, a call
// through an interface (UserService.NotifyUser) is resolved to the
// implementations in the loaded packages, even one in a package the
// caller does not import.
//
// A method promoted from an embedded type, at any depth, by pointer or by
// value, is what its declaring type's method does; one promoted from an
// embedded interface forwards to that interface's implementations, and a
// decorator that calls an interface method (a logging Notifier around an
// HTTP one) may do what that method's implementations do.
//
// An interface call may do network I/O when an implementation is seen
// doing it, or doing I/O the analysis cannot follow (a cgo call, a send
// on a channel to a background worker), and no implementation is seen
// writing to a database instead: an outbox publisher that writes into the
// same transaction keeps a Publisher interface silent, even though another
// implementation does HTTP. An implementation that shows neither (its
// I/O out of sight) does not silence the others, so that loading more of
// the program never takes a finding away. A call runs a callback in a
// transaction (or deletes a token) when every implementation agrees.
//
// Types and methods are keyed by their path-qualified names and
// signatures as text, so that a driver may type-check each package on its
// own (from export data) and still share one Program.
//
// The modular drivers (go vet -vettool, golangci-lint, editors) have no
// Program and see only what per-package facts say.
type Program struct {
	mu      sync.Mutex
	named   map[string]*namedInfo
	methods map[string]*MethodSummary
	impls   map[string][]*namedMethod
	calls   map[string]map[string]invokedMethod // package path -> interface methods it calls, by text
	roots   map[string]bool
	// owned are each package's contributions to named and methods, by
	// package path, so that Forget can take them back.
	owned map[string]*contribution
	// locks is blindupdate's record of row locks held by callers (see
	// rowlocks.go).
	locks *rowLocks
}

// contribution is what one package (with its test variant) added: the
// keys of its named types and of its methods' summaries.
type contribution struct {
	named, methods map[string]bool
}

// own returns the contribution of package path; p.mu is held.
func (p *Program) own(path string) *contribution {
	c := p.owned[path]
	if c == nil {
		c = &contribution{named: map[string]bool{}, methods: map[string]bool{}}
		p.owned[path] = c
	}
	return c
}

// Forget takes back everything the packages with these paths contributed:
// their named types (so their methods no longer implement any interface),
// their methods' summaries and the interface calls they were seen making.
// A driver that analyzes a changed package again calls Forget, then
// AddTypes and the first pass on it, before asking anything of the
// Program: a method or a type deleted since is then gone, and so is what
// it did. The memoized interface resolutions are dropped, since any of
// them may have included one of these types.
func (p *Program) Forget(paths ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, path := range paths {
		if c := p.owned[path]; c != nil {
			for k := range c.named {
				delete(p.named, k)
			}
			for k := range c.methods {
				delete(p.methods, k)
			}
			delete(p.owned, path)
		}
		delete(p.calls, path)
		p.forgetLocks(path)
	}
	p.impls = map[string][]*namedMethod{}
}

// invokedMethod is an interface method a package calls, as text (the
// types themselves would keep every package's imports alive).
type invokedMethod struct {
	want map[string]string // the interface's methods: name -> signature text
	name string
}

type namedInfo struct {
	display string                   // "*smtpmail.Mailer"
	methods map[string]string        // method set of *T: name -> signature text
	decl    map[string]string        // promoted methods: name -> the declaring type's method key
	fwd     map[string]invokedMethod // methods promoted from an embedded interface
}

type namedMethod struct {
	key, display string
	promoted     bool           // through embedding
	fwd          *invokedMethod // promoted from an embedded interface: forwards to its implementations
}

// MethodSummary is what the first pass learned about one concrete method.
type MethodSummary struct {
	Net      *NetIO
	Runner   int // -1: not a runner
	TokenDel *TokenDelete
	// MayIO is I/O the analysis cannot follow: a cgo call, or a send on
	// a channel (a hand-off to a background worker).
	MayIO *NetIO
	// Writes: it writes to a database (its effect stays in the
	// transaction, as an outbox publisher's does).
	Writes bool
	// Begins: it returns a freshly begun transaction.
	Begins bool
	// Ends: how it ends the transactions it is given.
	Ends Ends
	// Status: the parameter (or field of one) it writes into a
	// state/status column.
	Status *StatusWriter
	// Via are the interface methods it calls (a decorator's), whose
	// implementations may do what it is not seen doing itself.
	Via []invokedMethod
	// Spawns are the interface methods called by the goroutines it starts
	// (through functions of its own package): the work it hands off,
	// which the first pass cannot resolve.
	Spawns []spawnedCall
}

// spawnedCall is an interface method called in a goroutine that a method
// starts: at is where the goroutine starts, chain the functions of the
// method's package from the goroutine's function to the one that calls
// display (the interface method's name in messages).
type spawnedCall struct {
	invokedMethod
	at      string
	chain   []string
	display string
}

// NewProgram returns an empty Program.
func NewProgram() *Program {
	return &Program{named: map[string]*namedInfo{}, methods: map[string]*MethodSummary{}, impls: map[string][]*namedMethod{},
		calls: map[string]map[string]invokedMethod{}, owned: map[string]*contribution{}}
}

func qual(p *types.Package) string { return p.Path() }

// sigText is a method's signature without its receiver and without
// parameter names (an implementation names them as it likes), with the
// empty interface spelled one way whether it came from source or export
// data.
func sigText(sig *types.Signature) string {
	var b strings.Builder
	tuple := func(t *types.Tuple, variadic bool) {
		b.WriteByte('(')
		for i := 0; i < t.Len(); i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			if variadic && i == t.Len()-1 {
				b.WriteString("...")
				b.WriteString(typeText(t.At(i).Type().(*types.Slice).Elem()))
				continue
			}
			b.WriteString(typeText(t.At(i).Type()))
		}
		b.WriteByte(')')
	}
	tuple(sig.Params(), sig.Variadic())
	tuple(sig.Results(), false)
	return b.String()
}

func typeText(t types.Type) string {
	return strings.ReplaceAll(types.TypeString(t, qual), "interface{}", "any")
}

// AddTypes indexes the concrete named types declared in pkg, less those
// skip reports (the command skips types declared in test files and mocks,
// fakes and stubs, which are not what production binds).
func (p *Program) AddTypes(pkg *types.Package, skip func(*types.TypeName) bool) {
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		tn, ok := scope.Lookup(name).(*types.TypeName)
		if !ok || tn.IsAlias() || skip != nil && skip(tn) {
			continue
		}
		n, ok := tn.Type().(*types.Named)
		if !ok || n.TypeParams().Len() > 0 {
			continue
		}
		if _, isIface := n.Underlying().(*types.Interface); isIface {
			continue
		}
		info := &namedInfo{display: "*" + pkg.Name() + "." + name, methods: map[string]string{},
			decl: map[string]string{}, fwd: map[string]invokedMethod{}}
		ms := types.NewMethodSet(types.NewPointer(n))
		for i := 0; i < ms.Len(); i++ {
			sel := ms.At(i)
			f := sel.Obj().(*types.Func)
			sig := f.Type().(*types.Signature)
			info.methods[f.Name()] = sigText(sig)
			if len(sel.Index()) < 2 {
				continue // declared by the type itself
			}
			// promoted through embedding: f is the declaring type's method
			if it, ok := sig.Recv().Type().Underlying().(*types.Interface); ok {
				info.fwd[f.Name()] = invokedMethod{want: ifaceText(it), name: f.Name()}
			} else if k := methodKey(f); k != "" {
				info.decl[f.Name()] = k
			}
		}
		p.mu.Lock()
		p.named[pkg.Path()+"."+name] = info
		p.own(pkg.Path()).named[pkg.Path()+"."+name] = true
		p.mu.Unlock()
	}
}

// methodKey names a concrete method: "example.com/mail.SMTP.Send". Methods
// promoted from an embedded type are keyed by the type that declares them
// (f of a promoted selection is the declaring type's method; AddTypes
// records the key for each embedding type).
func methodKey(fn *types.Func) string {
	sig, _ := fn.Type().(*types.Signature)
	if sig == nil || sig.Recv() == nil {
		return ""
	}
	p, n := rulekit.NamedOf(sig.Recv().Type())
	if p == "" {
		return ""
	}
	return p + "." + n + "." + fn.Name()
}

// invoked records that package pkg calls interface method m (first pass).
func (p *Program) invoked(pkg string, iface *types.Interface, m *types.Func) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.roots != nil && !p.roots[pkg] {
		return
	}
	want := ifaceText(iface)
	k := wantKey(want) + "|" + m.Name()
	if p.calls[pkg] == nil {
		p.calls[pkg] = map[string]invokedMethod{}
	}
	if _, ok := p.calls[pkg][k]; !ok {
		p.calls[pkg][k] = invokedMethod{want, m.Name()}
	}
}

// SetRoots names the packages whose interface calls are recorded (the
// others are never asked about).
func (p *Program) SetRoots(paths []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.roots = map[string]bool{}
	for _, path := range paths {
		p.roots[path] = true
	}
}

func wantKey(want map[string]string) string {
	var ks []string
	for name, sig := range want {
		ks = append(ks, name+sig)
	}
	sort.Strings(ks)
	return strings.Join(ks, ";")
}

// Resolves reports whether the second pass could see more in package pkg
// than the first: it calls an interface method that resolves to network
// I/O, a transaction runner, a begin helper, a helper that ends a
// transaction or a token delete.
func (p *Program) Resolves(pkg string) bool {
	p.mu.Lock()
	calls := p.calls[pkg]
	p.mu.Unlock()
	for _, c := range calls {
		if _, net := p.judgeNet(c.want, c.name, map[string]bool{}); net != nil {
			return true
		}
		for _, impl := range p.implementationsOf(c.want, c.name) {
			if s := p.summary(impl.key); s != nil && (s.Runner >= 0 || s.TokenDel != nil || s.Begins || !s.Ends.empty()) {
				return true
			}
		}
	}
	return false
}

// record stores the summary of a concrete method (first pass).
func (p *Program) record(fn *types.Func, s *MethodSummary) {
	k := methodKey(fn)
	if k == "" {
		return
	}
	p.mu.Lock()
	p.methods[k] = s
	if fn.Pkg() != nil {
		p.own(fn.Pkg().Path()).methods[k] = true
	}
	p.mu.Unlock()
}

// implementations returns the methods named m.Name() of the indexed types
// whose pointer method set implements iface, sorted, or nil. A method
// promoted from an embedded concrete type is keyed by its declaring type
// (where the first pass recorded its summary); one promoted from an
// embedded interface carries that interface (fwd).
func (p *Program) implementations(iface *types.Interface, m *types.Func) []*namedMethod {
	return p.implementationsOf(ifaceText(iface), m.Name())
}

// ifaceText is an interface's method set as text: name -> signature. The
// result is shared: callers must not modify it.
func ifaceText(iface *types.Interface) map[string]string {
	k := weak.Make(iface)
	if v, ok := ifaceTexts.Load(k); ok {
		return v.(map[string]string)
	}
	want := map[string]string{}
	for i := 0; i < iface.NumMethods(); i++ {
		f := iface.Method(i)
		want[f.Name()] = sigText(f.Type().(*types.Signature))
	}
	if _, loaded := ifaceTexts.LoadOrStore(k, want); !loaded {
		runtime.AddCleanup(iface, func(k weak.Pointer[types.Interface]) { ifaceTexts.Delete(k) }, k)
	}
	return want
}

// ifaceTexts memoizes ifaceText: a package calls the methods of a large
// interface (an application's App with 200 methods) thousands of times, and
// on pocketbase computing its text each time took a fifth of the run. It is
// keyed weakly, so that an entry goes with its interface and the cache
// keeps no package's types alive (a package's imports are dropped after
// it is analyzed).
var ifaceTexts sync.Map // weak.Pointer[types.Interface] -> map[string]string

func (p *Program) implementationsOf(want map[string]string, method string) []*namedMethod {
	key := wantKey(want) + "|" + method
	p.mu.Lock()
	defer p.mu.Unlock()
	if out, ok := p.impls[key]; ok {
		return out
	}
	var out []*namedMethod
	for tk, info := range p.named {
		ok := len(want) > 0
		for name, sig := range want {
			if info.methods[name] != sig {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		nm := &namedMethod{key: tk + "." + method, display: "(" + info.display + ")." + method}
		if k, ok := info.decl[method]; ok {
			nm.key, nm.promoted = k, true
		}
		if f, ok := info.fwd[method]; ok {
			nm.fwd, nm.promoted = &f, true
		}
		out = append(out, nm)
	}
	// by key, the declaring type before those that embed it
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.key != b.key {
			return a.key < b.key
		}
		if a.promoted != b.promoted {
			return !a.promoted
		}
		return a.display < b.display
	})
	p.impls[key] = out
	return out
}

func (p *Program) summary(key string) *MethodSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.methods[key]
}

// invokeNet resolves an interface call that may do network I/O (see
// [Program]). It returns the implementation's name and fact, or "".
func (p *Program) invokeNet(iface *types.Interface, m *types.Func) (string, *NetIO) {
	return p.judgeNet(ifaceText(iface), m.Name(), map[string]bool{})
}

// judgeNet weighs the implementations of the interface method (want,
// method): the first that is seen doing network I/O (itself, or as a
// decorator through the interface methods it calls), else the first doing
// I/O out of sight; nothing when one is seen writing to a database
// instead. onPath holds the interface methods being judged further up (a
// decorator of the interface it implements adds nothing).
func (p *Program) judgeNet(want map[string]string, method string, onPath map[string]bool) (string, *NetIO) {
	k := wantKey(want) + "|" + method
	if onPath[k] {
		return "", nil
	}
	onPath[k] = true
	defer delete(onPath, k)
	var netImpl, mayImpl string
	var net, may *NetIO
	for _, impl := range p.implementationsOf(want, method) {
		if impl.fwd != nil {
			// forwards to whatever it embeds: the implementations say
			if _, writes := p.writes(impl.fwd.want, impl.fwd.name, onPath); writes {
				return "", nil
			}
			continue
		}
		s := p.summary(impl.key)
		if s == nil {
			continue // not seen: neither evidence nor silence
		}
		switch {
		case s.Net != nil:
			if net == nil {
				netImpl, net = impl.display, s.Net
			}
			continue
		case s.Writes:
			return "", nil // seen writing into the database instead
		}
		for _, v := range s.Via {
			if via, f := p.judgeNet(v.want, v.name, onPath); f != nil && net == nil {
				netImpl, net = impl.display, &NetIO{Chain: append([]string{v.name, via}, f.Chain...), Leaf: f.Leaf, Handoff: f.Handoff}
			}
		}
		// A goroutine it starts whose work does network I/O: a hand-off
		// (the worker's network call, rather than the channel feeding it).
		for _, sp := range s.Spawns {
			if net != nil {
				break
			}
			if via, f := p.judgeNet(sp.want, sp.name, onPath); f != nil {
				chain := append(append(append([]string{}, sp.chain...), sp.display, via), f.Chain...)
				netImpl, net = impl.display, &NetIO{Chain: chain, Leaf: f.Leaf, Handoff: "a goroutine started at " + sp.at}
			}
		}
		if s.MayIO != nil && may == nil {
			mayImpl, may = impl.display, s.MayIO
		}
	}
	if net != nil {
		return netImpl, net
	}
	return mayImpl, may
}

// writes reports whether an implementation of (want, method) is seen
// writing to a database and doing no network I/O.
func (p *Program) writes(want map[string]string, method string, onPath map[string]bool) (string, bool) {
	k := wantKey(want) + "|" + method
	if onPath[k] {
		return "", false
	}
	onPath[k] = true
	defer delete(onPath, k)
	for _, impl := range p.implementationsOf(want, method) {
		if impl.fwd != nil {
			if d, ok := p.writes(impl.fwd.want, impl.fwd.name, onPath); ok {
				return d, true
			}
			continue
		}
		if s := p.summary(impl.key); s != nil && s.Net == nil && s.Writes {
			return impl.display, true
		}
	}
	return "", false
}

// invokeRunner: every implementation runs the same func parameter inside a
// transaction; the index is in the concrete method's SSA parameters
// (receiver first).
func (p *Program) invokeRunner(iface *types.Interface, m *types.Func) int {
	impls := p.implementations(iface, m)
	if len(impls) == 0 {
		return -1
	}
	idx := -1
	for _, f := range impls {
		if f.fwd != nil {
			continue // forwards to one of the others
		}
		s := p.summary(f.key)
		if s == nil || s.Runner < 0 || idx >= 0 && s.Runner != idx {
			return -1
		}
		idx = s.Runner
	}
	return idx
}

// invokeTokenDel: every implementation deletes an idempotency token.
func (p *Program) invokeTokenDel(iface *types.Interface, m *types.Func) (string, *TokenDelete) {
	return agreed(p, iface, m, func(s *MethodSummary) *TokenDelete { return s.TokenDel },
		func(a, b *TokenDelete) bool { return true })
}

// agreed returns what pick says of every implementation of the interface
// method (those that forward to an embedded interface aside), and the
// first one's name, when it says something of each and the values are the
// same; else nil.
func agreed[T any](p *Program, iface *types.Interface, m *types.Func, pick func(*MethodSummary) *T, same func(a, b *T) bool) (string, *T) {
	var first *T
	display := ""
	for _, f := range p.implementations(iface, m) {
		if f.fwd != nil {
			continue
		}
		s := p.summary(f.key)
		if s == nil || pick(s) == nil {
			return "", nil
		}
		switch v := pick(s); {
		case first == nil:
			first, display = v, f.display
		case !same(first, v):
			return "", nil
		}
	}
	return display, first
}

// invokeBegins: every implementation returns a freshly begun transaction
// (a decorator of the method, through what it wraps).
func (p *Program) invokeBegins(iface *types.Interface, m *types.Func) bool {
	return p.begins(ifaceText(iface), m.Name(), map[string]bool{}) == yes
}

// verdict is what the implementations of an interface method say; a
// decorator of the method asked again while it is being judged says
// nothing (it wraps one of the others).
type verdict int

const (
	no verdict = iota
	yes
	unknown
)

func (p *Program) begins(want map[string]string, method string, onPath map[string]bool) verdict {
	k := wantKey(want) + "|" + method
	if onPath[k] {
		return unknown
	}
	onPath[k] = true
	defer delete(onPath, k)
	n := 0
	for _, f := range p.implementationsOf(want, method) {
		if f.fwd != nil {
			continue
		}
		s := p.summary(f.key)
		switch {
		case s == nil:
			return no
		case s.Begins:
			n++
			continue
		}
		ds := delegates(s, want, method)
		if len(ds) == 0 {
			return no
		}
		for _, d := range ds {
			switch p.begins(d.want, d.name, onPath) {
			case no:
				return no
			case yes:
				n++
			}
		}
	}
	if n == 0 {
		return unknown
	}
	return yes
}

// delegates returns the interface methods to which a method that is not
// seen doing what the interface method's other implementations do may
// hand the call: those it calls with the same name and signature (a
// logging or timing decorator around another implementation, which passes
// its arguments on).
func delegates(s *MethodSummary, want map[string]string, method string) []invokedMethod {
	var out []invokedMethod
	for _, v := range s.Via {
		if v.name == method && v.want[method] == want[method] {
			out = append(out, v)
		}
	}
	return out
}
