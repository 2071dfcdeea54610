package facts

import (
	"go/types"
	"sort"
	"sync"
)

// Program is a whole-program view for the standalone command: the concrete
// named types of every loaded package and what the facts analyzer learned
// about their methods in a first pass. With it, a call through an
// interface (UserService.Notify) is resolved to the implementations in
// the loaded packages, even one in a package the caller does not import.
// A call is known to do network I/O (or to run a callback in a
// transaction) only when every implementation agrees: an outbox publisher
// that writes into the same transaction keeps a Publisher interface
// silent, even though another implementation does HTTP.
//
// The modular drivers (go vet -vettool, golangci-lint, editors) have no
// Program and see only what per-package facts say.
type Program struct {
	named []*types.Named

	mu      sync.Mutex
	methods map[*types.Func]*MethodSummary
	impls   map[implKey][]*types.Func
}

// MethodSummary is what the first pass learned about one concrete method.
type MethodSummary struct {
	Net      *NetIO
	Runner   int // -1: not a runner
	TokenDel *TokenDelete
}

type implKey struct {
	iface *types.Interface
	name  string
}

// NewProgram indexes the concrete named types declared in pkgs, less
// those skip reports (the command skips types declared in test files and
// mocks, fakes and stubs, which are not what production binds).
func NewProgram(pkgs []*types.Package, skip func(*types.TypeName) bool) *Program {
	p := &Program{methods: map[*types.Func]*MethodSummary{}, impls: map[implKey][]*types.Func{}}
	for _, pkg := range pkgs {
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
			p.named = append(p.named, n)
		}
	}
	return p
}

// record stores the summary of a concrete method (first pass).
func (p *Program) record(fn *types.Func, s *MethodSummary) {
	p.mu.Lock()
	p.methods[fn] = s
	p.mu.Unlock()
}

// Implementations returns the methods named m.Name() of the loaded
// concrete types that implement iface, sorted by name, or nil.
func (p *Program) Implementations(iface *types.Interface, m *types.Func) []*types.Func {
	k := implKey{iface, m.Name()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if out, ok := p.impls[k]; ok {
		return out
	}
	var out []*types.Func
	for _, n := range p.named {
		var t types.Type = n
		if !types.Implements(t, iface) {
			t = types.NewPointer(n)
			if !types.Implements(t, iface) {
				continue
			}
		}
		obj, _, _ := types.LookupFieldOrMethod(t, false, m.Pkg(), m.Name())
		if f, ok := obj.(*types.Func); ok {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return FullName(out[i]) < FullName(out[j]) })
	p.impls[k] = out
	return out
}

// summary returns the first pass's summary of a concrete method.
func (p *Program) summary(fn *types.Func) *MethodSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.methods[fn]
}

// invokeNet resolves an interface call: every implementation does network
// I/O. It returns the implementation's name and its fact (of the first
// one), or nil.
func (p *Program) invokeNet(iface *types.Interface, m *types.Func) (*types.Func, *NetIO) {
	impls := p.Implementations(iface, m)
	if len(impls) == 0 {
		return nil, nil
	}
	var first *NetIO
	for _, f := range impls {
		s := p.summary(f)
		if s == nil || s.Net == nil {
			return nil, nil // an implementation that does not: silent
		}
		if first == nil {
			first = s.Net
		}
	}
	return impls[0], first
}

// invokeRunner: every implementation runs the same func parameter inside a
// transaction; the index is in the concrete method's SSA parameters
// (receiver first).
func (p *Program) invokeRunner(iface *types.Interface, m *types.Func) int {
	impls := p.Implementations(iface, m)
	if len(impls) == 0 {
		return -1
	}
	idx := -1
	for _, f := range impls {
		s := p.summary(f)
		if s == nil || s.Runner < 0 || idx >= 0 && s.Runner != idx {
			return -1
		}
		idx = s.Runner
	}
	return idx
}

// invokeTokenDel: every implementation deletes an idempotency token.
func (p *Program) invokeTokenDel(iface *types.Interface, m *types.Func) (*types.Func, *TokenDelete) {
	impls := p.Implementations(iface, m)
	if len(impls) == 0 {
		return nil, nil
	}
	var first *TokenDelete
	for _, f := range impls {
		s := p.summary(f)
		if s == nil || s.TokenDel == nil {
			return nil, nil
		}
		if first == nil {
			first = s.TokenDel
		}
	}
	return impls[0], first
}
