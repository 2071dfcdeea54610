package sim

// RegressionSeeds are seeds that once found a bug: [Regressions] runs them
// on every test run, beside the fresh seeds [Runs] draws. When a run fails,
// its seed is printed (replay it with IDEM_SIM_SEED); once the bug is
// fixed, add the seed here with what it found, so that the schedule stays
// covered whatever the fresh seeds do. A seed replays the same schedule
// only while the simulation draws its random numbers the same way: a
// change to the simulation may move a seed's schedule, and its test then
// keeps only the schedule's kind.
var RegressionSeeds = []struct {
	Seed  uint64
	Found string
}{
	{5774362457003306479, "memstore: a query's heartbeat whose renewals failed (a renewal applied, its reply late, the next ones failing) spun at the instant its lease stopped being known to hold; virtual time never moved again (runtime.TestQueryHeartbeatDoesNotSpinAtItsDeadline)"},
}
