package facts

import (
	"go/constant"
	"go/types"
	"regexp"
	"strings"

	"golang.org/x/tools/go/ssa"

	"github.com/idemkit/idem/analyzer/internal/rulekit"
)

const (
	pkgSQL       = "database/sql"
	pkgPgx       = "github.com/jackc/pgx/v5"
	pkgGRPC      = "google.golang.org/grpc"
	pkgCodes     = "google.golang.org/grpc/codes"
	pkgRedis     = "github.com/redis/go-redis/v9"
	pkgIdem      = "github.com/idemkit/idem"
	pkgGorm      = "gorm.io/gorm"
	pkgBun       = "github.com/uptrace/bun"
	pkgSqlx      = "github.com/jmoiron/sqlx"
	pkgFirestore = "cloud.google.com/go/firestore"
	codeDeadl    = 4  // codes.DeadlineExceeded
	codeUnav     = 14 // codes.Unavailable
)

// FuncName is the short display name of fn: "http.Get", "(*http.Client).Do",
// "(redis.Cmdable).Get", "pay.SendCharge".
func FuncName(fn *types.Func) string {
	sig, _ := fn.Type().(*types.Signature)
	if sig != nil && sig.Recv() != nil {
		return "(" + typeName(sig.Recv().Type(), false) + ")." + fn.Name()
	}
	if fn.Pkg() == nil {
		return fn.Name()
	}
	return fn.Pkg().Name() + "." + fn.Name()
}

// FullName is the path-qualified name of fn used by configuration:
// "net/http.Get", "(*net/http.Client).Do".
func FullName(fn *types.Func) string {
	sig, _ := fn.Type().(*types.Signature)
	if sig != nil && sig.Recv() != nil {
		return "(" + typeName(sig.Recv().Type(), true) + ")." + fn.Name()
	}
	if fn.Pkg() == nil {
		return fn.Name()
	}
	return fn.Pkg().Path() + "." + fn.Name()
}

func typeName(t types.Type, full bool) string {
	ptr := ""
	if p, ok := t.(*types.Pointer); ok {
		ptr = "*"
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		o := n.Obj()
		if o.Pkg() == nil {
			return ptr + o.Name()
		}
		if full {
			return ptr + o.Pkg().Path() + "." + o.Name()
		}
		return ptr + o.Pkg().Name() + "." + o.Name()
	}
	return ptr + t.String()
}

// normName makes "(*a/b.T).M", "(a/b.T).M" and "a/b.T.M" compare equal.
func normName(s string) string {
	return strings.NewReplacer("(", "", ")", "", "*", "").Replace(strings.TrimSpace(s))
}

// builtinNet reports whether fn is a known network I/O function.
func builtinNet(fn *types.Func) bool {
	name := fn.Name()
	rp, rn := rulekit.RecvNamed(fn)
	switch rulekit.PkgPath(fn) {
	case "net/http":
		if rp == "" {
			return name == "Get" || name == "Post" || name == "PostForm" || name == "Head"
		}
		switch rn {
		case "Client":
			return name == "Do" || name == "Get" || name == "Post" || name == "PostForm" || name == "Head"
		case "Transport", "RoundTripper":
			return name == "RoundTrip"
		}
	case "net":
		if rp == "" {
			return strings.HasPrefix(name, "Dial")
		}
		return rn == "Dialer" && strings.HasPrefix(name, "Dial")
	case "net/smtp":
		if rp == "" {
			return name == "SendMail" || name == "Dial"
		}
		return rn == "Client" && name != "Close"
	case "net/rpc":
		if rp == "" {
			return strings.HasPrefix(name, "Dial")
		}
		return rn == "Client" && (name == "Call" || name == "Go")
	case pkgGRPC:
		if name == "Invoke" || name == "NewStream" {
			return true
		}
	case pkgRedis:
		return redisNet(fn)
	}
	return hasCallOption(fn)
}

// hasCallOption: any function or method with a ...grpc.CallOption parameter
// (generated gRPC client stubs).
func hasCallOption(fn *types.Func) bool {
	sig, _ := fn.Type().(*types.Signature)
	if sig == nil || !sig.Variadic() {
		return false
	}
	last := sig.Params().At(sig.Params().Len() - 1).Type()
	if s, ok := last.(*types.Slice); ok {
		p, n := rulekit.NamedOf(s.Elem())
		return p == pkgGRPC && n == "CallOption"
	}
	return false
}

// redisReads are the go-redis commands that only read: their failure
// leaves nothing behind that a retry would repeat.
var redisReads = map[string]bool{
	"Get": true, "MGet": true, "GetRange": true, "StrLen": true, "Exists": true, "Type": true, "TTL": true, "PTTL": true,
	"HGet": true, "HGetAll": true, "HMGet": true, "HExists": true, "HKeys": true, "HVals": true, "HLen": true,
	"SMembers": true, "SIsMember": true, "SMIsMember": true, "SCard": true,
	"ZScore": true, "ZMScore": true, "ZRank": true, "ZCard": true, "ZCount": true, "ZRange": true, "ZRangeWithScores": true,
	"ZRangeByScore": true, "ZRevRange": true, "ZRevRangeByScore": true,
	"LRange": true, "LLen": true, "LIndex": true, "Keys": true, "Scan": true, "HScan": true, "SScan": true, "ZScan": true,
	"Ping": true,
}

func isRedis(fn *types.Func) bool { return rulekit.PkgPath(fn) == pkgRedis }

func redisNet(fn *types.Func) bool {
	if !isRedis(fn) {
		return false
	}
	_, rn := rulekit.RecvNamed(fn)
	if rn == "" {
		return false
	}
	name := fn.Name()
	if rn == "Pipeliner" || rn == "Pipeline" {
		return name == "Exec"
	}
	switch name {
	case "Pipelined", "TxPipelined", "Watch", "Do", "Process":
		return true
	}
	sig := fn.Type().(*types.Signature)
	if sig.Results().Len() == 0 {
		return false
	}
	p, n := rulekit.NamedOf(sig.Results().At(0).Type())
	return p == pkgRedis && strings.HasSuffix(n, "Cmd")
}

// redisCmd returns the go-redis command name of a call ("Del", "Get", ...)
// or "".
func redisCmd(c *ssa.CallCommon) string {
	fn := CalleeObj(c)
	if fn == nil || !redisNet(fn) {
		return ""
	}
	return fn.Name()
}

// CalleeObj returns the declared function or method called by c, if known:
// the interface method for invokes, the static callee's object otherwise
// (method values resolve to their method).
func CalleeObj(c *ssa.CallCommon) *types.Func {
	if c.IsInvoke() {
		return c.Method
	}
	if fn := c.StaticCallee(); fn != nil {
		if o := fn.Origin(); o != nil {
			fn = o
		}
		if f, ok := fn.Object().(*types.Func); ok {
			return f
		}
	}
	return nil
}

// StaticFn returns the SSA function statically called by c (generic origin).
func StaticFn(c *ssa.CallCommon) *ssa.Function {
	if c.IsInvoke() {
		return nil
	}
	fn := c.StaticCallee()
	if fn != nil && fn.Origin() != nil {
		fn = fn.Origin()
	}
	return fn
}

// ConstString returns the string value of v if it is a constant string or a
// concatenation of them.
func ConstString(v ssa.Value) (string, bool) {
	switch v := v.(type) {
	case *ssa.Const:
		if v.Value != nil && v.Value.Kind() == constant.String {
			return constant.StringVal(v.Value), true
		}
	case *ssa.BinOp:
		x, ok1 := ConstString(v.X)
		y, ok2 := ConstString(v.Y)
		if ok1 && ok2 {
			return x + y, true
		}
	case *ssa.MakeInterface:
		return ConstString(v.X)
	case *ssa.ChangeType:
		return ConstString(v.X)
	}
	return "", false
}

// sqlMethod: a method taking SQL text: Exec*, Query*, sqlx MustExec*,
// NamedExec*, NamedQuery*, Get*/Select*, pop RawQuery, gorm Raw.
func sqlMethod(fn *types.Func) bool {
	n := fn.Name()
	for _, p := range []string{"Exec", "Query", "MustExec", "NamedExec", "NamedQuery", "RawQuery"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	p, _ := rulekit.RecvNamed(fn)
	switch {
	case p == pkgGorm:
		return n == "Raw"
	case p == pkgSqlx:
		return strings.HasPrefix(n, "Get") || strings.HasPrefix(n, "Select")
	}
	return false
}

// SQLOf returns the SQL text of an Exec/Query-shaped call (see sqlMethod)
// whose first string argument the code determines (see [Result.StringOf]).
func (r *Result) SQLOf(c *ssa.CallCommon) (string, bool) {
	fn := CalleeObj(c)
	if fn == nil {
		return "", false
	}
	if !sqlMethod(fn) {
		return "", false
	}
	if rulekit.PkgPath(fn) == rulekit.PkgSquirrel { // b.RunWith(db).ExecContext(ctx)
		if c.IsInvoke() || len(c.Args) == 0 {
			return "", false
		}
		return r.squirrel(c.Args[0], 0)
	}
	args := c.Args
	for _, a := range args {
		if b, ok := a.Type().Underlying().(*types.Basic); ok && b.Kind() == types.String {
			return r.StringOf(a)
		}
	}
	return "", false
}

var (
	reDelete    = regexp.MustCompile(`(?is)^\s*delete\s+from\s+"?([\w.]+)"?`)
	reSelect    = regexp.MustCompile(`(?is)^\s*select\b.*?\bfrom\s+"?([\w.]+)"?`)
	reInsert    = regexp.MustCompile(`(?is)^\s*insert\s+into\s+"?([\w.]+)"?`)
	reUpdate    = regexp.MustCompile(`(?is)^\s*update\s+"?([\w.]+)"?`)
	reForUpdate = regexp.MustCompile(`(?i)\bfor\s+(no\s+key\s+)?update\b`)
	reStrongTok = regexp.MustCompile(`(?i)idempot|dedup|nonce|idem[_:.-]|idem(key|token|record)`)
	reWeakTok   = regexp.MustCompile(`(?i)token`)
	// words that make "token" an authentication token, not an idempotency token
	reAuthTok = regexp.MustCompile(`(?i)access|refresh|auth|oauth|session|jwt|bearer|api_?(key|token)|csrf|login|id_?token|one_?time|otp|confirm|recover|reset|invite|verif|magic|password|reauth|device|push|fcm|csrf`)
	// failed-like states: FAILED, failed, error, cancelled, reversed, refunded, ...
	reFailed  = regexp.MustCompile(`(?i)^(state_|status_)?(fail(ed|ure)?|errored|error|cancel+ed|reversed|refunded|declined|rejected|voided)$`)
	reFailSQL = regexp.MustCompile(`(?i)'(fail(ed|ure)?|errored|error|cancel+ed|reversed|refunded|declined|rejected|voided)'`)
)

func (r *Result) tokenTable(name string) bool {
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[i+1:]
	}
	for _, t := range r.cfg.TokenTables {
		if strings.EqualFold(t, name) {
			return true
		}
	}
	return tokenWords([]string{name})
}

// tokenWords: the words name an idempotency token: idempotency, idem,
// dedup or nonce, or "token" when nothing says it is an authentication
// token (access, refresh, session, jwt, ...).
func tokenWords(ws []string) bool {
	weak, auth := false, false
	for _, w := range ws {
		if reStrongTok.MatchString(w) {
			return true
		}
		weak = weak || reWeakTok.MatchString(w)
		auth = auth || reAuthTok.MatchString(w)
	}
	return weak && !auth
}

var sqlKinds = []struct {
	op string
	re *regexp.Regexp
}{{"delete", reDelete}, {"select", reSelect}, {"insert", reInsert}, {"update", reUpdate}}

// SQLTokenOp classifies a SQL call on an idempotency token table:
// "delete", "select", "insert", "update" or "".
func (r *Result) SQLTokenOp(c *ssa.CallCommon) string {
	q, ok := r.SQLOf(c)
	if !ok {
		return ""
	}
	for _, k := range sqlKinds {
		op, re := k.op, k.re
		if m := re.FindStringSubmatch(q); m != nil && r.tokenTable(m[1]) {
			if op == "select" && reForUpdate.MatchString(q) {
				return "lock"
			}
			return op
		}
	}
	return ""
}

// words collects the identifying words of a value: constant strings, names
// of parameters, fields, globals and of functions that computed it.
func words(v ssa.Value, depth int, out *[]string) {
	if depth > 6 || v == nil {
		return
	}
	switch v := v.(type) {
	case *ssa.Const:
		if s, ok := ConstString(v); ok {
			*out = append(*out, s)
		}
	case *ssa.Parameter:
		*out = append(*out, v.Name())
	case *ssa.FreeVar:
		*out = append(*out, v.Name())
	case *ssa.Global:
		*out = append(*out, v.Name())
	case *ssa.Alloc:
		*out = append(*out, v.Comment)
		for _, r := range *v.Referrers() {
			switch r := r.(type) {
			case *ssa.Store:
				if r.Addr == v {
					words(r.Val, depth+1, out)
				}
			case *ssa.IndexAddr: // elements of a variadic argument
				for _, r2 := range *r.Referrers() {
					if st, ok := r2.(*ssa.Store); ok && st.Addr == r {
						words(st.Val, depth+1, out)
					}
				}
			}
		}
	case *ssa.FieldAddr:
		*out = append(*out, fieldName(v.X.Type(), v.Field))
		words(v.X, depth+1, out)
	case *ssa.Field:
		*out = append(*out, fieldName(v.X.Type(), v.Field))
	case *ssa.UnOp:
		words(v.X, depth+1, out)
	case *ssa.BinOp:
		words(v.X, depth+1, out)
		words(v.Y, depth+1, out)
	case *ssa.MakeInterface:
		words(v.X, depth+1, out)
	case *ssa.ChangeType:
		words(v.X, depth+1, out)
	case *ssa.Convert:
		words(v.X, depth+1, out)
	case *ssa.IndexAddr:
		words(v.X, depth+1, out)
	case *ssa.Slice:
		words(v.X, depth+1, out)
	case *ssa.Phi:
		for _, e := range v.Edges {
			words(e, depth+1, out)
		}
	case *ssa.Call:
		if fn := CalleeObj(&v.Call); fn != nil {
			*out = append(*out, fn.Name())
		}
		for _, a := range v.Call.Args {
			words(a, depth+1, out)
		}
	}
}

func fieldName(t types.Type, i int) string {
	if p, ok := t.Underlying().(*types.Pointer); ok {
		t = p.Elem()
	}
	if s, ok := t.Underlying().(*types.Struct); ok && i < s.NumFields() {
		return s.Field(i).Name()
	}
	return ""
}

// tokenish reports whether v looks like an idempotency token key.
func tokenish(v ssa.Value) bool {
	var ws []string
	words(v, 0, &ws)
	return tokenWords(ws)
}

// RedisTokenOp classifies a go-redis call on an idempotency token key:
// "delete" (Del, Unlink, GetDel), "check" (Get, Exists, HGet, HExists),
// "claim" (SetNX, SetArgs, Eval*), "write" (Set, HSet) or "".
func RedisTokenOp(c *ssa.CallCommon) string {
	cmd := redisCmd(c)
	if cmd == "" {
		return ""
	}
	var keys []ssa.Value // after ctx (and the receiver of a static call)
	if c.IsInvoke() {
		if len(c.Args) > 1 {
			keys = c.Args[1:]
		}
	} else if len(c.Args) > 2 {
		keys = c.Args[2:]
	}
	switch cmd {
	case "Eval", "EvalSha", "EvalRO", "EvalShaRO":
		return "claim" // scripts are atomic; trust them
	}
	if len(keys) == 0 || !tokenish(keys[0]) {
		return ""
	}
	switch cmd {
	case "Del", "Unlink", "GetDel":
		return "delete"
	case "Get", "Exists", "HGet", "HExists", "HGetAll", "SIsMember":
		return "check"
	case "SetNX", "SetArgs", "HSetNX", "SetNx":
		return "claim"
	case "Set", "HSet", "SetEx", "Expire":
		return "write"
	}
	return ""
}

// isFailedConst reports whether v is a constant spelling a failed state.
func isFailedConst(v ssa.Value) bool {
	s, ok := ConstString(v)
	return ok && reFailed.MatchString(s)
}

var (
	reStatusSetter = regexp.MustCompile(`(?i)^(set|update|save|mark|write|record|transition|finish|complete|persist|store)\w*(state|status)$|^(state|status)$`)
	// markPaymentFailed, HandleFailedPayment, onChargeFailure, failPayment,
	// cancelOrder, reverseTransfer, releaseReservation, rollbackReservation,
	// restoreStock, ...
	reMarkFailed = regexp.MustCompile(`^(?i:mark|set|save|record|persist|flag|handle|process|on|update|move|transition)\w*(Fail(ed|ure)?|Cancel+ed|Declined|Rejected|Revers(ed|al))\w*$` +
		`|^(?i:mark|set|handle|on)(As)?(fail|cancel|declin|reject)\w*$` +
		`|^(?i:fail|cancel|reverse|void|revert|compensate|undo)(Intent|Payment|Charge|Order|Operation|Transfer|Transaction|Invoice|Withdrawal|Deposit|Reservation|Booking|Subscription|Payout)s?\w*$` +
		`|^(?i:roll_?back)(Payment|Charge|Order|Transfer|Withdrawal|Deposit|Reservation|Booking|Payout|Hold|Stock|Inventory)s?\w*$` +
		`|^(?i:release|restore|unreserve)(Reservation|Hold|Funds|Stock|Inventory|Balance)s?\w*$|^(?i:reverse|revert)(Ledger|Entry|Entries|Balance|Fee)\w*$`)
	reRefund      = regexp.MustCompile(`^(?i:issue|create|do|start|make|send)?(?i:refund)`)
	rePermanent   = regexp.MustCompile(`(?i)permanent`)
	reStatusParam = regexp.MustCompile(`(?i)state|status`)
)

// ReadOnlyLeaf reports whether the leaf network call of a chain cannot have
// a remote effect (an HTTP GET/HEAD, a dial, a go-redis read): its failure
// may be handled as a failure.
func ReadOnlyLeaf(p *Path) bool {
	leaf := p.Chain[len(p.Chain)-1]
	if i := strings.Index(leaf, ")."); i > 0 && (strings.HasPrefix(leaf, "(redis.") || strings.HasPrefix(leaf, "(*redis.")) {
		return redisReads[leaf[i+2:]]
	}
	switch leaf {
	case "http.Get", "http.Head", "(*http.Client).Get", "(*http.Client).Head",
		"net.Dial", "net.DialTimeout", "(*net.Dialer).Dial", "(*net.Dialer).DialContext",
		"(redis.cmdable).Get", "(redis.cmdable).Exists", "(redis.cmdable).HGet",
		"(redis.Cmdable).Get", "(redis.Cmdable).Exists", "(redis.Cmdable).HGet":
		return true
	}
	return false
}
