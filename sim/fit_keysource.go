package sim

import (
	"fmt"
	"strings"

	"github.com/shedkit/shedkit/record"
)

// maxKeySources bounds the key sources a fit names, whatever a damaged
// stream's headers hold.
const maxKeySources = 4

// keySources are the key sources (record.Header.KeySource) of the files
// whose keyed records a set holds: where the service took those keys
// from.
type keySources struct {
	said   []saidSource // distinct, in the order they came
	more   bool         // more distinct ones than maxKeySources
	unsaid string       // the first file that says none
}

type saidSource struct{ src, file string }

// add notes that file's keyed records came from src ("": not said).
func (k *keySources) add(src, file string) {
	switch {
	case src == "":
		if k.unsaid == "" {
			k.unsaid = file
		}
	case k.has(src):
	case len(k.said) == maxKeySources:
		k.more = true
	default:
		k.said = append(k.said, saidSource{src, file})
	}
}

func (k *keySources) has(src string) bool {
	for _, s := range k.said {
		if s.src == src {
			return true
		}
	}
	return false
}

// merged returns the sources of k and o together.
func (k *keySources) merged(o *keySources) keySources {
	m := keySources{said: append([]saidSource(nil), k.said...), more: k.more || o.more, unsaid: k.unsaid}
	for _, s := range o.said {
		m.add(s.src, s.file)
	}
	if m.unsaid == "" {
		m.unsaid = o.unsaid
	}
	return m
}

// resolve returns the source of the keys counted, "" when their files
// say none or disagree, and the notes that say why. Keys from two
// sources mix tenants named two ways (a header's value, an address),
// and a configuration can take its keys from one place only: a fit that
// picked one would have shedsim tune set a KeyHeader the traffic did not
// all come through.
func (k *keySources) resolve() (string, []string) {
	switch {
	case len(k.said) == 0:
		return "", nil
	case len(k.said) > 1 || k.more:
		var parts []string
		for _, s := range k.said {
			parts = append(parts, fmt.Sprintf("%s says %s", s.file, s.src))
		}
		if k.more {
			parts = append(parts, "and more")
		}
		return "", []string{fmt.Sprintf("keys: the files counted disagree on where the keys came from (%s): the scenario says none (keys.source), "+
			"and shedsim tune will not set a KeyHeader", strings.Join(parts, ", "))}
	case k.unsaid != "":
		s := k.said[0]
		return s.src, []string{fmt.Sprintf("keys: %s does not say where its keys came from (written before recordings said, or by a driver that does not tell) but %s says %s: "+
			"the scenario takes it for all (keys.source)", k.unsaid, s.file, s.src)}
	}
	return k.said[0].src, nil
}

// describeKeySource says where keys from src came from, for the report.
func describeKeySource(src string) string {
	if name, ok := record.KeySourceHeader(src); ok {
		return "the trusted request header " + name + " (shedhttp.Options.KeyHeader; the client address for a request without it)"
	}
	switch src {
	case "":
		return "not said by the recording (or said differently by its files: see the notes)"
	case record.KeySourceAddr:
		return "the client address (no KeyHeader)"
	case record.KeySourceClassify:
		return "the service's Classify function, which replaced the middleware's key"
	}
	return src + " (a source this shedsim does not know)"
}
