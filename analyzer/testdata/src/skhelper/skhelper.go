// Package skhelper mints keys for its callers.
package skhelper

import (
	"fmt"
	"time"

	"github.com/google/uuid"
)

// NewKey returns a fresh key on every call.
func NewKey() string { // want NewKey:`fresh\(uuid.NewString\(\)\)`
	return uuid.NewString()
}

// OrderKey derives the key from the order: the same on every call.
func OrderKey(orderID string) string {
	return "order:" + orderID
}

// StampedKey is fresh on one path only: not a mint.
func StampedKey(orderID string, stamp bool) string {
	if stamp {
		return fmt.Sprint(orderID, time.Now().UnixNano())
	}
	return orderID
}

// DayKey is the same all day: a window key, not a mint.
func DayKey(orderID string) string {
	return orderID + ":" + time.Now().Format("2006-01-02")
}
