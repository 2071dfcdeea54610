// Package serverkey defines an analyzer that reports an idempotency key
// minted on the server (uuid, time.Now, rand, a counter) where the
// client's key belongs: the key of runtime.Do, an idemgen key field, a
// dedup key, or an Idempotency-Key header set anew on every attempt of a
// retry loop.
package serverkey

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"regexp"
	"strings"

	"golang.org/x/tools/go/analysis"

	"github.com/idemkit/idem/analyzer/internal/directive"
	"github.com/idemkit/idem/analyzer/internal/idemops"
	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

// Name is the analyzer's name (part of idemlint's interface).
const Name = "serverkey"

// Doc documents the analyzer.
const Doc = `report idempotency keys minted on the server

A key made on the server with uuid.New/NewString, time.Now, math/rand or an
atomic counter is new on every call: when it becomes the key of
runtime.Do/pgstore.DoTx (runtime.Call.Key), the key field of an idemgen
//idem:op request, or the key of a dedup table or Redis dedup key, the
client's retry of the same request is never recognized as a duplicate and
the effect runs again. Set as the Idempotency-Key header of an outgoing
request inside a retry loop, a fresh key per attempt defeats the
downstream's deduplication: a retry after a timeout charges twice. Take the
key from the client's request (its Idempotency-Key header or a request
field); when this service is the client, mint the key once, before the
retry loop, persist it with the intent, and send the same key on every
attempt. A key minted once outside the retry loop and reused is correct and
is not reported.

Suppress with //idemlint:ignore serverkey <reason>.`

// Config configures a serverkey analyzer.
type Config struct{}

// Analyzer is the default serverkey analyzer.
var Analyzer = New(Config{})

// New returns a serverkey analyzer for cfg.
func New(Config) *analysis.Analyzer {
	return &analysis.Analyzer{
		Name:      Name,
		Doc:       Doc,
		URL:       "https://github.com/idemkit/idem/blob/main/docs/rules/serverkey.md",
		Requires:  []*analysis.Analyzer{idemops.Analyzer},
		FactTypes: []analysis.Fact{new(Fresh)},
		Run: func(pass *analysis.Pass) (any, error) {
			if rulekit.IsStd(pass.Fset, pass.Files) {
				return nil, nil
			}
			c := &checker{pass: pass, ops: pass.ResultOf[idemops.Analyzer].(*idemops.Result), rep: directive.New(pass, Name), helpers: map[*types.Func]string{}}
			c.findHelpers()
			c.run()
			return nil, nil
		},
	}
}

// Fresh marks a function that returns a freshly minted value (a key
// helper such as newIdempotencyKey() returning uuid.NewString()).
type Fresh struct{ What string }

func (*Fresh) AFact()           {}
func (f *Fresh) String() string { return "fresh(" + f.What + ")" }

type checker struct {
	pass    *analysis.Pass
	ops     *idemops.Result
	rep     *directive.Reporter
	helpers map[*types.Func]string // functions of this package that return a fresh value
	body    *ast.BlockStmt         // of the function declaration being checked
}

const (
	pkgRuntime = "github.com/idemkit/idem/runtime"
	pkgPgstore = "github.com/idemkit/idem/runtime/pgstore"
)

// mint is where a fresh value is made.
type mint struct {
	call *ast.CallExpr
	what string
}

var (
	reHeader    = regexp.MustCompile(`(?i)^(x-)?idempotency[-_]?key$`)
	reRetryName = regexp.MustCompile(`(?i)retry|backoff|attempt`)
	reUUIDPkg   = regexp.MustCompile(`^github\.com/(google/uuid|gofrs/uuid(/v\d+)?|satori/go\.uuid)$`)
	reIDPkg     = regexp.MustCompile(`^github\.com/(oklog/ulid(/v\d+)?|rs/xid|segmentio/ksuid|lithammer/shortuuid(/v\d+)?|bwmarrin/snowflake|sony/sonyflake|teris-io/shortid)$`)
)

// minted returns the fresh-value call that e is (or contains).
func (c *checker) mintCall(call *ast.CallExpr) *mint {
	fn := rulekit.Callee(c.pass.TypesInfo, call)
	if fn == nil {
		return nil
	}
	if m := builtinMint(call, fn); m != nil {
		return m
	}
	if m := clientMint(call, fn); m != nil {
		return m
	}
	if what, ok := c.helpers[fn]; ok {
		return &mint{call, rulekit.ShortName(fn) + "() (" + what + ")"}
	}
	var f Fresh
	if fn.Pkg() != c.pass.Pkg && c.pass.ImportObjectFact(fn, &f) {
		return &mint{call, rulekit.ShortName(fn) + "() (" + f.What + ")"}
	}
	return nil
}

// builtinMint: the fresh-value functions known by name.
func builtinMint(call *ast.CallExpr, fn *types.Func) *mint {
	p := rulekit.PkgPath(fn)
	switch {
	case reUUIDPkg.MatchString(p) && (strings.HasPrefix(fn.Name(), "New") || fn.Name() == "Must"):
		return &mint{call, rulekit.ShortName(fn) + "()"}
	case reIDPkg.MatchString(p) && (strings.HasPrefix(fn.Name(), "New") || fn.Name() == "Make" || fn.Name() == "MustNew" || fn.Name() == "Generate" || fn.Name() == "NextID" || fn.Name() == "Generate"):
		return &mint{call, rulekit.ShortName(fn) + "()"}
	case p == "math/rand" || p == "math/rand/v2":
		if bounded(fn.Name()) {
			return nil
		}
		return &mint{call, rulekit.ShortName(fn) + "()"}
	case p == "crypto/rand" && (fn.Name() == "Text" || fn.Name() == "Int"):
		return &mint{call, rulekit.ShortName(fn) + "()"}
	case p == "sync/atomic" && strings.HasPrefix(fn.Name(), "Add"):
		return &mint{call, "the counter " + rulekit.ShortName(fn) + "()"}
	case p == "time" && fn.Name() == "Now":
		return &mint{call, "time.Now()"}
	}
	return nil
}

// bounded: a math/rand call that picks among a few values (Intn(n),
// IntN(n), Perm, Shuffle) or makes a generator (New, NewPCG) rather than a
// fresh value.
func bounded(name string) bool {
	switch name {
	case "Perm", "Shuffle", "Seed", "New", "NewPCG", "NewSource", "NewChaCha8", "NewZipf":
		return true
	}
	return strings.HasSuffix(name, "n") || strings.HasSuffix(name, "N")
}

// coarse reports whether a time.Now() value is made coarse by the call
// it is the receiver of (Truncate, Format without seconds, Date ...): a
// value that stays the same for a window is a deliberate window key.
func (c *checker) coarse(sel *ast.SelectorExpr, call *ast.CallExpr) bool {
	switch sel.Sel.Name {
	case "Truncate", "Round", "Year", "Month", "Day", "YearDay", "Date", "Hour", "Minute", "Weekday", "ISOWeek":
		return true
	case "Format", "AppendFormat":
		if len(call.Args) > 0 {
			if s, _, ok := rulekit.ConstString(c.pass.TypesInfo, call.Args[len(call.Args)-1]); ok {
				return !strings.Contains(s, "05") && !strings.Contains(s, ".000") && !strings.Contains(s, ".999")
			}
		}
	}
	return false
}

// sameInstant are the time.Time methods that keep the instant (and its
// precision) and change only how it is shown.
var sameInstant = map[string]bool{"UTC": true, "Local": true, "In": true}

// coarsened reports whether the time.Now() call x, whose enclosing nodes
// are stack (innermost last), is made coarse before it is used:
// time.Now().Truncate(d), or through .UTC(), .Local() or .In(loc) first
// (time.Now().UTC().Format("2006-01-02")).
func (c *checker) coarsened(stack []ast.Node, x ast.Expr) bool {
	for i := len(stack) - 1; i >= 1; i -= 2 {
		sel, ok := stack[i].(*ast.SelectorExpr)
		if !ok || sel.X != x {
			return false
		}
		outer, ok := stack[i-1].(*ast.CallExpr)
		if !ok || outer.Fun != sel {
			return false
		}
		if c.coarse(sel, outer) {
			return true
		}
		if !sameInstant[sel.Sel.Name] {
			return false
		}
		x = outer
	}
	return false
}

// fresh returns the fresh value e carries: a mint call in e, or in what is
// assigned to a local variable e reads (in the function being checked).
func (c *checker) fresh(e ast.Expr) *mint {
	return c.freshDepth(e, map[types.Object]bool{}, 0)
}

func (c *checker) freshDepth(e ast.Expr, seen map[types.Object]bool, depth int) *mint {
	if depth > 4 || e == nil {
		return nil
	}
	info := c.pass.TypesInfo
	var found *mint
	var stack []ast.Node
	ast.Inspect(e, func(n ast.Node) bool {
		if found != nil {
			return false
		}
		if n == nil {
			stack = stack[:len(stack)-1]
			return true
		}
		switch x := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if fn := rulekit.Callee(info, x); fn != nil && (rulekit.PkgPath(fn) == "math/rand" || rulekit.PkgPath(fn) == "math/rand/v2") && bounded(fn.Name()) {
				return false // a pick among n values, whatever the generator's seed
			}
			if m := c.mintCall(x); m != nil {
				if m.what == "time.Now()" && c.coarsened(stack, x) {
					return false
				}
				found = m
				return false
			}
		case *ast.Ident:
			v, ok := info.Uses[x].(*types.Var)
			if ok && !seen[v] && v.Pkg() == c.pass.Pkg && v.Parent() != c.pass.Pkg.Scope() && c.body != nil {
				seen[v] = true
				for _, rhs := range rulekit.Assigned(info, c.body, v) {
					if m := c.freshDepth(rhs, seen, depth+1); m != nil {
						found = m
						return false
					}
				}
			}
		}
		stack = append(stack, n)
		return true
	})
	return found
}

// findHelpers finds the functions of the package whose first result, a
// string, number or byte array (a uuid), is freshly minted on every return,
// and exports a Fresh fact for each.
func (c *checker) findHelpers() {
	rulekit.Fixpoint(c.pass.TypesInfo, c.pass.Files, 4, func(fd *ast.FuncDecl, fn *types.Func) bool {
		if c.helpers[fn] != "" || !keyResult(fn) {
			return false
		}
		c.body = fd.Body
		what := c.freshReturns(fd.Body)
		if what == "" {
			return false
		}
		c.helpers[fn] = what
		return true
	})
	for fn, what := range c.helpers {
		c.pass.ExportObjectFact(fn, &Fresh{What: what})
	}
}

// keyResult: the first result can be a key (string, number, byte array).
func keyResult(fn *types.Func) bool {
	res := fn.Type().(*types.Signature).Results()
	if res.Len() == 0 {
		return false
	}
	switch t := res.At(0).Type().Underlying().(type) {
	case *types.Basic:
		return t.Info()&(types.IsString|types.IsInteger) != 0
	case *types.Array:
		b, ok := t.Elem().Underlying().(*types.Basic)
		return ok && b.Kind() == types.Byte
	}
	return false
}

// freshReturns returns what every return of body mints in its first
// result, or "" when some return does not mint.
func (c *checker) freshReturns(body *ast.BlockStmt) string {
	what, all := "", true
	ast.Inspect(body, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.ReturnStmt:
			if len(x.Results) == 0 {
				all = false
				return false
			}
			w := c.freshKey(x.Results[0], 0)
			if w == "" {
				all = false
				return false
			}
			what = w
		}
		return all
	})
	if !all {
		return ""
	}
	return what
}

// freshKey returns what e mints when e is a fresh value passed only
// through key building (concatenation, fmt.Sprint*, strconv, strings,
// encodings, String/Format methods, conversions), or "".
func (c *checker) freshKey(e ast.Expr, depth int) string {
	if depth > 4 {
		return ""
	}
	info := c.pass.TypesInfo
	switch x := ast.Unparen(e).(type) {
	case *ast.CallExpr:
		if m := c.mintCall(x); m != nil {
			return m.what
		}
		if tv, ok := info.Types[x.Fun]; ok && tv.IsType() && len(x.Args) == 1 {
			return c.freshKey(x.Args[0], depth+1) // a conversion
		}
		fn := rulekit.Callee(info, x)
		if fn == nil {
			return ""
		}
		switch p := rulekit.PkgPath(fn); {
		case p == "fmt" && strings.HasPrefix(fn.Name(), "Sprint"), p == "strconv", p == "strings",
			p == "encoding/hex" || p == "encoding/base64" || p == "encoding/base32":
			for _, a := range x.Args {
				if w := c.freshKey(a, depth+1); w != "" {
					return w
				}
			}
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && p != "fmt" && p != "strconv" && p != "strings" {
				return c.freshKey(sel.X, depth+1) // base64.URLEncoding.EncodeToString(..) receiver is not fresh
			}
		default:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && (fn.Name() == "String" || fn.Name() == "Format" || strings.HasPrefix(fn.Name(), "Unix") ||
				rulekit.PkgPath(fn) == "time" && sameInstant[fn.Name()]) && !c.coarse(sel, x) {
				return c.freshKey(sel.X, depth+1)
			}
		}
	case *ast.BinaryExpr:
		if x.Op == token.ADD {
			if w := c.freshKey(x.X, depth+1); w != "" {
				return w
			}
			return c.freshKey(x.Y, depth+1)
		}
	case *ast.Ident:
		if v, ok := info.Uses[x].(*types.Var); ok && v.Pkg() == c.pass.Pkg && v.Parent() != c.pass.Pkg.Scope() {
			for _, rhs := range rulekit.Assigned(info, c.body, v) {
				if w := c.freshKey(rhs, depth+1); w != "" {
					return w
				}
			}
		}
	}
	return ""
}

func (c *checker) run() {
	for _, f := range c.pass.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			c.body = fd.Body
			rulekit.WalkStack([]*ast.File{{Name: f.Name, Decls: []ast.Decl{fd}}}, func(n ast.Node, stack rulekit.Stack) {
				c.node(n, stack)
			})
		}
	}
}

func (c *checker) node(n ast.Node, stack rulekit.Stack) {
	info := c.pass.TypesInfo
	switch x := n.(type) {
	case *ast.CompositeLit:
		t := info.TypeOf(x)
		if t == nil {
			return
		}
		for _, el := range x.Elts {
			kv, ok := el.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			id, ok := kv.Key.(*ast.Ident)
			if !ok {
				continue
			}
			c.field(t, []string{id.Name}, kv.Value, kv, stack)
		}
	case *ast.AssignStmt:
		if len(x.Lhs) != len(x.Rhs) {
			return
		}
		for i, l := range x.Lhs {
			switch l := l.(type) {
			case *ast.SelectorExpr:
				// req.Key = ..., req.Meta.Key = ...
				var path []string
				var root ast.Expr = l
				for {
					s, ok := root.(*ast.SelectorExpr)
					if !ok {
						break
					}
					path = append([]string{s.Sel.Name}, path...)
					root = s.X
				}
				if t := info.TypeOf(root); t != nil {
					c.field(t, path, x.Rhs[i], x, stack)
				}
			case *ast.IndexExpr:
				// req.Header["Idempotency-Key"] = []string{...}
				if isHeader(info.TypeOf(l.X)) {
					if s, _, ok := rulekit.ConstString(info, l.Index); ok && reHeader.MatchString(s) {
						c.header(x, x.Rhs[i], stack)
					}
				}
			}
		}
	case *ast.CallExpr:
		c.call(x, stack)
	}
}

func isHeader(t types.Type) bool {
	p, n := rulekit.NamedOf(t)
	return p == "net/http" && n == "Header"
}

// field checks a key field being set: runtime.Call.Key, pgstore.TxCall.Key,
// or the key=req.Field of an idemgen op.
func (c *checker) field(t types.Type, path []string, value ast.Expr, at ast.Node, stack rulekit.Stack) {
	p, n := rulekit.NamedOf(t)
	if p == "" {
		return
	}
	if len(path) == 1 && path[0] == "Key" && (p == pkgRuntime && n == "Call" || p == pkgPgstore && n == "TxCall") {
		m := c.fresh(value)
		if m == nil || c.reusedAcrossLoop(m, at, stack) {
			return
		}
		c.report(m, at, fmt.Sprintf("the idempotency key of this %s.%s is minted on the server (%s): every call gets a new key, so the client's retry of the same request is never recognized as a duplicate and the effect runs again; "+
			"take the key from the client's request (its Idempotency-Key header or a request field) and pass it as Key", path0(p), n, c.minted(m)))
		return
	}
	for _, s := range c.ops.Services {
		for _, op := range s.Ops {
			if op.ReqPkg != p || op.ReqType != n || strings.Join(op.KeyPath, ".") != strings.Join(path, ".") {
				continue
			}
			m := c.fresh(value)
			if m == nil || c.reusedAcrossLoop(m, at, stack) {
				return
			}
			c.report(m, at, fmt.Sprintf("%s.%s, the idempotency key of the //idem:op %s.%s (key=%s), is minted on the server (%s): every call gets a new key, so a retry of the same request runs the op again instead of replaying its outcome; "+
				"carry the client's key into %s (or derive it from the request's own identity, such as the order number) and mint nothing here",
				n, strings.Join(path, "."), s.Name, op.Method, op.Key, c.minted(m), strings.Join(path, ".")))
			return
		}
	}
	if len(path) == 1 && reMerchantRef.MatchString(path[0]) && !sameRepo(p, c.pass.Pkg.Path()) {
		m := c.fresh(value)
		if m == nil || c.reusedAcrossLoop(m, at, stack) {
			return
		}
		c.report(m, at, merchantRefMsg(path0(p)+"."+n+"."+path[0], m))
		return
	}
	if len(path) == 1 && reKeyField.MatchString(path[0]) && sameRepo(p, c.pass.Pkg.Path()) {
		m := c.fresh(value)
		if m == nil || c.reusedAcrossLoop(m, at, stack) {
			return
		}
		c.report(m, at, fmt.Sprintf("%s.%s, the idempotency key of this service's own record, is minted on the server (%s): a duplicate of the request never finds the record made under the fresh key, so the deduplication never fires and the effect runs again; "+
			"store the key the client sent (its Idempotency-Key header) and refuse the request when it has none", n, path[0], c.minted(m)))
	}
}

// reMerchantRef names the field (or form parameter) of a downstream's
// request that the downstream deduplicates on: a payment provider's
// merchant order number (WeChat Pay's and Alipay's out_trade_no, Stripe's
// client_reference_id, Adyen's merchant reference).
var reMerchantRef = regexp.MustCompile(`(?i)^(out_?trade_?no|out_?refund_?no|out_?request_?no|out_?biz_?no|merchant_?(order|trade|transaction|request)_?(no|num|number|id|ref|reference)|merchant_?ref(erence)?|client_?reference_?id|partner_?(order|trade)_?(no|id))$`)

func merchantRefMsg(what string, m *mint) string {
	return fmt.Sprintf("%s, the merchant reference the provider deduplicates on, is minted on the server (%s) on every call: a retry of the same request sends a new reference, so the provider creates a second order (a second charge) instead of returning the first; "+
		"derive it from the request's own identity (the order number) or the client's idempotency key, and mint nothing per call", what, m.what)
}

// reKeyField names a field that holds an idempotency key.
var reKeyField = regexp.MustCompile(`(?i)^(idempotency_?key|idem_?key|dedup_?key)$`)

// sameRepo reports whether package paths a and b share their first three
// elements (github.com/org/repo): the service's own types, not an SDK's.
func sameRepo(a, b string) bool {
	x, y := strings.SplitN(a, "/", 4), strings.SplitN(b, "/", 4)
	if len(x) < 3 || len(y) < 3 {
		return len(x) == 1 && len(y) == 1 // GOPATH-style test packages
	}
	return x[0] == y[0] && x[1] == y[1] && x[2] == y[2]
}

func path0(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// call checks header Set/Add and dedup keys of go-redis and SQL.
func (c *checker) call(call *ast.CallExpr, stack rulekit.Stack) {
	info := c.pass.TypesInfo
	fn := rulekit.Callee(info, call)
	if fn == nil || c.clientKey(call, fn, stack) {
		return
	}
	if _, rn := rulekit.RecvNamed(fn); rn == "Header" && rulekit.PkgPath(fn) == "net/http" && (fn.Name() == "Set" || fn.Name() == "Add") && len(call.Args) == 2 {
		if s, _, ok := rulekit.ConstString(info, call.Args[0]); ok && reHeader.MatchString(s) {
			c.header(call, call.Args[1], stack)
		}
		return
	}
	if _, rn := rulekit.RecvNamed(fn); rn == "Values" && rulekit.PkgPath(fn) == "net/url" && (fn.Name() == "Set" || fn.Name() == "Add") && len(call.Args) == 2 {
		if s, _, ok := rulekit.ConstString(info, call.Args[0]); ok && reMerchantRef.MatchString(s) {
			if m := c.fresh(call.Args[1]); m != nil && !c.reusedAcrossLoop(m, call, stack) {
				c.report(m, call, merchantRefMsg("the "+s+" sent to the downstream", m))
			}
		}
		return
	}
	if rulekit.IsRedis(fn) && len(call.Args) >= 2 {
		switch fn.Name() {
		case "SetNX", "Set", "SetArgs", "SetEx", "Get", "Exists", "HSetNX", "HSet", "HGet", "Del", "Expire":
		default:
			return
		}
		key := call.Args[1]
		if !rulekit.TokenWords(rulekit.KeyWords(info, c.body, key)...) {
			return
		}
		m := c.fresh(key)
		if m == nil || c.reusedAcrossLoop(m, call, stack) {
			return
		}
		c.report(m, call, fmt.Sprintf("the dedup key of %s is built from %s, minted on the server: no duplicate ever finds it, so the deduplication never fires and the effect runs again; "+
			"build the key from the client's idempotency key or the message's own id (\"idem:\" + req.IdempotencyKey)", rulekit.ShortName(fn), c.minted(m)))
		return
	}
	if q, _, method, ok := rulekit.SQLCall(info, c.pass.Files, call); ok && strings.HasPrefix(method, "Exec") {
		col, arg := insertKey(q, call, info)
		if arg == nil {
			return
		}
		m := c.fresh(arg)
		if m == nil || c.reusedAcrossLoop(m, call, stack) {
			return
		}
		c.report(m, call, fmt.Sprintf("%s inserts %s, the key column of a dedup table, from %s, minted on the server: no duplicate ever conflicts with it, so the deduplication never fires; "+
			"insert the client's idempotency key (or the message's own id) instead", rulekit.ShortName(fn), col, c.minted(m)))
	}
}

var (
	reInsertCols = regexp.MustCompile(`(?is)^\s*insert\s+into\s+((?:"?\w+"?\.)?"?\w+"?)\s*\(([^)]*)\)\s*values\s*\(([^)]*)\)`)
	reKeyCol     = regexp.MustCompile(`(?i)^"?(idempotency_?key|idem_?key|dedup_?key|request_?id|nonce|key)"?$`)
	rePlace      = regexp.MustCompile(`^\$(\d+)$`)
)

// insertKey returns the key column of an INSERT into a dedup table and
// the argument bound to it.
func insertKey(q string, call *ast.CallExpr, info *types.Info) (string, ast.Expr) {
	m := reInsertCols.FindStringSubmatch(q)
	if m == nil || !rulekit.TokenWords(m[1]) {
		return "", nil
	}
	cols := strings.Split(m[2], ",")
	vals := strings.Split(m[3], ",")
	if len(cols) != len(vals) {
		return "", nil
	}
	// The SQL argument is the first string argument; binds follow it.
	first := -1
	for i, a := range call.Args {
		if _, _, ok := rulekit.ConstString(info, a); ok {
			first = i
			break
		}
	}
	if first < 0 {
		return "", nil
	}
	q2 := 0
	for i, col := range cols {
		v := strings.TrimSpace(vals[i])
		n := -1
		if pm := rePlace.FindStringSubmatch(v); pm != nil {
			fmt.Sscan(pm[1], &n)
		} else if v == "?" {
			q2++
			n = q2
		}
		if n > 0 && reKeyCol.MatchString(strings.TrimSpace(col)) && first+n < len(call.Args) {
			return strings.TrimSpace(col), call.Args[first+n]
		}
	}
	return "", nil
}

// loops returns the retry loops around the node at the top of stack,
// innermost first: for statements (not over a slice, map or channel, and
// not bounded by len) and function literals given to a retry helper.
func (c *checker) loops(stack rulekit.Stack) []ast.Node {
	info := c.pass.TypesInfo
	var out []ast.Node
	for i := len(stack) - 1; i >= 0; i-- {
		switch x := stack[i].(type) {
		case *ast.ForStmt:
			if x.Cond != nil && strings.Contains(types.ExprString(x.Cond), "len(") || indexes(info, x) {
				continue // a loop over the items of a collection
			}
			out = append(out, x)
		case *ast.RangeStmt:
			if t := info.TypeOf(x.X); t != nil {
				if b, ok := t.Underlying().(*types.Basic); ok && b.Info()&types.IsInteger != 0 {
					out = append(out, x)
				}
			}
		case *ast.FuncLit:
			if i > 0 {
				if call, ok := stack[i-1].(*ast.CallExpr); ok {
					if fn := rulekit.Callee(info, call); fn != nil && (reRetryName.MatchString(fn.Name()) || reRetryName.MatchString(rulekit.PkgPath(fn))) {
						out = append(out, x)
						continue
					}
				}
			}
			return out // a function literal run otherwise: its own scope
		}
	}
	return out
}

// indexes reports whether a for loop's variable indexes something in its
// body (items[i]): a loop over a collection, not a retry loop.
func indexes(info *types.Info, loop *ast.ForStmt) bool {
	init, ok := loop.Init.(*ast.AssignStmt)
	if !ok || len(init.Lhs) != 1 {
		return false
	}
	id, ok := init.Lhs[0].(*ast.Ident)
	if !ok {
		return false
	}
	v := info.ObjectOf(id)
	found := false
	ast.Inspect(loop.Body, func(n ast.Node) bool {
		if ix, ok := n.(*ast.IndexExpr); ok {
			if i, ok := ast.Unparen(ix.Index).(*ast.Ident); ok && info.Uses[i] == v {
				found = true
			}
		}
		return !found
	})
	return found
}

// reusedAcrossLoop: a retry loop around the sink does not hold the mint:
// the key was minted once and is reused on every attempt.
func (c *checker) reusedAcrossLoop(m *mint, at ast.Node, stack rulekit.Stack) bool {
	for _, l := range c.loops(stack) {
		if !(l.Pos() <= m.call.Pos() && m.call.End() <= l.End()) {
			return true
		}
	}
	return false
}

// header checks an Idempotency-Key header set from value: reported only
// inside a retry loop that also mints the value.
func (c *checker) header(at ast.Node, value ast.Expr, stack rulekit.Stack) {
	m := c.fresh(value)
	if m == nil {
		return
	}
	loops := c.loops(stack)
	if len(loops) == 0 {
		return // no retry loop: one key per operation, as it should be
	}
	if l := loops[0]; l.Pos() <= m.call.Pos() && m.call.End() <= l.End() {
		c.report(m, at, fmt.Sprintf("the Idempotency-Key header is set from %s inside a retry loop: each attempt sends a new key, so the downstream cannot tell the attempts apart and a retry after a timeout runs the effect twice; "+
			"mint the key once before the loop (or take the client's), persist it with the intent, and send the same key on every attempt", c.minted(m)), analysis.RelatedInformation{Pos: l.Pos(), Message: "the retry loop"})
	}
	// else: the innermost loop reuses a key minted outside it
}

// minted names a mint and its position for messages: "uuid.NewString() at
// pay.go:12:9".
func (c *checker) minted(m *mint) string {
	return m.what + " at " + c.rep.Posn(m.call.Pos())
}

func (c *checker) report(m *mint, at ast.Node, msg string, rel ...analysis.RelatedInformation) {
	related := append([]analysis.RelatedInformation{{Pos: m.call.Pos(), End: m.call.End(), Message: "minted here: " + m.what}}, rel...)
	if m.call.Pos() == at.Pos() {
		related[0].Pos = m.call.Lparen
	}
	c.rep.Report(analysis.Diagnostic{Pos: at.Pos(), End: at.End(), Message: msg, Related: related})
}
