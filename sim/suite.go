package sim

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

//go:embed scenarios/*.yaml
var suiteFS embed.FS

// suiteOrder is the order of the built-in suite.
var suiteOrder = []string{"steady", "slowdown", "slowdown-headroom", "capacity-loss", "spike", "retry-storm", "retry-budget", "mixed", "llm", "fleet"}

// SuiteNames returns the names of the built-in scenarios, in suite order.
func SuiteNames() []string { return slices.Clone(suiteOrder) }

// Builtin returns the built-in scenario of the given name.
func Builtin(name string) (*Scenario, error) {
	data, err := fs.ReadFile(suiteFS, path.Join("scenarios", name+".yaml"))
	if err != nil {
		return nil, fmt.Errorf("no built-in scenario %q (built-in: %s)", name, strings.Join(suiteOrder, ", "))
	}
	return ParseScenario("builtin:"+name+".yaml", data)
}

// BuiltinSource returns the YAML of a built-in scenario, a starting point
// for one's own.
func BuiltinSource(name string) ([]byte, error) {
	return fs.ReadFile(suiteFS, path.Join("scenarios", name+".yaml"))
}

// Suite returns the built-in scenarios: steady load, a 10x upstream
// slowdown (and the same with an upstream provisioned with room), a
// ten-fold loss of upstream capacity, a 3x traffic spike, a retry storm that turns metastable
// without a budget and the same with budgets, interactive and batch at 3x
// overload, an LLM token-cost mix, and a fleet of 100 replicas.
func Suite() ([]*Scenario, error) {
	var out []*Scenario
	for _, n := range suiteOrder {
		sc, err := Builtin(n)
		if err != nil {
			return nil, err
		}
		out = append(out, sc)
	}
	return out, nil
}
