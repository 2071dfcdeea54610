// Package errtree walks error trees (an error, and what its Unwrap() error
// or Unwrap() []error methods return) without trusting them to be trees:
// every walk visits each error once, so a cyclic Unwrap ends it instead of
// looping, and [Acyclic] gives a cyclic error a shape that the standard
// library's [errors.Is] and [errors.As] (which have no cycle detection)
// can walk too.
package errtree

import (
	"encoding/binary"
	"math"
	"reflect"
	"unsafe"
)

// MaxVisits bounds every walk of this package: it reads at most this many
// errors of a tree. A tree is never that large by design; an Unwrap that
// makes a new error on every call (a chain that never ends, or a cycle of
// errors that are never the same twice) is, and a walk of it ends there.
// Each function says how it answers for a tree it could not read whole.
const MaxVisits = 1 << 16

// Veiled is an error that holds another whose tree errors.Is and errors.As
// must not see whole (it has no Unwrap method; its own Is and As methods
// answer for the part they may), but whose whole tree [WalkVeiled] reads:
// the runtime's error that no longer matches its permanent-failure
// sentinel is one.
type Veiled interface {
	error
	Veiled() error
}

// mode says how a walk reads a tree.
type mode uint8

const (
	// throughVeils: the walk goes into the error a [Veiled] error holds,
	// as one more child, and does not match the veiled error itself
	// (whose Is and As methods would walk that error again, with a
	// visited set of their own: once per path through nested veils).
	throughVeils mode = 1 << iota
	// tolerant: a match or an Unwrap that panics reads as no match, or
	// no children, and the walk goes on.
	tolerant
)

// Walk reports whether match holds for an error of err's tree, depth first
// as errors.Is walks (an error, then its children in order). It visits
// every error once however wide or deep the tree is, and a cyclic Unwrap
// ends the walk instead of looping: the visited set is keyed by each
// error's identity (see nodeKey); it reads at most [MaxVisits] errors and
// reports false for what it did not read. A node of an [Acyclic] error is
// matched as the error it stands for.
func Walk(err error, match func(error) bool) bool {
	found, _ := search(err, match, 0)
	return found
}

// WalkVeiled is [Walk] that also reads the tree every [Veiled] error holds
// (one visited set for the whole walk), matching what it holds rather than
// the veiled error itself. complete is false when the walk stopped at
// [MaxVisits] without a match: the caller decides what a tree it could not
// read whole means.
func WalkVeiled(err error, match func(error) bool) (found, complete bool) {
	return search(err, match, throughVeils)
}

// search is the walk of every function of this package: see Walk and the
// modes.
func search(err error, match func(error) bool, m mode) (found, complete bool) {
	if err == nil {
		return false, true
	}
	stack := []error{err}
	seen := map[any]struct{}{}
	visits := 0
	truncated := false // a flat error of a tree past MaxVisits was met
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		n, flatNode := e.(*node)
		if flatNode {
			e = n.e // a node of a flattened tree: itself, without children
		}
		if k := nodeKey(e); k != nil {
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = struct{}{}
		}
		if f, ours := e.(*flat); ours {
			truncated = truncated || f.truncated
		} else if visits++; visits > MaxVisits {
			return false, false
		}
		if m&throughVeils != 0 {
			if v, ok := e.(Veiled); ok {
				if inner, ok := call(m, v.Veiled); ok {
					stack = append(stack, inner)
				}
				continue
			}
		}
		if matches(m, match, e) {
			return true, true
		}
		if flatNode {
			continue
		}
		switch u := e.(type) {
		case *flat:
			for i := len(u.nodes) - 1; i >= 0; i-- { // the first node is visited first
				stack = append(stack, u.nodes[i])
			}
		case interface{ Unwrap() error }:
			if child, ok := call(m, u.Unwrap); ok {
				stack = append(stack, child)
			}
		case interface{ Unwrap() []error }:
			if errs, ok := call(m, u.Unwrap); ok {
				for i := len(errs) - 1; i >= 0; i-- { // the first child is visited first
					stack = append(stack, errs[i])
				}
			}
		}
	}
	return false, !truncated
}

// matches is match(e); in tolerant mode a match that panics is false.
func matches(m mode, match func(error) bool, e error) (ok bool) {
	if m&tolerant == 0 {
		return match(e)
	}
	returned := false
	defer func() {
		if !returned {
			recover()
			ok = false
		}
	}()
	ok = match(e)
	returned = true
	return ok
}

// call is f(); in tolerant mode, ok is false when f panics (an Unwrap of
// the caller's: the error then has no children).
func call[T any](m mode, f func() T) (v T, ok bool) {
	if m&tolerant == 0 {
		return f(), true
	}
	defer func() {
		if !ok {
			recover()
		}
	}()
	v = f()
	return v, true
}

// Is reports whether an error of err's tree matches target as errors.Is
// matches: equal to it, or its Is method says so. Unlike errors.Is it ends
// on a cyclic tree.
func Is(err, target error) bool {
	return Walk(err, func(e error) bool { return IsNode(e, target) })
}

// IsVeiled is [Is] through veils: see [WalkVeiled]. What it could not read
// (past [MaxVisits]) does not match.
func IsVeiled(err, target error) bool {
	found, _ := WalkVeiled(err, func(e error) bool { return IsNode(e, target) })
	return found
}

// SafeIs is [Is] for a tree whose Is or Unwrap methods may panic: an error
// whose Is panics does not match, one whose Unwrap panics has no children,
// and the walk goes on. For reading which of its own errors a tree holds
// (the runtime's sentinels) past errors of the caller's.
func SafeIs(err, target error) bool {
	found, _ := search(err, func(e error) bool { return IsNode(e, target) }, tolerant)
	return found
}

// SafeAs is errors.As(err, target) for a tree whose As or Unwrap methods
// may panic, as [SafeIs] is for Is: *target is set only when an error of
// the tree fills it.
func SafeAs[T any](err error, target *T) bool {
	var found T
	ok, _ := search(err, func(e error) bool { return AsNode(e, &found) }, tolerant)
	if ok {
		*target = found
	}
	return ok
}

// IsNode reports whether e itself (not its tree) matches target as
// errors.Is matches one error of a tree: equal, or its Is method says so.
func IsNode(e, target error) bool {
	if reflect.TypeOf(e).Comparable() && e == target {
		return true
	}
	x, ok := e.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// As finds the first error of err's tree that is a T, or whose As method
// takes a *T, as errors.As does; unlike errors.As it ends on a cyclic tree.
func As[T any](err error) (T, bool) {
	var found T
	ok := Walk(err, func(e error) bool { return AsNode(e, &found) })
	return found, ok
}

// AsNode is errors.As for e itself: e is assignable to *target's type (target
// a non-nil pointer), or e's As method takes target.
func AsNode(e error, target any) bool {
	v := reflect.ValueOf(target).Elem()
	if reflect.TypeOf(e).AssignableTo(v.Type()) {
		v.Set(reflect.ValueOf(e))
		return true
	}
	x, ok := e.(interface{ As(any) bool })
	return ok && x.As(target)
}

// Cyclic reports whether err's Unwrap methods lead back to an error on the
// way to it: a walk that does not keep a visited set (errors.Is, errors.As,
// errors.Join's Error) would not end. A tree past [MaxVisits] errors counts
// as cyclic: such a walk might not end either.
func Cyclic(err error) bool {
	cyclic, _ := shape(err)
	return cyclic
}

// shape reports whether err's tree is cyclic (or past [MaxVisits]: see
// Cyclic), and whether an error of it is reached by two paths (a subtree
// shared by two parents): a walk without a visited set reads it once per
// path, and paths multiply with each level that shares (64 levels of two
// parents sharing one child: 2^64 paths through 129 errors).
func shape(err error) (cyclic, shared bool) {
	type frame struct {
		key  any
		e    error
		exit bool
	}
	stack := []frame{{e: err}}
	onPath := map[any]bool{}
	done := map[any]bool{}
	visits := 0
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if f.exit {
			delete(onPath, f.key)
			done[f.key] = true
			continue
		}
		if f.e == nil {
			continue
		}
		if _, ours := f.e.(*flat); !ours { // as search counts
			if visits++; visits > MaxVisits {
				return true, shared
			}
		}
		k := nodeKey(f.e)
		if k != nil {
			if onPath[k] {
				return true, shared
			}
			if done[k] {
				shared = true
				continue
			}
			onPath[k] = true
			stack = append(stack, frame{key: k, exit: true})
		}
		switch u := f.e.(type) {
		case *flat:
			for i := len(u.nodes) - 1; i >= 0; i-- {
				stack = append(stack, frame{e: u.nodes[i]})
			}
		case interface{ Unwrap() error }:
			stack = append(stack, frame{e: u.Unwrap()})
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			for i := len(errs) - 1; i >= 0; i-- {
				stack = append(stack, frame{e: errs[i]})
			}
		}
	}
	return false, shared
}

// Acyclic returns err itself when every error of its tree is reached by
// one path only (no cycle, no shared subtree, at most [MaxVisits] errors);
// otherwise an error with err's message that stands for each error of
// err's tree once (up to MaxVisits), in the order errors.Is would first
// meet them, each alone (its message, its Is and As methods, what it is
// for errors.As; its Unwrap dropped), through its own Is and As methods
// (it has no Unwrap). errors.Is, errors.As and Walk answer for it as they
// would for err, and end, each error read once (but that an errors.As
// target of an interface type whose methods are among Error, Is and As
// finds the flattened error itself): the standard library's walks, which
// keep no visited set, would loop on a cycle and read a shared subtree once
// per path. A cyclic error is a bug in the code that made it; the runtime
// flattens the errors its callers' code returns (an effect's, a query's)
// before anything walks them. Err itself when one of its methods panics:
// whoever reads it next does so under recover.
//
// A panic is told by the walk not returning, not by recover's value: an
// Unwrap that panics with nil under GODEBUG=panicnil=1 recovers as nil, and
// must not turn err into no error at all (a failed effect recorded as a
// success).
func Acyclic(err error) (out error) {
	if err == nil {
		return nil
	}
	returned := false
	defer func() {
		if !returned {
			recover()
			out = err
		}
	}()
	out = acyclic(err)
	returned = true
	return out
}

// acyclic is Acyclic without its recover.
func acyclic(err error) error {
	if cyclic, shared := shape(err); !cyclic && !shared {
		return err
	}
	f := &flat{err: err}
	_, complete := search(err, func(e error) bool {
		f.nodes = append(f.nodes, &node{e})
		return false
	}, 0)
	f.truncated = !complete
	return f
}

// flat is a cyclic or shared error made walkable: see Acyclic. truncated
// is set when err's tree was larger than MaxVisits: a walk of the flat
// error is then incomplete too. The flat error itself is not counted
// among a walk's visits: flattened, a tree of MaxVisits errors is read
// whole as it was (review r50).
type flat struct {
	err       error
	nodes     []error
	truncated bool
}

func (f *flat) Error() string { return f.err.Error() }

// Is and As answer for the errors f stands for, in order, as errors.Is and
// errors.As do for the tree it was made of. f has no Unwrap: with an
// Unwrap() []error it would itself be what errors.As finds for a target
// interface{ Unwrap() []error } (the idiom that lists a join's errors),
// a list of its nodes instead of the join the tree holds (review r51).
// Walks of this package read its nodes (see search and shape).
func (f *flat) Is(target error) bool {
	for _, n := range f.nodes {
		if IsNode(n.(*node).e, target) {
			return true
		}
	}
	return false
}

func (f *flat) As(target any) bool {
	for _, n := range f.nodes {
		if AsNode(n.(*node).e, target) {
			return true
		}
	}
	return false
}

// node is one error of a flattened tree, without its children.
type node struct{ e error }

// It has no method but Error, Is and As: with a Timeout method it would be
// a net.Error to errors.As, whatever it stands for (review r50); what it
// stands for is found through As.
func (n *node) Error() string        { return n.e.Error() }
func (n *node) Is(target error) bool { return IsNode(n.e, target) }
func (n *node) As(target any) bool   { return AsNode(n.e, target) }

// refKey is the identity of an error that is a reference (a pointer, a
// map, a slice...) or holds references: its type and their addresses.
type refKey struct {
	t    reflect.Type
	refs string
}

// nodeKey returns a map key that is the same for an error met twice in a
// tree, or nil when it cannot tell (the walk then reads it every time it
// meets it, up to [MaxVisits]): the error itself when it is a pointer (the
// usual error); else its type, the addresses it holds (a cycle through
// errors that are not values can only run through references) and its
// scalar values, bit for bit: a value holding a NaN is never == to itself
// (a cycle of such values, an Unwrap returning its receiver, never ended),
// and values holding 0.0 and -0.0 are == but two errors, whose methods can
// tell them apart (review r50). nil when it holds a func that is not nil: a
// func's address is its code's, the same for every closure of one function
// literal, whatever each captured, so two errors that differ only by the
// closures they hold (a Timeout() asking its own) would be taken for one,
// and the second never asked (review r49).
func nodeKey(e error) any {
	v := reflect.ValueOf(e)
	if v.Kind() == reflect.Pointer {
		return e
	}
	// An addressable copy, so that a float32's bits are read from memory:
	// reflect's Float widens it to a float64, which quiets a signalling
	// NaN, and two float32 NaNs that differ only by that bit would be one
	// error (review r51).
	c := reflect.New(v.Type()).Elem()
	c.Set(v)
	var refs []byte
	if !collectRefs(c, &refs) {
		return nil
	}
	return refKey{v.Type(), string(refs)}
}

// collectRefs appends the addresses (and slice lengths) that v holds at
// its top level and in its nested structs, arrays and interfaces, and the
// values of its scalar fields: two values of one type that hold the same
// references (nil slices, say) but other scalars are two errors (an
// APIError{Status: 400} and an APIError{Status: 504} joined: review r48),
// and the walk must ask both. It reports false when v holds a func that is
// not nil, whose identity an address does not give (see nodeKey).
func collectRefs(v reflect.Value, out *[]byte) bool {
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			*out = append(*out, 1)
		} else {
			*out = append(*out, 0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Int()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		*out = binary.LittleEndian.AppendUint64(*out, v.Uint())
	case reflect.Float32:
		// From memory where v is addressable (nodeKey's copy makes every
		// value outside an interface so). In an interface its bits come
		// through a float64, which keeps them but for a NaN's signalling
		// bit: such an error is read every time it is met, as one holding
		// a func is.
		if v.CanAddr() {
			*out = binary.LittleEndian.AppendUint32(*out, *(*uint32)(unsafe.Pointer(v.UnsafeAddr())))
			break
		}
		f := v.Float()
		if f != f {
			return false
		}
		*out = binary.LittleEndian.AppendUint32(*out, math.Float32bits(float32(f)))
	case reflect.Complex64:
		if v.CanAddr() {
			b := *(*[2]uint32)(unsafe.Pointer(v.UnsafeAddr()))
			*out = binary.LittleEndian.AppendUint32(*out, b[0])
			*out = binary.LittleEndian.AppendUint32(*out, b[1])
			break
		}
		c := v.Complex()
		if real(c) != real(c) || imag(c) != imag(c) {
			return false
		}
		*out = binary.LittleEndian.AppendUint32(*out, math.Float32bits(float32(real(c))))
		*out = binary.LittleEndian.AppendUint32(*out, math.Float32bits(float32(imag(c))))
	case reflect.Float64:
		*out = binary.LittleEndian.AppendUint64(*out, math.Float64bits(v.Float()))
	case reflect.Complex128:
		c := v.Complex()
		*out = binary.LittleEndian.AppendUint64(*out, math.Float64bits(real(c)))
		*out = binary.LittleEndian.AppendUint64(*out, math.Float64bits(imag(c)))
	case reflect.String:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Len()))
		*out = append(*out, v.String()...)
	case reflect.Func:
		if !v.IsNil() {
			return false
		}
		*out = binary.LittleEndian.AppendUint64(*out, 0)
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.UnsafePointer:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Pointer()))
	case reflect.Slice:
		// The capacity too: s[0:1:4] and s[0:1:1] are two slices (review
		// r51's observation), whose holders' methods can tell them apart.
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Pointer()))
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Len()))
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Cap()))
	case reflect.Interface:
		// The dynamic type first, 0 for nil: an int 0 and a uint 0 held in
		// one field are two values, and so are E{A: 1} and E{B: 1} whose
		// other field is a nil interface (nothing written for it would
		// make the two one: review r50).
		if v.IsNil() {
			*out = binary.LittleEndian.AppendUint64(*out, 0)
			break
		}
		*out = binary.LittleEndian.AppendUint64(*out, uint64(reflect.ValueOf(v.Elem().Type()).Pointer()))
		return collectRefs(v.Elem(), out)
	case reflect.Struct:
		for i := range v.NumField() {
			if !collectRefs(v.Field(i), out) {
				return false
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			if !collectRefs(v.Index(i), out) {
				return false
			}
		}
	}
	return true
}
