//go:build !goexperiment.jsonv2

package jsonfast

// Enabled: plans are built. encoding/json here is the classic encoder, whose
// bytes the plans write (see enabled_jsonv2.go).
const Enabled = true
