// Package testlog is a slog.Handler for tests that check what was logged
// at which level.
package testlog

import (
	"context"
	"log/slog"
	"sync"
)

// Handler records the level and message of every record; it is safe for
// concurrent use. Its zero value is ready.
type Handler struct {
	mu      sync.Mutex
	levels  []slog.Level
	records []string
}

// New returns a logger writing to a new Handler, and the Handler.
func New() (*slog.Logger, *Handler) {
	h := &Handler{}
	return slog.New(h), h
}

func (h *Handler) Enabled(context.Context, slog.Level) bool { return true }

func (h *Handler) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.levels = append(h.levels, r.Level)
	h.records = append(h.records, r.Message)
	return nil
}

func (h *Handler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *Handler) WithGroup(string) slog.Handler      { return h }

// At returns the messages logged at level or above.
func (h *Handler) At(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for i, l := range h.levels {
		if l >= level {
			out = append(out, h.records[i])
		}
	}
	return out
}
