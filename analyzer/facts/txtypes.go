package facts

import (
	"go/types"
	"strings"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// IsTxType reports whether a value of type t is a database transaction:
// *sql.Tx, pgx.Tx, a struct embedding one (sqlx.Tx, bun.Tx, pop.Tx, a
// service's own), *firestore.Transaction, a type listed in -txtypes, or a
// named type whose methods Commit and Rollback take at most a context and
// return only an error (ent's generated Tx, go-pg's Tx).
func (r *Result) IsTxType(t types.Type) bool {
	r.txMu.Lock()
	defer r.txMu.Unlock()
	if v, ok := r.txTypes[t]; ok {
		return v
	}
	v := txType(t, r.cfg.TxTypes, 0)
	if r.txTypes == nil {
		r.txTypes = map[types.Type]bool{}
	}
	r.txTypes[t] = v
	return v
}

// IsTxType is [Result.IsTxType] with no configured types.
func IsTxType(t types.Type) bool { return txType(t, nil, 0) }

func txType(t types.Type, extra []string, depth int) bool {
	if depth > 3 || t == nil {
		return false
	}
	p, n := rulekit.NamedOf(t)
	if p == "" {
		return false
	}
	switch {
	case n == "Tx" && (p == pkgSQL || p == pkgPgx):
		return true
	case n == "Transaction" && p == pkgFirestore:
		return true
	}
	for _, e := range extra {
		if normName(e) == p+"."+n {
			return true
		}
	}
	u := t
	if ptr, ok := u.(*types.Pointer); ok {
		u = ptr.Elem()
	}
	if st, ok := u.Underlying().(*types.Struct); ok {
		for i := 0; i < st.NumFields(); i++ {
			if f := st.Field(i); f.Embedded() && txType(f.Type(), extra, depth+1) {
				return true
			}
		}
	}
	return commitsAndRollsBack(t)
}

// commitsAndRollsBack: t (or *t) has methods Commit and Rollback that take
// nothing or a context and return only an error.
func commitsAndRollsBack(t types.Type) bool {
	if _, ok := t.(*types.Pointer); !ok {
		if _, isIface := t.Underlying().(*types.Interface); !isIface {
			t = types.NewPointer(t)
		}
	}
	ms := types.NewMethodSet(t)
	for _, name := range []string{"Commit", "Rollback"} {
		sel := ms.Lookup(nil, name)
		if sel == nil {
			return false
		}
		sig, _ := sel.Type().(*types.Signature)
		if sig == nil || sig.Results().Len() != 1 || !types.Identical(sig.Results().At(0).Type(), errorType) {
			return false
		}
		if sig.Params().Len() > 1 || sig.Params().Len() == 1 && !isContext(sig.Params().At(0).Type()) {
			return false
		}
	}
	return true
}

var errorType = types.Universe.Lookup("error").Type()

func isContext(t types.Type) bool {
	p, n := rulekit.NamedOf(t)
	return p == "context" && n == "Context"
}

// IsConnTx reports whether t is an ORM handle that is a connection or a
// transaction depending on how it was made: *gorm.DB and *pop.Connection.
// It is a transaction when it comes from a Begin call or is the parameter of
// a transaction callback.
func IsConnTx(t types.Type) bool {
	if _, isPtr := t.(*types.Pointer); !isPtr {
		return false
	}
	p, n := rulekit.NamedOf(t)
	return p == pkgGorm && n == "DB" || isPop(p) && n == "Connection"
}

func isPop(path string) bool {
	return path == "github.com/gobuffalo/pop" || strings.HasPrefix(path, "github.com/gobuffalo/pop/")
}

// TxOrConn reports whether t is a transaction or an ORM handle that may be one.
func (r *Result) TxOrConn(t types.Type) bool { return r.IsTxType(t) || IsConnTx(t) }

// IsBegin reports whether c begins a transaction: a call named Begin*,
// MustBegin*, NewTransaction* or Tx (ent) returning a transaction (or a
// gorm/pop handle), alone or with an error: sql and pgx Begin/BeginTx,
// sqlx Beginx/BeginTxx/MustBegin/MustBeginTx, bun BeginTx, gorm Begin, pop
// NewTransaction, ent Client.Tx/BeginTx; or a call of a begin helper, a
// function that returns one of those (in this package, through a BeginsTx
// fact in another, or every implementation of an interface method in the
// whole program).
func (r *Result) IsBegin(c *ssa.CallCommon) bool {
	fn := CalleeObj(c)
	if fn == nil {
		return false
	}
	if r.beginHelper(c, fn) {
		return true
	}
	n := fn.Name()
	if !(strings.HasPrefix(n, "Begin") || strings.HasPrefix(n, "begin") || strings.HasPrefix(n, "MustBegin") ||
		strings.HasPrefix(n, "NewTransaction") || n == "Tx") {
		return false
	}
	sig := c.Signature()
	if sig == nil || sig.Results().Len() < 1 || sig.Results().Len() > 2 {
		return false
	}
	if sig.Results().Len() == 2 && !types.Identical(sig.Results().At(1).Type(), errorType) {
		return false
	}
	return r.TxOrConn(sig.Results().At(0).Type())
}

// TxEnd returns the transaction value that c commits or rolls back.
func (r *Result) TxEnd(c *ssa.CallCommon) (ssa.Value, bool) {
	fn := CalleeObj(c)
	if fn == nil || (fn.Name() != "Commit" && fn.Name() != "Rollback") {
		return nil, false
	}
	var recv ssa.Value
	if c.IsInvoke() {
		recv = c.Value
	} else if len(c.Args) > 0 {
		recv = c.Args[0]
	}
	sig := fn.Type().(*types.Signature)
	if recv == nil || sig.Recv() == nil || !r.TxOrConn(recv.Type()) {
		return nil, false
	}
	for i := 0; i < sig.Params().Len(); i++ {
		if _, isFunc := sig.Params().At(i).Type().Underlying().(*types.Signature); isFunc {
			return nil, false // pop's Rollback(fn) runs fn in a transaction
		}
	}
	return recv, true
}

// IsRollback reports whether c is a Rollback of a transaction.
func (r *Result) IsRollback(c *ssa.CallCommon) bool {
	_, ok := r.TxEnd(c)
	return ok && CalleeObj(c).Name() == "Rollback"
}

// knownRunner reports whether fn runs its (last) func argument inside a
// transaction: pgx.BeginFunc/BeginTxFunc, gorm (*DB).Transaction, pop
// (*Connection).Transaction/Rollback, bun RunInTx (DB, Conn, Tx, IDB),
// firestore (*Client).RunTransaction.
func knownRunner(fn *types.Func) bool {
	p, _ := rulekit.RecvNamed(fn)
	if p == "" {
		p = rulekit.PkgPath(fn)
	}
	switch name := fn.Name(); {
	case p == pkgPgx:
		return name == "BeginFunc" || name == "BeginTxFunc"
	case p == pkgGorm:
		return name == "Transaction"
	case isPop(p):
		return name == "Transaction" || name == "Rollback"
	case p == pkgBun:
		return name == "RunInTx"
	case p == pkgFirestore:
		return name == "RunTransaction"
	}
	return false
}

// lastFuncArg returns the index of c's last func-typed argument, or -1.
func lastFuncArg(c *ssa.CallCommon) int {
	for i := len(c.Args) - 1; i >= 0; i-- {
		if _, ok := c.Args[i].Type().Underlying().(*types.Signature); ok {
			return i
		}
	}
	return -1
}

// takesTx reports whether t is a func type with a transaction parameter (a
// callback given a transaction is run inside it), or a func(.., *gorm.DB or
// *pop.Connection) error (a gorm scope returns a *gorm.DB instead).
func (r *Result) takesTx(t types.Type) bool {
	sig, ok := t.Underlying().(*types.Signature)
	if !ok {
		return false
	}
	errOnly := sig.Results().Len() == 1 && types.Identical(sig.Results().At(0).Type(), errorType)
	for i := 0; i < sig.Params().Len(); i++ {
		pt := sig.Params().At(i).Type()
		if r.IsTxType(pt) || errOnly && IsConnTx(pt) {
			return true
		}
	}
	return false
}
