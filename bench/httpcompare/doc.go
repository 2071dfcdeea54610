// Package httpcompare benchmarks runtime/idemhttp beside fiber v3's
// idempotency middleware, both on an in-memory store, over loopback with the
// same net/http client: requests per second for first calls (a new key each)
// and replays (one key), each beside its framework without the middleware.
// BenchmarkSides serves all six in one process, in turns of a few
// milliseconds each, and reports the ratios; the six single benchmarks
// report each side's allocations. It is a module of its own so that fiber
// never enters the main module's graph. Run it with bench/http.sh.
package httpcompare
