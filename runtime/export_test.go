package runtime

import "time"

// RenewalsScheduled returns how many heartbeats rt's renewals hold and when
// its timer fires (zero when it is not armed), for runtime_test.
func RenewalsScheduled(rt *Runtime) (int, time.Time) {
	rt.renewals.mu.Lock()
	defer rt.renewals.mu.Unlock()
	return len(rt.renewals.due), rt.renewals.at
}

// RenewEvery is the lease's fraction between renewals, for runtime_test.
const RenewEvery = renewEvery
