package retrybudget

import (
	"net/http"
	"strings"
	"time"
)

// MaxParsedRetryAfter caps what [ParseRetryAfter] returns. Any longer
// delay means "not within this request's lifetime" just as well.
const MaxParsedRetryAfter = 24 * time.Hour

// ParseRetryAfter parses a Retry-After header value (RFC 9110 10.2.3),
// either delta-seconds ("120") or an HTTP-date ("Wed, 21 Oct 2015
// 07:28:00 GMT", and the obsolete RFC 850 and asctime forms), relative to
// now. The delay is capped at MaxParsedRetryAfter, and a date in the past
// gives 0. ok is false for an empty or malformed value, which callers
// ignore.
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if c := v[0]; c >= '0' && c <= '9' {
		const maxSeconds = int64(MaxParsedRetryAfter / time.Second)
		var secs int64
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs <= maxSeconds {
				secs = secs*10 + int64(c-'0')
			}
		}
		if secs > maxSeconds {
			return MaxParsedRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now)
	switch {
	case d < 0:
		d = 0
	case d > MaxParsedRetryAfter:
		d = MaxParsedRetryAfter
	}
	return d, true
}
