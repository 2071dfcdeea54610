// Package webhooks sends webhooks from a worker goroutine fed through a
// channel, in the shape of hanko's webhook manager.
package webhooks

import (
	"net/http"
	"strings"
)

// Job is one webhook to send.
type Job struct {
	URL, Event string
}

// Worker sends the jobs it receives.
type Worker struct{ jobs chan Job }

// Run sends every job over HTTP.
func (w *Worker) Run() {
	for job := range w.jobs {
		resp, err := http.Post(job.URL, "application/json", strings.NewReader(`{"event":"`+job.Event+`"}`))
		if err == nil {
			resp.Body.Close()
		}
	}
}

// Manager knows the hooks.
type Manager struct{ URLs []string }

// Trigger queues the event for every hook and starts a worker.
func (m *Manager) Trigger(event string) {
	jobs := make(chan Job, len(m.URLs))
	for _, u := range m.URLs {
		jobs <- Job{URL: u, Event: event}
	}
	close(jobs)
	w := &Worker{jobs: jobs}
	go w.Run()
}
