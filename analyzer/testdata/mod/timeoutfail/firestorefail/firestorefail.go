// Package firestorefail: a calendar call's error written as a failed
// status through Firestore (the real cloud.google.com/go/firestore).
package firestorefail

import (
	"context"
	"errors"

	"cloud.google.com/go/firestore"

	"example.com/orm/netx"
)

type SyncStatus string

const (
	SyncPending SyncStatus = "pending"
	SyncDone    SyncStatus = "done"
	SyncFailed  SyncStatus = "failed"
)

// SyncEvent creates the calendar event; on error it writes Status FAILED.
func SyncEvent(ctx context.Context, doc *firestore.DocumentRef, id string) error {
	if err := netx.Notify(ctx, id); err != nil {
		_, _ = doc.Update(ctx, []firestore.Update{{Path: "Status", Value: SyncFailed}}) // want `writes a FAILED status`
		return err
	}
	_, err := doc.Update(ctx, []firestore.Update{{Path: "Status", Value: SyncDone}})
	return err
}

// SyncEventSet writes the failure with Set and a merge.
func SyncEventSet(ctx context.Context, doc *firestore.DocumentRef, id string) error {
	if err := netx.Notify(ctx, id); err != nil {
		_, _ = doc.Set(ctx, map[string]any{"status": "failed"}, firestore.MergeAll) // want `writes a FAILED status`
		return err
	}
	return nil
}

// SyncEventOK tells a timeout apart first.
func SyncEventOK(ctx context.Context, doc *firestore.DocumentRef, id string) error {
	if err := netx.Notify(ctx, id); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		_, _ = doc.Update(ctx, []firestore.Update{{Path: "Status", Value: SyncFailed}})
		return err
	}
	return nil
}

// SyncTitle writes a field that is no status.
func SyncTitle(ctx context.Context, doc *firestore.DocumentRef, id string) error {
	if err := netx.Notify(ctx, id); err != nil {
		_, _ = doc.Update(ctx, []firestore.Update{{Path: "Title", Value: "failed"}})
		return err
	}
	return nil
}
