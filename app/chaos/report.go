package chaos

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Fault kinds, in the order the table lists them.
const (
	FaultKillConsumer    = "kill-consumer"
	FaultKillRelay       = "kill-relay"
	FaultSIGTERM         = "sigterm"
	FaultCut             = "conn-cut"
	FaultStall           = "conn-stall"
	FaultDBCut           = "db-cut"
	FaultDuplicates      = "duplicates"
	FaultSlowHandler     = "slow-handler"
	FaultSIGTERMMidCall  = "sigterm-mid-call"
	FaultRabbitMQRestart = "rabbitmq-restart"
	FaultPostgresRestart = "postgres-restart"
)

var faultOrder = []string{FaultKillConsumer, FaultKillRelay, FaultSIGTERM, FaultCut, FaultStall, FaultDBCut, FaultDuplicates, FaultSlowHandler, FaultSIGTERMMidCall, FaultRabbitMQRestart, FaultPostgresRestart}

// Row is one flow's count on one broker.
type Row struct {
	Flow string
	// Sent: events the producer committed (outbox) or the broker confirmed
	// (foreign publisher), poison messages not included.
	Sent int
	// Effects: sent events whose effect is in the database.
	Effects int
	// Lost: sent events without an effect after the settle time.
	Lost int
	// Unsent: messages the mode planned that the producer could not send
	// (it ran out of time: the broker refused it for the whole traffic).
	// A run that sent less than planned proves less than it says: a failure.
	Unsent int
	// Duplicated: effect transactions committed more than once for one
	// event id (the extra ones).
	Duplicated int
	// PoisonSent is how many messages were sent to be dead-lettered;
	// DeadExpected how many of them are in the DLQ, DeadOther how many
	// other messages are.
	PoisonSent, DeadExpected, DeadOther int
	// DuplicatesSent is how many already-confirmed messages the duplicates
	// fault sent again (not in Sent; listed in the notes, not the table).
	DuplicatesSent int
	// DLQDepth is how many messages the DLQ holds: more than DeadExpected
	// + DeadOther when a message was dead-lettered more than once.
	DLQDepth int
	// OutOfOrder: events applied after a later event of their session; -1
	// when the flow has no order.
	OutOfOrder int
	// Faults counts the injected faults by kind.
	Faults map[string]int
	// MaxRecovery is the longest time from a fault to the next effect, and
	// the kind of that fault; NoRecovery counts faults after which no
	// effect came at all.
	MaxRecovery     time.Duration
	MaxRecoveryKind string
	NoRecovery      int
}

// Failed reports whether the row breaks a reliability contract: a lost or
// duplicated effect, or an event applied out of order — or whether the run
// could not send what it planned.
func (r Row) Failed() bool { return r.Lost > 0 || r.Duplicated > 0 || r.OutOfOrder > 0 || r.Unsent > 0 }

// FaultSummary lists the faults by kind, "kill-consumer 3, sigterm 2".
func FaultSummary(faults map[string]int) string {
	kinds := make([]string, 0, len(faults))
	for k := range faults {
		kinds = append(kinds, k)
	}
	rank := func(k string) int {
		if i := slices.Index(faultOrder, k); i >= 0 {
			return i
		}
		return len(faultOrder)
	}
	slices.SortFunc(kinds, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, 0, len(kinds))
	total := 0
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, faults[k]))
		total += faults[k]
	}
	if total == 0 {
		return "none"
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

// Render writes one broker's table.
func Render(w io.Writer, title string, rows []Row) error {
	if _, err := fmt.Fprintf(w, "%s\n\n", title); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	// A tabwriter buffers: a write error surfaces at Flush.
	_, _ = fmt.Fprintln(tw, "flow\tsent\teffects\tlost\tduplicated\tdead-lettered (expected/sent, other)\tout-of-order\tfaults injected\tmax recovery\tresult")
	for _, r := range rows {
		order := "n/a"
		if r.OutOfOrder >= 0 {
			order = fmt.Sprint(r.OutOfOrder)
		}
		rec := "n/a"
		if r.MaxRecoveryKind != "" {
			rec = fmt.Sprintf("%s (%s)", r.MaxRecovery.Round(100*time.Millisecond), r.MaxRecoveryKind)
		}
		if r.NoRecovery > 0 {
			rec += fmt.Sprintf(", %d without any effect after", r.NoRecovery)
		}
		dead := fmt.Sprintf("%d/%d, other %d", r.DeadExpected, r.PoisonSent, r.DeadOther)
		if r.DLQDepth > r.DeadExpected+r.DeadOther {
			dead += fmt.Sprintf(" (%d copies)", r.DLQDepth)
		}
		result := "ok"
		if r.Failed() {
			result = "FAIL"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n",
			r.Flow, r.Sent, r.Effects, r.Lost, r.Duplicated, dead, order, FaultSummary(r.Faults), rec, result)
	}
	return tw.Flush()
}
