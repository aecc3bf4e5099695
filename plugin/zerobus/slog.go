package zerobus

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/service"
)

// slogHandler forwards slog records from the internal packages (the catalog
// logs its reconcile plans and statements through slog) to the output's
// Benthos logger, so they carry the component's labels and honour the
// pipeline's log level.
type slogHandler struct {
	log   *service.Logger
	attrs string
}

func newSlogLogger(l *service.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(&slogHandler{log: l})
}

func (h *slogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *slogHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	b.WriteString(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	msg := b.String()
	switch {
	case r.Level >= slog.LevelError:
		h.log.Error(msg)
	case r.Level >= slog.LevelWarn:
		h.log.Warn(msg)
	case r.Level >= slog.LevelInfo:
		h.log.Info(msg)
	default:
		h.log.Debug(msg)
	}
	return nil
}

func (h *slogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range attrs {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
	}
	return &slogHandler{log: h.log, attrs: b.String()}
}

func (h *slogHandler) WithGroup(string) slog.Handler { return h }
