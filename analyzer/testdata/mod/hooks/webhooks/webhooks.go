// Package webhooks sends webhooks from a worker goroutine fed through a
// channel: a Manager interface, and Webhook implementations that embed a
// BaseWebhook doing the HTTP POST.
package webhooks

import (
	"bytes"
	"database/sql"
	"fmt"
	"net/http"
	"time"
)

// Webhook is one configured hook.
type Webhook interface {
	Trigger(data []byte) error
	IsEnabled() bool
}

// BaseWebhook posts to its callback.
type BaseWebhook struct {
	Callback string
	Timeout  time.Duration
}

// Trigger posts data to the callback.
func (bh *BaseWebhook) Trigger(data []byte) error {
	req, err := http.NewRequest(http.MethodPost, bh.Callback, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("webhook request: %w", err)
	}
	client := http.Client{Timeout: bh.Timeout}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook post: %w", err)
	}
	return resp.Body.Close()
}

// ConfigHook is a hook from the configuration file.
type ConfigHook struct{ BaseWebhook }

// IsEnabled: configured hooks always are.
func (ch *ConfigHook) IsEnabled() bool { return true }

// DatabaseHook is a hook stored in the database.
type DatabaseHook struct {
	BaseWebhook
	Enabled bool
}

// IsEnabled reports the stored flag.
func (dh *DatabaseHook) IsEnabled() bool { return dh.Enabled }

// Job is one webhook to send.
type Job struct {
	Data []byte
	Hook Webhook
}

// Worker sends the jobs it receives.
type Worker struct{ jobs chan Job }

// Run sends every job.
func (w *Worker) Run() {
	for job := range w.jobs {
		if err := w.trigger(job); err != nil {
			continue
		}
	}
}

func (w *Worker) trigger(job Job) error {
	if !job.Hook.IsEnabled() {
		return nil
	}
	return job.Hook.Trigger(job.Data)
}

// Manager triggers the hooks of an event.
type Manager interface {
	Trigger(tx *sql.Tx, event string, data []byte)
}

type manager struct{ hooks []Webhook }

// NewManager returns a manager for the configured hooks.
func NewManager(callbacks []string) Manager {
	m := &manager{}
	for _, c := range callbacks {
		m.hooks = append(m.hooks, &ConfigHook{BaseWebhook{Callback: c}})
	}
	return m
}

// Trigger reads the stored hooks in tx, queues a job per hook and starts a
// worker.
func (m *manager) Trigger(tx *sql.Tx, event string, data []byte) {
	hooks := m.hooks
	rows, err := tx.Query("SELECT callback FROM webhooks WHERE enabled")
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var cb string
		if rows.Scan(&cb) == nil {
			hooks = append(hooks, &DatabaseHook{BaseWebhook: BaseWebhook{Callback: cb}, Enabled: true})
		}
	}
	jobs := make(chan Job, len(hooks))
	for _, h := range hooks {
		jobs <- Job{Data: data, Hook: h}
	}
	close(jobs)
	w := &Worker{jobs: jobs}
	go w.Run()
}
