// Package errtree walks error trees (an error, and what its Unwrap() error
// or Unwrap() []error methods return) without trusting them to be trees:
// every walk visits each error once, so a cyclic Unwrap ends it instead of
// looping, and [Acyclic] gives a cyclic error a shape that the standard
// library's [errors.Is] and [errors.As] (which have no cycle detection)
// can walk too.
package errtree

import (
	"encoding/binary"
	"reflect"
)

// Walk reports whether match holds for an error of err's tree, depth first
// as errors.Is walks (an error, then its children in order). It visits
// every error once however wide or deep the tree is, and a cyclic Unwrap
// ends the walk instead of looping: the visited set is keyed by each
// error's identity (see nodeKey). A node of an [Acyclic] error is matched
// as the error it stands for.
func Walk(err error, match func(error) bool) bool {
	if err == nil {
		return false
	}
	stack := []error{err}
	seen := map[any]struct{}{}
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e == nil {
			continue
		}
		if n, ok := e.(*node); ok {
			e = n.e // a node of a flattened tree: itself, without children
			if k := nodeKey(e); k != nil {
				if _, ok := seen[k]; ok {
					continue
				}
				seen[k] = struct{}{}
			}
			if match(e) {
				return true
			}
			continue
		}
		if k := nodeKey(e); k != nil {
			if _, ok := seen[k]; ok {
				continue
			}
			seen[k] = struct{}{}
		}
		if match(e) {
			return true
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, u.Unwrap())
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			for i := len(errs) - 1; i >= 0; i-- { // the first child is visited first
				stack = append(stack, errs[i])
			}
		}
	}
	return false
}

// Is reports whether an error of err's tree matches target as errors.Is
// matches: equal to it, or its Is method says so. Unlike errors.Is it ends
// on a cyclic tree.
func Is(err, target error) bool {
	return Walk(err, func(e error) bool { return IsNode(e, target) })
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
	ok := Walk(err, func(e error) bool { return asNode(e, &found) })
	return found, ok
}

// asNode is errors.As for e itself: e is assignable to *target's type, or
// e's As method takes target.
func asNode(e error, target any) bool {
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
// errors.Join's Error) would not end.
func Cyclic(err error) bool {
	type frame struct {
		key  any
		e    error
		exit bool
	}
	stack := []frame{{e: err}}
	onPath := map[any]bool{}
	done := map[any]bool{}
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
		k := nodeKey(f.e)
		if k != nil {
			if onPath[k] {
				return true
			}
			if done[k] {
				continue
			}
			onPath[k] = true
			stack = append(stack, frame{key: k, exit: true})
		}
		switch u := f.e.(type) {
		case interface{ Unwrap() error }:
			stack = append(stack, frame{e: u.Unwrap()})
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			for i := len(errs) - 1; i >= 0; i-- {
				stack = append(stack, frame{e: errs[i]})
			}
		}
	}
	return false
}

// Acyclic returns err itself when its tree has no cycle; otherwise an error
// with err's message whose tree is flat: its children are each error of
// err's tree once, in the order errors.Is would first meet them, each
// standing for that error alone (its message, its Is and As methods, what
// it is for errors.As; its Unwrap dropped). errors.Is, errors.As and Walk
// answer for it as they would for err, and end. A cyclic error is a bug in
// the code that made it; the runtime flattens the errors its callers' code
// returns (an effect's, a query's) before anything walks them. Err itself
// when one of its methods panics: whoever reads it next does so under
// recover.
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
	if !Cyclic(err) {
		return err
	}
	f := &flat{err: err}
	Walk(err, func(e error) bool {
		f.nodes = append(f.nodes, &node{e})
		return false
	})
	return f
}

// flat is a cyclic error made walkable: see Acyclic.
type flat struct {
	err   error
	nodes []error
}

func (f *flat) Error() string   { return f.err.Error() }
func (f *flat) Unwrap() []error { return f.nodes }

// node is one error of a flattened tree, without its children.
type node struct{ e error }

func (n *node) Error() string        { return n.e.Error() }
func (n *node) Is(target error) bool { return IsNode(n.e, target) }
func (n *node) As(target any) bool   { return asNode(n.e, target) }
func (n *node) Timeout() bool        { t, ok := n.e.(interface{ Timeout() bool }); return ok && t.Timeout() }
func (n *node) Temporary() bool {
	t, ok := n.e.(interface{ Temporary() bool })
	return ok && t.Temporary()
}

// refKey is the identity of an error that is a reference (a pointer, a
// map, a slice...) or holds references: its type and their addresses.
type refKey struct {
	t    reflect.Type
	refs string
}

// nodeKey returns a map key that is the same for an error met twice in a
// tree: the error itself when it is comparable, else its type and the
// addresses it holds (a cycle can only run through references). Nil for
// a value that holds none, which cannot be part of a cycle.
func nodeKey(e error) any {
	v := reflect.ValueOf(e)
	if v.Comparable() {
		return e
	}
	var refs []byte
	collectRefs(v, &refs)
	if len(refs) == 0 {
		return nil
	}
	return refKey{v.Type(), string(refs)}
}

// collectRefs appends the addresses (and slice lengths) that v holds at
// its top level and in its nested structs, arrays and interfaces.
func collectRefs(v reflect.Value, out *[]byte) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Pointer()))
	case reflect.Slice:
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Pointer()))
		*out = binary.LittleEndian.AppendUint64(*out, uint64(v.Len()))
	case reflect.Interface:
		if !v.IsNil() {
			collectRefs(v.Elem(), out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			collectRefs(v.Field(i), out)
		}
	case reflect.Array:
		for i := range v.Len() {
			collectRefs(v.Index(i), out)
		}
	}
}
