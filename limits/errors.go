package limits

import (
	"errors"
	"fmt"
	"math"

	"github.com/shedkit/shedkit/shed"
)

// ErrInvalidConfig is wrapped by every configuration error of this package.
// The message names the offending field.
var ErrInvalidConfig = errors.New("limits: invalid config")

func configError(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
}

// finite reports whether f is neither NaN nor infinite.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

// limitRange validates and defaults the common initial/min/max triple.
// defInitial is clamped into [min, max] when the caller left Initial zero.
func limitRange(prefix string, initial, minL, maxL, defInitial int) (int, int, int, error) {
	if minL < 0 {
		return 0, 0, 0, configError(prefix+".MinLimit", "must be >= 0, got %d", minL)
	}
	if maxL < 0 {
		return 0, 0, 0, configError(prefix+".MaxLimit", "must be >= 0, got %d", maxL)
	}
	if initial < 0 {
		return 0, 0, 0, configError(prefix+".InitialLimit", "must be >= 0, got %d", initial)
	}
	if minL == 0 {
		minL = DefaultMinLimit
	}
	// Named before the default MaxLimit is derived from them, so that the
	// error names the field that was set.
	if minL > shed.MaxLimit {
		return 0, 0, 0, configError(prefix+".MinLimit", "must be <= shed.MaxLimit (%d), got %d", shed.MaxLimit, minL)
	}
	if initial > shed.MaxLimit {
		return 0, 0, 0, configError(prefix+".InitialLimit", "must be <= shed.MaxLimit (%d), got %d", shed.MaxLimit, initial)
	}
	if maxL == 0 {
		maxL = max(DefaultMaxLimit, minL, initial)
	}
	if maxL < minL {
		return 0, 0, 0, configError(prefix+".MaxLimit", "must be >= MinLimit (%d), got %d", minL, maxL)
	}
	// A shed.Limiter enforces at most shed.MaxLimit; above it a limit
	// means nothing, and near math.MaxInt its float64 form would not
	// convert back to an int.
	if maxL > shed.MaxLimit {
		return 0, 0, 0, configError(prefix+".MaxLimit", "must be <= shed.MaxLimit (%d), got %d", shed.MaxLimit, maxL)
	}
	if initial == 0 {
		initial = min(max(defInitial, minL), maxL)
	}
	if initial < minL || initial > maxL {
		return 0, 0, 0, configError(prefix+".InitialLimit", "must be in [MinLimit, MaxLimit] = [%d, %d], got %d", minL, maxL, initial)
	}
	return initial, minL, maxL, nil
}
