package doors

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/idemkit/idem/runtime"
)

// errorLog is the adapters' logger: it notes every record in the trail of
// the delivery it concerns (found from the context) and keeps the ERROR
// records, which claim a store failure: with no store fault injected on
// the delivery's identity, each one is a violation.
type errorLog struct {
	r     *run
	attrs []slog.Attr
}

func (h *errorLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *errorLog) Handle(ctx context.Context, rec slog.Record) error {
	r := h.r
	d := r.deliveryByID(deliveryIn(ctx))
	if d == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rec.Level, rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	ident := r.ident(d.req)
	r.note(ident, "adapter log for delivery %d: %s", d.id, short(b.String()))
	r.mu.Lock()
	if rec.Level >= slog.LevelError {
		d.errorLogs = append(d.errorLogs, b.String())
	}
	if strings.Contains(b.String(), runtime.ErrLeaseLost.Error()) {
		d.leaseLost = true
	}
	if notRecordedTimeout(b.String()) {
		d.notRecordedTimeout = true
	}
	if strings.Contains(b.String(), lateStartText) {
		d.lateStart = true
	}
	r.mu.Unlock()
	return nil
}

func (h *errorLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &errorLog{r: h.r, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *errorLog) WithGroup(string) slog.Handler { return h }
