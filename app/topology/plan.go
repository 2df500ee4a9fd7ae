package topology

import (
	"fmt"
	"sort"
	"strings"
)

// Change kinds in a Plan.
const (
	// Missing: declared, absent on the broker. Apply creates it.
	Missing = "missing"
	// Extra: on the broker, not declared (e.g. a binding nobody declared).
	// Reported, never deleted by Apply.
	Extra = "extra"
	// Differs: present on both sides with another value. Apply changes it when
	// the broker allows it in place (SQS attributes); otherwise (RabbitMQ
	// queue arguments) it reports what to do and changes nothing.
	Differs = "differs"
)

// Change is one difference between a declared topology and a live broker.
type Change struct {
	Kind string
	// Object is what differs, e.g. "queue stackup.q.generate.questions" or
	// "binding stackup.core-to-ai -> q.x (generate.x)".
	Object string
	// Attribute is the differing argument or attribute, for Differs.
	Attribute string
	// Want is the declared value, Have the live one ("" when absent).
	Want, Have string
	// Fix tells the operator what to do when Apply cannot (e.g. a RabbitMQ
	// queue argument can only change by deleting the queue).
	Fix string
}

func (c Change) String() string {
	var b strings.Builder
	switch c.Kind {
	case Missing:
		fmt.Fprintf(&b, "+ %s", c.Object)
	case Extra:
		fmt.Fprintf(&b, "- %s (not declared; left alone)", c.Object)
	default:
		fmt.Fprintf(&b, "~ %s: %s: declared %s, live %s", c.Object, c.Attribute, orNone(c.Want), orNone(c.Have))
	}
	if c.Attribute != "" && c.Kind == Missing {
		fmt.Fprintf(&b, " %s=%s", c.Attribute, c.Want)
	}
	if c.Fix != "" {
		fmt.Fprintf(&b, "\n    fix: %s", c.Fix)
	}
	return b.String()
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Plan is every difference found, in a stable order.
type Plan []Change

// InSync reports whether nothing differs (extras included: drift is drift).
func (p Plan) InSync() bool { return len(p) == 0 }

// Sort orders changes by object, then attribute, then kind.
func (p Plan) Sort() {
	sort.SliceStable(p, func(i, j int) bool {
		if p[i].Object != p[j].Object {
			return p[i].Object < p[j].Object
		}
		if p[i].Attribute != p[j].Attribute {
			return p[i].Attribute < p[j].Attribute
		}
		return p[i].Kind < p[j].Kind
	})
}

// String renders the plan as a readable diff, one change per line.
func (p Plan) String() string {
	if p.InSync() {
		return "in sync: nothing to change\n"
	}
	var b strings.Builder
	for _, c := range p {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "%d change(s)\n", len(p))
	return b.String()
}
