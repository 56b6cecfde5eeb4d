package limiter

import (
	"fmt"
	"time"
)

// WindowConfig is the config of a window limiter of limit permits per
// period in fixed windows aligned to the Unix epoch (the Envoy reference
// server's rate_limit of limit requests per unit), normalized and checked
// as any config: its errors are *FieldError naming limit or period.
func WindowConfig(limit int64, period time.Duration) (Config, error) {
	c, _, err := Config{Kind: KindWindow, Limit: &limit, Period: shortDuration(period)}.Normalize()
	if err == nil {
		_, err = Compile(c)
	}
	if err != nil {
		return Config{}, err
	}
	return c, nil
}

// shortDuration writes a whole number of hours, minutes or seconds as people
// do ("24h", "1m", "1s"), anything else as time.Duration does.
func shortDuration(d time.Duration) string {
	for _, u := range []struct {
		unit   time.Duration
		suffix string
	}{{time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}} {
		if d > 0 && d%u.unit == 0 {
			return fmt.Sprintf("%d%s", d/u.unit, u.suffix)
		}
	}
	return d.String()
}
