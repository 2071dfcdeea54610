package runtime

import (
	"testing"
	"unsafe"
)

// TestRunningSizeClass guards the size of what a claimed call allocates
// to run with: above 512 bytes an object with pointers carries an 8-byte
// header, and at most 632 bytes it takes the 640-byte size class, not
// the 704-byte one (allocation volume sets how often the collector runs).
func TestRunningSizeClass(t *testing.T) {
	if n := unsafe.Sizeof(running{}); n+8 > 640 {
		t.Fatalf("running is %d bytes (%d with its header): above the 640-byte size class", n, n+8)
	}
}
