package facts

import (
	"go/token"
	"go/types"
	"regexp"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

var (
	reStateWord   = regexp.MustCompile(`(?i)(^|[^a-z])(state|status)([^a-z]|$)|^(state|status)`)
	reStateField  = regexp.MustCompile(`(?i)^\w*(state|status)$`)
	reReversal    = regexp.MustCompile(`(?i)refund|revers(al|e|ed)|chargeback|compensat`)
	reReversalSQL = regexp.MustCompile(`(?i)'(refund|reversal|chargeback)'`)
	reReversalVal = regexp.MustCompile(`(?i)^(refund|reversal|chargeback)$`)
	reKindField   = regexp.MustCompile(`(?i)type|kind|state|status|reason|category`)
	// ORM methods that write a row: gorm, pop, bun query builders (their
	// Model/Set/Value carry the values), ent builders' Save/Exec.
	ormRowWrites = map[string]bool{
		"Update": true, "Updates": true, "UpdateColumn": true, "UpdateColumns": true, "Save": true,
		"Create": true, "CreateInBatches": true, "FirstOrCreate": true, "Model": true, "Set": true, "Value": true,
		"ValidateAndCreate": true, "ValidateAndSave": true, "ValidateAndUpdate": true, "Insert": true, "Upsert": true,
	}
)

// ormPkg reports whether fn is a method of gorm, pop or bun.
func ormPkg(fn *types.Func) bool {
	p, _ := rulekit.RecvNamed(fn)
	return p == pkgGorm || p == pkgBun || isPop(p)
}

// OrmFailWrite describes c when it is an ORM write of a failed-like state
// to a state/status field or column ("writes a FAILED status") or an
// insert of a refund or reversal entry ("inserts a refund or reversal
// entry"), or "".
func (r *Result) OrmFailWrite(c *ssa.CallCommon) string {
	fo := CalleeObj(c)
	if fo == nil || !ormPkg(fo) || !ormRowWrites[fo.Name()] {
		return ""
	}
	args := flatArgs(c)
	if !c.IsInvoke() && len(args) > 0 {
		args = args[1:] // the receiver
	}
	// tx.Model(p).Update("status", "FAILED"); q.Set("state = ?", "failed")
	stateNamed, failed := false, false
	for _, a := range args {
		if s, ok := ConstString(unwrap(a)); ok {
			stateNamed = stateNamed || reStateWord.MatchString(s)
			failed = failed || reFailed.MatchString(s)
		}
	}
	if stateNamed && failed {
		return "writes a FAILED status"
	}
	for _, a := range args {
		base := unwrap(a)
		// Updates(map[string]any{"State": "FAILED"})
		if mm, ok := base.(*ssa.MakeMap); ok {
			for _, ref := range *mm.Referrers() {
				if mu, ok := ref.(*ssa.MapUpdate); ok && mu.Map == mm {
					k, _ := ConstString(unwrap(mu.Key))
					if reStateWord.MatchString(k) && isFailedConst(unwrap(mu.Value)) {
						return "writes a FAILED status"
					}
				}
			}
		}
		// invoice.State = "error"; ...Model(invoice); Create(&Entry{Kind: "reversal"})
		if what := fieldWrites(base, fo.Name()); what != "" {
			return what
		}
	}
	return ""
}

// fieldWrites looks at the stores into the fields of the struct base points
// to: a state/status field set to a failed-like constant, or (for an
// insert) a refund/reversal type or kind.
func fieldWrites(base ssa.Value, method string) string {
	if _, ok := base.Type().Underlying().(*types.Pointer); !ok {
		return ""
	}
	insert := method == "Create" || method == "Insert" || method == "Model" || method == "ValidateAndCreate" || method == "CreateInBatches"
	if insert {
		if _, n := rulekit.NamedOf(base.Type()); reReversal.MatchString(n) {
			return "inserts a refund or reversal entry"
		}
	}
	var found string
	visit := func(refs *[]ssa.Instruction) {
		for _, ref := range *refs {
			fa, ok := ref.(*ssa.FieldAddr)
			if !ok || fa.X != base {
				continue
			}
			field := fieldName(fa.X.Type(), fa.Field)
			for _, r2 := range *fa.Referrers() {
				st, ok := r2.(*ssa.Store)
				if !ok || st.Addr != fa {
					continue
				}
				s, isConst := ConstString(unwrap(st.Val))
				if !isConst {
					continue
				}
				if reStateField.MatchString(field) && reFailed.MatchString(s) {
					found = "writes a FAILED status"
				}
				if insert && found == "" && reReversal.MatchString(s) && reKindField.MatchString(field) {
					found = "inserts a refund or reversal entry"
				}
			}
		}
	}
	if refs := base.Referrers(); refs != nil {
		visit(refs)
	}
	return found
}

// sqlReversal: an INSERT of a refund or reversal entry.
func sqlReversal(q string, args []ssa.Value) bool {
	m := reInsert.FindStringSubmatch(q)
	if m == nil {
		return false
	}
	if reReversal.MatchString(m[1]) || reReversalSQL.MatchString(q) {
		return true
	}
	for _, a := range args {
		if s, ok := ConstString(unwrap(a)); ok && reReversalVal.MatchString(s) {
			return true
		}
	}
	return false
}

var (
	genericDel   = regexp.MustCompile(`^(Del|Delete\w*|Remove\w*|Unlink|Destroy|Forget|Purge|Evict|Clear\w*|Expire)$`)
	genericCheck = regexp.MustCompile(`^(Get\w*|Exists|Has\w*|Find\w*|First|Take|Load\w*|Lookup\w*|Fetch\w*|Seen|IsProcessed|Contains|Check\w*)$`)
	genericClaim = regexp.MustCompile(`^(SetNX|SetNx|SetIfAbsent|PutIfAbsent|Claim\w*|Acquire\w*|TryLock|Lock\w*|Reserve\w*|Create\w*|Insert\w*|FirstOrCreate|Begin\w*)$`)
	// names of helpers that delete what their name says
	reDeleteName = regexp.MustCompile(`(?i)^(del|delete|remove|release|clear|drop|purge|evict|forget|unlock|free)`)
	genericWrite = regexp.MustCompile(`^(Set\w*|Put\w*|Save\w*|Store\w*|Mark\w*|Update\w*|Upsert\w*|Complete\w*|Finish\w*|Record\w*)$`)
)

// strongTokenWords: the words say idempotency, idem, dedup or nonce.
// Repositories and ORM models named only "token" are mostly one-time,
// refresh or session tokens, so a plain "token" is not enough here.
func strongTokenWords(ws []string) bool {
	for _, w := range ws {
		if reStrongTok.MatchString(w) && !reAuthTok.MatchString(w) {
			return true
		}
	}
	return false
}

// tokenArgs reports whether a call's receiver-less arguments, or the
// method's own name, name an idempotency token: the words of the key
// (constants, parameter, field and helper names) and the type names of
// model arguments (&IdempotencyKey{}).
func tokenArgs(fo *types.Func, c *ssa.CallCommon) bool {
	if strongTokenWords([]string{fo.Name()}) {
		return true
	}
	args := flatArgs(c)
	if !c.IsInvoke() && len(args) > 0 {
		args = args[1:]
	}
	var ws []string
	for _, a := range args {
		if isContext(a.Type()) {
			continue
		}
		words(a, 0, &ws)
		t := unwrap(a).Type()
		if _, n := rulekit.NamedOf(t); n != "" {
			ws = append(ws, n)
		}
	}
	if strongTokenWords(ws) {
		return true
	}
	// bun: db.NewDelete().Model((*IdempotencyKey)(nil)): the receiver
	// says which table.
	if !c.IsInvoke() && len(c.Args) > 0 {
		if call, ok := unwrap(c.Args[0]).(*ssa.Call); ok {
			if inner := CalleeObj(&call.Call); inner != nil && inner.Name() == "Model" {
				return tokenArgs(inner, &call.Call)
			}
		}
	}
	return false
}

// GenericTokenOp classifies a call that is neither a go-redis command nor
// SQL text on an idempotency token: "delete", "check", "claim", "write" or
// "". It covers repository interfaces (repo.Del(ctx, idemKey)), ORMs
// (tx.Delete(&IdempotencyKey{}), db.First(&rec) on an IdempotencyRecord)
// and functions listed in -tokendels.
func (r *Result) GenericTokenOp(c *ssa.CallCommon) string {
	fo := CalleeObj(c)
	if fo == nil || isRedis(fo) {
		return ""
	}
	if r.listed(fo, r.cfg.TokenDels) {
		return "delete"
	}
	sig := fo.Type().(*types.Signature)
	if sig.Recv() == nil {
		return "" // helpers are summarized through facts
	}
	if _, ok := r.SQLOf(c); ok {
		return ""
	}
	n := fo.Name()
	var op string
	switch {
	case genericDel.MatchString(n):
		op = "delete"
	case genericClaim.MatchString(n):
		op = "claim"
	case genericCheck.MatchString(n):
		op = "check"
	case genericWrite.MatchString(n):
		op = "write"
	default:
		return ""
	}
	if !tokenArgs(fo, c) && !r.builtKey(c) {
		return ""
	}
	// a method on a concrete type of the analyzed module is summarized
	// from its body; only interfaces and libraries are taken by name
	if !c.IsInvoke() {
		if sf := StaticFn(c); sf != nil && r.local(sf) != nil {
			return ""
		}
		if !ormPkg(fo) && rulekit.PkgPath(fo) != pkgSqlx {
			return ""
		}
	}
	return op
}

// reQuery: names of calls that ask the downstream what happened.
var reQuery = regexp.MustCompile(`^(?i:get|query|fetch|lookup|find|retrieve|check|inquire|describe|poll|verify|reconcile|confirm)\w*(Status|State|Payment|Charge|Transfer|Order|Intent|Transaction|Invoice|Result|Outcome|Operation)\w*$|^Status$`)

// IsDownstreamQuery reports whether c asks the remote side whether an
// earlier call happened (a network call named like GetPaymentStatus,
// LookupInvoice, QueryOrder): a failure action after it is informed.
func (r *Result) IsDownstreamQuery(c *ssa.CallCommon) bool {
	fo := CalleeObj(c)
	if fo == nil || !reQuery.MatchString(fo.Name()) {
		return false
	}
	if c.IsInvoke() {
		return true // an interface to the downstream: its name says what it asks
	}
	return r.NetCall(c) != nil
}

// reCASWhere: an UPDATE whose WHERE compares a state, status, version or
// lease column: a compare-and-set when its rows affected are checked.
var reCASWhere = regexp.MustCompile(`(?is)\bwhere\b.*\b\w*(state|status|version|lease|owner)\w*\s*=`)

// CASClaim reports whether call is a database compare-and-set whose count
// is read: UPDATE .. WHERE id = $1 AND status = 'AWAITING' followed by a
// RowsAffected() of its result. Only one of concurrent duplicates sees a
// row change, so it is an atomic claim of whatever row it moves on, even
// when the token itself (a nonce) was read only to find that row.
func (r *Result) CASClaim(call *ssa.Call) bool {
	q, ok := r.SQLOf(&call.Call)
	if !ok || !reUpdate.MatchString(q) || !reCASWhere.MatchString(q) {
		return false
	}
	var result ssa.Value = call
	if call.Call.Signature().Results().Len() > 1 {
		result = nil
		for _, ref := range *call.Referrers() {
			if e, ok := ref.(*ssa.Extract); ok && e.Index == 0 {
				result = e
			}
		}
	}
	if result == nil {
		return false
	}
	for _, ref := range *result.Referrers() {
		ci, ok := ref.(ssa.CallInstruction)
		if !ok {
			continue
		}
		c := ci.Common()
		if fn := CalleeObj(c); fn != nil && fn.Name() == "RowsAffected" && (c.Value == result || len(c.Args) > 0 && c.Args[0] == result) {
			return true
		}
	}
	return false
}

// FirestoreFailWrite describes c when it is a Firestore write of a
// failed-like state to a state/status field: DocumentRef, Transaction,
// WriteBatch or BulkWriter Update with []firestore.Update{{Path: "Status",
// Value: SyncFailed}}, or Set with map[string]any{"status": "failed"}.
func FirestoreFailWrite(c *ssa.CallCommon) string {
	fo := CalleeObj(c)
	if fo == nil || rulekit.PkgPath(fo) != pkgFirestore || fo.Name() != "Update" && fo.Name() != "Set" {
		return ""
	}
	for _, a := range c.Args {
		switch base := unwrap(a).(type) {
		case *ssa.MakeMap:
			for _, ref := range *base.Referrers() {
				if mu, ok := ref.(*ssa.MapUpdate); ok && mu.Map == base {
					k, _ := ConstString(unwrap(mu.Key))
					if reStateWord.MatchString(k) && isFailedConst(unwrap(mu.Value)) {
						return "writes a FAILED status"
					}
				}
			}
		case *ssa.Slice:
			al, ok := base.X.(*ssa.Alloc)
			if !ok {
				continue
			}
			for _, ref := range *al.Referrers() {
				ia, ok := ref.(*ssa.IndexAddr)
				if !ok {
					continue
				}
				// the fields stored into one firestore.Update element, in
				// place or into a literal copied there
				bases := []ssa.Value{ia}
				for _, r2 := range *ia.Referrers() {
					if st, ok := r2.(*ssa.Store); ok && st.Addr == ia {
						if u, ok := st.Val.(*ssa.UnOp); ok && u.Op == token.MUL {
							bases = append(bases, u.X)
						}
					}
				}
				var path string
				failed := false
				for _, b := range bases {
					for _, r2 := range *b.Referrers() {
						fa, ok := r2.(*ssa.FieldAddr)
						if !ok {
							continue
						}
						for _, r3 := range *fa.Referrers() {
							st, ok := r3.(*ssa.Store)
							if !ok || st.Addr != fa {
								continue
							}
							switch fieldName(fa.X.Type(), fa.Field) {
							case "Path":
								path, _ = ConstString(unwrap(st.Val))
							case "Value":
								failed = isFailedConst(unwrap(st.Val))
							}
						}
					}
				}
				if failed && reStateWord.MatchString(path) {
					return "writes a FAILED status"
				}
			}
		}
	}
	return ""
}
