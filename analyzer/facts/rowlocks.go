package facts

import (
	"fmt"
	"go/types"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Row locks held by the callers of a helper (blindupdate's whole-program
// view). In the first pass, blindupdate records into the Program the
// functions that lock rows (by table), the helpers that write a state
// blind, and every call of a function or method of the loaded program's
// root packages: unlocked, or made while the caller holds a row lock in the
// same transaction and has checked the locked row's state under it. In the
// second pass, a blind helper whose every caller is a locked one is not
// reported (see [Program.CallersLock]).

// LockRef is a call made before a helper's call that may lock a row: the
// tables it is known to lock, or an interface method whose implementations
// decide (resolved in the second pass).
type LockRef struct {
	Tables []string
	want   map[string]string
	method string
}

// InterfaceLock is a LockRef for a call of interface method m of iface.
func InterfaceLock(iface *types.Interface, m *types.Func) LockRef {
	return LockRef{want: ifaceText(iface), method: m.Name()}
}

// LockedCall is what a call site of a function says about row locks: the
// calls before it that lock a row in the same transaction (a variable
// passed to both) and whose row's state the caller reads under the lock,
// with, per argument index of the call (bit i: argument i), whether the
// argument is a field of that locked row (Rooted) or the very value the
// lock was taken by (Same). Locks is empty for an unlocked call.
type LockedCall struct {
	Locks  []LockRef
	Rooted []uint64 // per lock, the arguments that are fields of its row
	Same   []uint64 // per lock, the arguments also given to the lock call
	// Where the call is, for messages: file (base name), line, column and
	// the calling function.
	File      string
	Line, Col int
	Caller    string
}

// at is "file.go:12:3 in (*usecases.Service).Pay".
func (c *LockedCall) at() string {
	return c.File + ":" + strconv.Itoa(c.Line) + ":" + strconv.Itoa(c.Col) + " in " + c.Caller
}

// callee is the function a recorded call calls: a concrete function or
// method (key), or an interface method (want, by name).
type lockSite struct {
	key  string
	want map[string]string
	call LockedCall
}

type rowLocks struct {
	lockers map[string]map[string][]string // pkg -> function key -> tables it locks
	sites   map[string]map[string][]lockSite
	escapes map[string][]lockSite // pkg -> callees used as values (callers unknown)
	helpers map[string]bool       // pkgs with a blind helper
	whole   map[string]bool       // packages whose callers are all loaded
}

// FuncKey names a function or concrete method: "example.com/repo.Repo.Save"
// or "example.com/repo.Save"; "" for an interface method, a closure or a
// function of no package.
func FuncKey(fn *types.Func) string {
	if fn == nil || fn.Pkg() == nil {
		return ""
	}
	if sig, _ := fn.Type().(*types.Signature); sig != nil && sig.Recv() != nil {
		if types.IsInterface(sig.Recv().Type()) {
			return ""
		}
		return methodKey(fn)
	}
	return fn.Pkg().Path() + "." + fn.Name()
}

func (p *Program) rl() *rowLocks {
	if p.locks == nil {
		p.locks = &rowLocks{lockers: map[string]map[string][]string{}, sites: map[string]map[string][]lockSite{},
			escapes: map[string][]lockSite{}, helpers: map[string]bool{}}
	}
	return p.locks
}

// RecordLocker records that fn, of package pkg, locks rows of tables.
func (p *Program) RecordLocker(pkg string, fn *types.Func, tables []string) {
	k := FuncKey(fn)
	if k == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.rl()
	if l.lockers[pkg] == nil {
		l.lockers[pkg] = map[string][]string{}
	}
	l.lockers[pkg][k] = tables
}

// RecordBlindHelper records that package pkg holds a function that writes
// a state blind: the second pass looks at it again, with its callers.
func (p *Program) RecordBlindHelper(pkg string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rl().helpers[pkg] = true
}

// RecordCall records a call from package pkg of fn (a function, a
// concrete method or, with iface, an interface method).
func (p *Program) RecordCall(pkg string, fn *types.Func, iface *types.Interface, c LockedCall) {
	s := lockSite{call: c}
	if iface != nil {
		s.want = ifaceText(iface)
	} else if s.key = FuncKey(fn); s.key == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.roots != nil && (!p.roots[pkg] || iface == nil && !p.roots[fn.Pkg().Path()]) {
		return // a helper is judged only in a root package
	}
	l := p.rl()
	if l.sites[pkg] == nil {
		l.sites[pkg] = map[string][]lockSite{}
	}
	l.sites[pkg][fn.Name()] = insertSite(l.sites[pkg][fn.Name()], s)
}

// insertSite inserts s into list, kept in the order of lockSite.order,
// unless list has it already: a package and its test variant record the
// same calls, in an order the scheduler picks, and the sites are counted
// and named in that order (the first unlocked caller in a message) and
// hashed by Digest.
func insertSite(list []lockSite, s lockSite) []lockSite {
	k := s.order()
	i := sort.Search(len(list), func(i int) bool { return list[i].order() >= k })
	if i < len(list) && list[i].order() == k {
		return list
	}
	return slices.Insert(list, i, s)
}

// order is a text that sorts sites by where the call is, then by what it
// calls and what it holds; equal for the same call recorded twice (fmt
// prints maps with sorted keys).
func (s *lockSite) order() string {
	c := &s.call
	return fmt.Sprintf("%s\x00%09d\x00%09d\x00%s\x00%s\x00%v\x00%v\x00%v\x00%v", c.File, c.Line, c.Col, c.Caller, s.key, s.want, c.Locks, c.Rooted, c.Same)
}

// RecordEscape records that package pkg uses fn as a value (a method
// value, a function passed on): its callers are not known.
func (p *Program) RecordEscape(pkg string, fn *types.Func, iface *types.Interface) {
	var s lockSite
	if iface != nil {
		s.want = ifaceText(iface)
	} else if s.key = FuncKey(fn); s.key == "" {
		return
	}
	s.call.Caller = fn.Name()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.roots != nil && iface == nil && !p.roots[fn.Pkg().Path()] {
		return
	}
	l := p.rl()
	l.escapes[pkg] = insertSite(l.escapes[pkg], s)
}

// SetWhole names the packages whose callers are all in the run: those of
// a module whose every package is a root of the run and loaded. A helper
// elsewhere may have callers the run does not see, and is judged alone.
func (p *Program) SetWhole(paths []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := map[string]bool{}
	for _, path := range paths {
		w[path] = true
	}
	p.rl().whole = w
}

// forgetLocks takes back what package path recorded; p.mu is held.
func (p *Program) forgetLocks(path string) {
	if p.locks == nil {
		return
	}
	delete(p.locks.lockers, path)
	delete(p.locks.sites, path)
	delete(p.locks.escapes, path)
	delete(p.locks.helpers, path)
}

// Rejudges reports whether package pkg declares a helper that writes a
// state blind, to be judged again in the second pass with its callers'
// row locks. Its facts do not change, so the packages that import it need
// not be analyzed again for it (unlike [Program.Resolves]).
func (p *Program) Rejudges(pkg string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.locks != nil && p.locks.helpers[pkg]
}

// lockerTables returns the tables the function keyed k locks, or nil.
func (p *Program) lockerTables(k string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.locks == nil {
		return nil
	}
	for _, m := range p.locks.lockers {
		if t, ok := m[k]; ok {
			return t
		}
	}
	return nil
}

// refTables resolves a LockRef: its tables, or those every implementation
// of its interface method locks (none when one does not lock, or there is
// no implementation).
func (p *Program) refTables(r LockRef) []string {
	if r.want == nil {
		return r.Tables
	}
	impls := p.implementationsOf(r.want, r.method)
	if len(impls) == 0 {
		return nil
	}
	var common []string
	for i, impl := range impls {
		if impl.fwd != nil {
			return nil // forwards to an interface: not followed here
		}
		t := p.lockerTables(impl.key)
		if len(t) == 0 {
			return nil
		}
		if i == 0 {
			common = append([]string(nil), t...)
			continue
		}
		var keep []string
		for _, c := range common {
			for _, x := range t {
				if baseTable(c) == baseTable(x) {
					keep = append(keep, c)
					break
				}
			}
		}
		common = keep
	}
	return common
}

// CallersLock judges helper fn (a function or concrete method of a package
// of the run) that writes a state of table blind, taking the row's key
// from its parameter keyParam (-1 when not known): it reports whether every
// call of fn in the loaded program, directly or through an interface
// method fn implements, is made while the caller holds a row lock in the
// same transaction and has checked the locked row's state under it, the
// lock on table's row (keyed by the value the lock was taken with, or a
// field of the locked row) or on a row whose field is the key (the row
// that names it). It returns false, with the first unlocked call ("" when
// there is none: no call seen, or fn used as a value, or callers that may
// not be loaded; with how many more there are), otherwise.
func (p *Program) CallersLock(fn *types.Func, table string, keyParam int) (bool, string) {
	k := FuncKey(fn)
	if k == "" || fn.Pkg() == nil || keyParam < 0 || keyParam >= 64 {
		return false, ""
	}
	p.mu.Lock()
	l := p.locks
	if l == nil || !l.whole[fn.Pkg().Path()] {
		p.mu.Unlock()
		return false, ""
	}
	var sites, escapes []lockSite
	pkgs := make([]string, 0, len(l.sites))
	for pkg := range l.sites {
		pkgs = append(pkgs, pkg)
	}
	sort.Strings(pkgs)
	for _, pkg := range pkgs {
		sites = append(sites, l.sites[pkg][fn.Name()]...)
	}
	for _, es := range l.escapes {
		for _, e := range es {
			if e.call.Caller == fn.Name() {
				escapes = append(escapes, e)
			}
		}
	}
	p.mu.Unlock()
	implements := func(want map[string]string) bool {
		for _, impl := range p.implementationsOf(want, fn.Name()) {
			if impl.key == k && impl.fwd == nil {
				return true
			}
		}
		return false
	}
	for _, e := range escapes {
		if e.want == nil && e.key == k || e.want != nil && implements(e.want) {
			return false, "" // used as a value: its callers are not known
		}
	}
	n, unlocked, first := 0, 0, ""
	for _, s := range sites {
		if s.want == nil && s.key != k || s.want != nil && !implements(s.want) {
			continue
		}
		n++
		if !p.locked(s.call, table, keyParam) {
			if unlocked == 0 {
				first = s.call.at()
			}
			unlocked++
		}
	}
	switch {
	case unlocked == 2:
		first += ", and at 1 other call,"
	case unlocked > 2:
		first += ", and at " + strconv.Itoa(unlocked-1) + " other calls,"
	}
	return n > 0 && unlocked == 0, first
}

// locked reports whether call c holds a lock that serializes writes of
// table's row keyed by argument keyParam.
func (p *Program) locked(c LockedCall, table string, keyParam int) bool {
	bit := uint64(1) << keyParam
	for i, r := range c.Locks {
		rooted, same := c.Rooted[i]&bit != 0, c.Same[i]&bit != 0
		if !rooted && !same {
			continue
		}
		for _, t := range p.refTables(r) {
			if baseTable(t) == baseTable(table) || rooted {
				return true
			}
		}
	}
	return false
}

// baseTable is a table's name without schema or quotes, in lower case.
func baseTable(t string) string {
	t = strings.Trim(t, `"`)
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		t = t[i+1:]
	}
	return strings.ToLower(strings.Trim(t, `"`))
}
