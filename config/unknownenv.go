package config

import (
	"fmt"
	"reflect"
	"strings"
)

// toolVariables are EVENTPIPE_* variables read by eventpipe's development
// tools, not by the configuration: the command line's EVENTPIPE_CONFIG, the
// tests' (EVENTPIPE_TEST_*), the benchmark and chaos harnesses, the browser
// test and the SQS emulator's script. Prefixes end in "_".
var toolVariables = []string{
	envPrefix + "CONFIG",
	envPrefix + "TEST_",
	envPrefix + "BENCH",
	envPrefix + "CHAOS",
	envPrefix + "CHROMIUM",
	envPrefix + "SQS_EMULATOR_",
}

// UnknownEnvVar is an EVENTPIPE_* variable that nothing reads: a typo, or a
// key that no longer exists. Load ignores it.
type UnknownEnvVar struct {
	// Name is the variable as set.
	Name string
	// Suggestion is the known variable it most likely means, or "".
	Suggestion string
}

// String is the warning to show: the variable, that it is ignored, and the
// suggestion.
func (u UnknownEnvVar) String() string {
	s := fmt.Sprintf("%s is not a variable eventpipe reads; it is ignored", u.Name)
	if u.Suggestion != "" {
		s += "; did you mean " + u.Suggestion + "?"
	}
	return s
}

// UnknownEnvVars returns the EVENTPIPE_* variables of environ (KEY=VALUE
// strings) that are neither a key's variable (EnvVars, the EVENTPIPE_BROKER
// alias included), nor a secret cfg's *_env keys name, nor one of the
// development tools' variables, each with the closest known variable when
// one is close enough to be a typo. In the order of environ.
func UnknownEnvVars(cfg Config, environ []string) []UnknownEnvVar {
	known := map[string]bool{brokerAlias: true}
	var names []string
	for _, v := range EnvVars() {
		known[v.Name] = true
		names = append(names, v.Name)
	}
	// The variables *_env keys name hold secrets (admin and realtime token
	// secrets, the bulkRegister token, an LLM key).
	defaults, cur := reflect.ValueOf(Defaults()), reflect.ValueOf(cfg)
	for _, k := range keys() {
		if strings.HasSuffix(k.path, "_env") && k.typ.Kind() == reflect.String {
			for _, v := range []reflect.Value{defaults, cur} {
				if name := v.FieldByIndex(k.index).String(); name != "" {
					known[name] = true
					names = append(names, name)
				}
			}
		}
	}
	var out []UnknownEnvVar
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || known[name] || isToolVariable(name) {
			continue
		}
		out = append(out, UnknownEnvVar{Name: name, Suggestion: closest(name, names)})
	}
	return out
}

func isToolVariable(name string) bool {
	for _, t := range toolVariables {
		if name == t || (strings.HasSuffix(t, "_") && strings.HasPrefix(name, t)) ||
			(!strings.HasSuffix(t, "_") && strings.HasPrefix(name, t+"_")) {
			return true
		}
	}
	return false
}

// closest is the name of names nearest to name, when it is near enough to
// be a typo: the same but for underscores and case (EVENTPIPE_SQS_BATCHSIZE),
// or at most a few edits away (a third of the differing part's length, at
// most 3).
func closest(name string, names []string) string {
	norm := func(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "_", "")) }
	best, bestDist := "", -1
	for _, n := range names {
		if norm(n) == norm(name) {
			return n
		}
		d := editDistance(strings.TrimPrefix(name, envPrefix), strings.TrimPrefix(n, envPrefix))
		if bestDist < 0 || d < bestDist {
			best, bestDist = n, d
		}
	}
	limit := min(3, max(1, len(strings.TrimPrefix(name, envPrefix))/3))
	if bestDist < 0 || bestDist > limit {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes; the names are
// ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
