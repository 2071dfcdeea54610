package buflag

import "gorm.io/gorm"

type Credential struct {
	ID          string
	BackupState bool
	SignCount   uint32
}

type Ticket struct {
	ID          string
	BackupState bool
	Status      string
}

// 3. gorm: a bool field named like a state, set by name or in a struct
// literal, on a model whose only state-named field is that flag. Silent.
func gormSaveLogin(db *gorm.DB, c *Credential, backedUp bool) {
	db.Model(c).Update("backup_state", backedUp)
	db.Model(c).Updates(Credential{BackupState: backedUp, SignCount: 2})
}

// The same flag on a model with a real status, set by name with a string:
// reported; and Status set beside the flag: reported.
func gormTicket(db *gorm.DB, t *Ticket) {
	db.Model(t).Update("status", "CLOSED")                           // want `gorm Update at gorm\.go:\d+:\d+ sets status of Ticket`
	db.Model(t).Updates(Ticket{BackupState: true, Status: "CLOSED"}) // want `gorm Updates at gorm\.go:\d+:\d+ sets Status of Ticket`
}
